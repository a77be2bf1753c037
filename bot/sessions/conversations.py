"""Turns of a conversation: history in, one engine run, new messages persisted."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable

from bot.engine import ApprovalFunc, ChatMessage, Engine, RunEvent
from bot.engine.messages import repair_history
from bot.store import SessionKey, SessionRecord, SessionStore

EngineFactory = Callable[[ApprovalFunc | None], Engine]


class Conversations:
    """Runs turns of sessions, one at a time per session, and keeps their history.

    The lock is per session, so two threads never wait on each other, while two
    messages in one thread can never interleave their histories.
    """

    def __init__(self, *, store: SessionStore, build_engine: EngineFactory) -> None:
        self.store = store
        self.build_engine = build_engine
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock_for(self, key: SessionKey) -> asyncio.Lock:
        lock = self._locks.get(key.key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key.key] = lock
        return lock

    async def open(self, key: SessionKey) -> SessionRecord:
        return await self.store.get_or_create(key)

    async def history(self, key: SessionKey) -> list[ChatMessage]:
        session = await self.store.get_or_create(key)
        return await self.store.history(session.id)

    async def run_turn(
        self, key: SessionKey, text: str, *, approval: ApprovalFunc | None = None
    ) -> AsyncIterator[RunEvent]:
        """Run the main agent on `text` in session `key`, yielding its events.

        What the run added to the conversation is saved even when the run is
        cancelled half-way, so the next turn knows what was already done.
        """
        session = await self.store.get_or_create(key)
        async with self.lock_for(key):
            history = repair_history(await self.store.history(session.id))
            engine = self.build_engine(approval)
            transcript: list[ChatMessage] = []
            try:
                async for event in engine.run_stream(text, history=history, transcript=transcript):
                    yield event
            finally:
                # Shielded: a cancelled turn still records what it did.
                await asyncio.shield(self.store.append(session.id, list(transcript)))
