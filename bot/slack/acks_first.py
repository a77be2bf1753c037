"""Acks first: a message taken while other deliveries still wait for their answer starts
its work once they are answered.

Slack waits for the ack of every delivery, and retries one that takes over 3 s. In a
burst (fifty mentions at the same instant) the first messages stored would otherwise
start their runs at once: access checks, leases, the model's first request, all on the
event loop and the database that the other deliveries still need for their acks. Here
the starts wait until no delivery is being answered, or `max_defer_s` at most (a steady
stream of deliveries never starves the runs), and then go in the order the messages
were taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long a start waits at most for the deliveries around it to be answered.
MAX_DEFER_S = 0.05


class AcksFirst(Generic[T]):
    """Holds starts back while deliveries are answered; `start` does each one."""

    def __init__(self, start: Callable[[T], None], max_defer_s: float = MAX_DEFER_S) -> None:
        self._start = start
        self.max_defer_s = max_defer_s
        self._in_flight = 0
        self._pending: list[T] = []
        self._timer: asyncio.TimerHandle | None = None

    @property
    def in_flight(self) -> int:
        """Deliveries being answered now."""
        return self._in_flight

    @property
    def pending(self) -> int:
        """Starts held back now."""
        return len(self._pending)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """While a delivery is being answered; the last one answered lets the starts go."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.flush()

    def defer(self, item: T) -> None:
        """Start `item` once no delivery waits for its answer (at once if none does)."""
        if self._in_flight == 0:
            self._start(item)
            return
        self._pending.append(item)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.max_defer_s, self.flush)

    def flush(self) -> None:
        """Start every held item now, in the order they came."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, self._pending = self._pending, []
        for item in items:
            try:
                self._start(item)
            except Exception:
                logger.exception("could not start the work of a message taken from Slack")
