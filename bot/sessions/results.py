"""Finished background tasks, told to the thread that started them.

A surface takes about one message a second in a channel: the results of a fan-out,
ending close together, go in one message (as many as it holds), not one message each
a second apart. What ends while the thread's result message waits for its slot, or
for its still running siblings, goes in it. The result itself reaches the model in
the thread's next turn (`Conversations.run_turn`), once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from bot.sessions.surface import Surface, Where
from bot.store import SessionStore
from bot.store.tasks import TaskRecord
from bot.subagents import TaskTracker

logger = logging.getLogger(__name__)

# Event-loop turns a results poster yields, once no sibling runs, to results already on
# their way (an ending's callback is a task of its own; two turns see it started).
_ARRIVAL_TURNS = 3


@dataclass(slots=True)
class _Waiting:
    """Background tasks whose results wait for their thread's next result message."""

    records: list[TaskRecord]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def join(self, record: TaskRecord) -> None:
        self.records.append(record)
        self.arrived.set()


class FinishedResults:
    """Posts each thread's finished background tasks, gathered per message."""

    def __init__(self, surface: Surface, *, sessions: SessionStore, tracker: TaskTracker) -> None:
        self.surface = surface
        self.sessions = sessions
        self.tracker = tracker
        # By thread, and by session (a session's later results join without a lookup).
        self._by_thread: dict[Where, _Waiting] = {}
        self._by_session: dict[int, _Waiting] = {}

    async def post(self, record: TaskRecord) -> None:
        """Tell the thread that started background task `record` how it ended."""
        if not record.background:
            return
        if (waiting := self._by_session.get(record.session_id)) is not None:
            waiting.join(record)  # the thread's poster takes it with its next message
            return
        session = await self.sessions.get(record.session_id)
        where = self.surface.where_of(session) if session is not None else None
        if session is None or where is None:
            return
        if (waiting := self._by_thread.get(where)) is not None:
            waiting.join(record)
            return
        self._by_thread[where] = self._by_session[session.id] = waiting = _Waiting([record])
        try:
            while waiting.records:
                try:
                    await self._gather_siblings(session.id, waiting)
                    await self.surface.post_results(where, waiting.records)
                except Exception:
                    logger.exception("could not post finished tasks in %s", where)
        finally:
            del self._by_thread[where], self._by_session[session.id]

    async def _gather_siblings(self, session_id: int, waiting: _Waiting) -> None:
        """While other background tasks of the session still run, wait for them to end,
        for at most the surface's time between two messages: past it the next message
        would have to wait for its slot anyway."""
        window = self.surface.results_window_s()
        if window <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window
        while True:
            waiting.arrived.clear()
            # Siblings running here end through this poster: no need to ask the database
            # (which also counts those on other replicas) until none is left here.
            if self.tracker.unended_here(session_id) == 0 and (
                await self.tracker.running_background(session_id) == 0
            ):
                # The last ones may have ended a moment before their results reach us
                # (their callbacks are scheduled, not yet run): give them those turns.
                for _ in range(_ARRIVAL_TURNS):
                    await asyncio.sleep(0)
                if not waiting.arrived.is_set():
                    return
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await waiting.arrived.wait()
