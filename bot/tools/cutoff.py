"""When a search running off the event loop must stop: its deadline passed, or its call
was cancelled.

grep and glob walk the workspace in a worker thread. `asyncio.to_thread` cannot stop
a thread, so the walk looks at a `Cutoff` now and then, and the tool sets its stop
flag when the call ends, however it ends (`run_with_cutoff`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Cutoff:
    """A deadline (`time.monotonic()`) and a stop flag; `hit` once either was seen."""

    deadline: float
    stop: threading.Event = field(default_factory=threading.Event)
    hit: bool = False

    @classmethod
    def after(cls, seconds: float) -> Cutoff:
        return cls(deadline=time.monotonic() + seconds)

    def reached(self) -> bool:
        """Whether the walk must stop now; once it must, it always must."""
        if not self.hit and (self.stop.is_set() or time.monotonic() > self.deadline):
            self.hit = True
        return self.hit


async def run_with_cutoff(work: Callable[..., T], *args: Any, seconds: float, **kwargs: Any) -> T:
    """`work(*args, cutoff=…, **kwargs)` in a worker thread, stopped within `seconds`.

    The stop flag is set when the call ends, also when it is cancelled: a cancelled
    call leaves its thread running, and this makes that thread stop soon.
    """
    cutoff = Cutoff.after(seconds)
    try:
        return await asyncio.to_thread(work, *args, cutoff=cutoff, **kwargs)
    finally:
        cutoff.stop.set()
