"""The one clock every fire time is computed with: the system's, or one a test drives."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """What time it is (aware, UTC), and a way to wait for a moment."""

    def now(self) -> datetime: ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time (a driven clock returns when it is moved)."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


SYSTEM_CLOCK = SystemClock()
