"""A clock that moves only when a test moves it (bot/triggers/clock.py's `Clock`).

`sleep` returns once the clock was moved past its end (never by the machine's time), so
a test sets the time, and whatever slept until then wakes; `sleeping` waits until
something sleeps on the clock, so a test knows a loop finished what it did at a moment
without sleeping itself.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta


class ManualClock:
    """Now is what the test last said; sleepers wake when it is moved past their end."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("a ManualClock's time is aware")
        self._now = start.astimezone(UTC)
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []
        self._watchers: list[asyncio.Future[None]] = []

    def now(self) -> datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Return once the clock is moved `seconds` past now (at once for 0 or less)."""
        end = self._now + timedelta(seconds=max(0.0, seconds))
        if end <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (end, future)
        self._sleepers.append(entry)
        self._tell_watchers()
        try:
            await future
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def set(self, moment: datetime) -> None:
        """Move to `moment` (aware; forward or back) and wake those whose end came."""
        if moment.tzinfo is None:
            raise ValueError("a ManualClock's time is aware")
        self._now = moment.astimezone(UTC)
        for entry in list(self._sleepers):
            end, future = entry
            if end <= self._now:
                self._sleepers.remove(entry)
                if not future.done():
                    future.set_result(None)

    def advance(self, by: timedelta | float) -> datetime:
        """Move forward by `by` (a timedelta, or seconds); the new now."""
        self.set(self._now + (by if isinstance(by, timedelta) else timedelta(seconds=by)))
        return self._now

    @property
    def sleepers(self) -> int:
        """How many sleep on the clock now."""
        return len(self._sleepers)

    async def sleeping(self, count: int = 1) -> None:
        """Return once at least `count` sleep on the clock."""
        while len(self._sleepers) < count:
            watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._watchers.append(watcher)
            try:
                await watcher
            finally:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)

    def _tell_watchers(self) -> None:
        for watcher in self._watchers:
            if not watcher.done():
                watcher.set_result(None)
        self._watchers.clear()
