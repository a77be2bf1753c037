"""A time limit on judging one tool call, checked by the loops that can take long.

The permission hook judges a call on a worker thread (see
:func:`bot.permissions.hook.PermissionHook.__call__`), but a thread cannot be stopped
from outside: the work itself has to notice that its time is up. :func:`judging_until`
sets the deadline for the calls made inside it (a context variable, so it follows the
work into the thread), and :func:`check_deadline` raises :class:`JudgingTooLong` once
it has passed. Parsing, the danger checks, glob expansion and the secret checks call it
as they go; the hook turns the error into a question for a person.

The same calls hand the interpreter back to the event loop's thread every
:data:`YIELD_EVERY_S`: judging is Python, which holds the GIL, and without these pauses
the loop would wait up to the interpreter's switch interval (5 ms) each time it wants
to run, for as long as a large command is judged.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["JudgingTooLong", "check_deadline", "judging_until"]

YIELD_EVERY_S = 0.0005

_deadline: ContextVar[float | None] = ContextVar("baton_judging_deadline", default=None)
_last_yield: ContextVar[float] = ContextVar("baton_judging_last_yield", default=0.0)


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
    if deadline is None:
        return
    now = time.monotonic()
    if now > deadline:
        raise JudgingTooLong("judging this call took too long")
    if now - _last_yield.get() > YIELD_EVERY_S:
        _last_yield.set(now)
        time.sleep(0)  # lets a thread waiting for the GIL (the event loop) take it
