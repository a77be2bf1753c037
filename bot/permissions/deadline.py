"""A time limit on judging one tool call, checked by the loops that can take long.

The permission hook judges a call on a worker thread (see
:func:`bot.permissions.hook.PermissionHook.__call__`), but a thread cannot be stopped
from outside: the work itself has to notice that its time is up. :func:`judging_until`
sets the deadline for the calls made inside it (a context variable, so it follows the
work into the thread), and :func:`check_deadline` raises :class:`JudgingTooLong` once
it has passed. Parsing, the danger checks, glob expansion and the secret checks call it
as they go; the hook turns the error into a question for a person.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["JudgingTooLong", "check_deadline", "judging_until"]

_deadline: ContextVar[float | None] = ContextVar("baton_judging_deadline", default=None)


class JudgingTooLong(Exception):
    """Raised when judging a call takes longer than its deadline allows."""


@contextlib.contextmanager
def judging_until(deadline: float) -> Iterator[None]:
    """Bound the judging done inside the block by ``deadline`` (a ``time.monotonic()`` value)."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def check_deadline() -> None:
    """Raise :class:`JudgingTooLong` when the current judging is past its deadline."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise JudgingTooLong("judging this call took too long")
