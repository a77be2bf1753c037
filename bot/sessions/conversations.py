"""Turns of a conversation: history in, one run, new messages persisted."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Sequence

from bot.engine import ApprovalFunc, ChatMessage, Done, Meter, RunEvent
from bot.engine.loop import Inbox, prompt_images
from bot.engine.messages import ImagePart, repair_history
from bot.sessions.compaction import SessionCompactor
from bot.sessions.main_agent import MainAgent, Place, Turn
from bot.store import SessionKey, SessionStore
from bot.subagents import ProgressSink, TaskOutcome, TaskTracker, render_finished_tasks


class UnknownAgentError(LookupError):
    """`@name` named no registered sub-agent."""

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__(f"there is no agent named {name!r}; available: {', '.join(available)}")
        self.name = name
        self.available = available


class Conversations:
    """Runs turns of sessions, one at a time per session, and keeps their history.

    The lock is per session, so two threads never wait on each other, while two
    messages in one thread can never interleave their histories.
    """

    def __init__(self, *, store: SessionStore, main_agent: MainAgent, tracker: TaskTracker) -> None:
        self.store = store
        self.main_agent = main_agent
        self.tracker = tracker
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock_for(self, key: SessionKey) -> asyncio.Lock:
        lock = self._locks.get(key.key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key.key] = lock
        return lock

    async def history(self, key: SessionKey) -> list[ChatMessage]:
        """The history the next turn starts from (a summary first, once it was compacted)."""
        session = await self.store.get_or_create(key)
        return await self.store.history(session.id)

    async def run_turn(
        self,
        key: SessionKey,
        text: str,
        *,
        approval: ApprovalFunc | None = None,
        user_id: str | None = None,
        progress: ProgressSink | None = None,
        inbox: Inbox | None = None,
        context: str | None = None,
        meter: Meter | None = None,
        images: Sequence[ImagePart] = (),
        place: Place | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Run the main agent on `text` in session `key`, yielding its events.

        Background results that finished since the last turn go first, once, then
        `context` (earlier messages of a Slack thread), then the text. Messages
        from `inbox` reach the run before its next LLM call. What the run added is
        saved even when it is cancelled half-way. `meter` counts the run's tokens
        (its sub-agents' included) and stops it when its budget is spent.

        The history starts from the latest summary; when a request would not fit the
        model's window, the engine folds older messages into a new one, stored here.

        `place`: the thread's worktree the run works in (None: the site's directory).

        `images` go to the model with the text, as image parts of the same message.
        Only the text is stored (it names the images), so later turns and summaries
        see which images there were, not their bytes.
        """
        session = await self.store.get_or_create(key)
        async with self.lock_for(key):
            stored = await self.store.load_history(session.id)
            history = repair_history(stored.as_messages())
            compactor = SessionCompactor(
                summarizer=self.main_agent.summarizer,
                store=self.store,
                session_id=session.id,
                stored=stored,
            )
            finished = await self.tracker.drain_completed(session.id)
            parts = [render_finished_tasks(finished)] if finished else []
            prompt = "\n\n".join([*parts, *([context] if context else []), text])
            turn = Turn(
                session=session,
                approval=approval,
                user_id=user_id,
                progress=progress,
                meter=meter,
                compactor=compactor,
                place=place,
            )
            engine = self.main_agent.build_engine(turn)
            transcript: list[ChatMessage] = []
            try:
                async for event in engine.run_stream(
                    prompt, history=history, transcript=transcript, inbox=inbox, images=images
                ):
                    if isinstance(event, Done):
                        await self.store.add_usage(
                            session.id,
                            prompt_tokens=event.usage.prompt_tokens,
                            completion_tokens=event.usage.completion_tokens,
                        )
                    yield event
            finally:
                # Shielded: a cancelled turn still records what it did.
                await asyncio.shield(self.store.append(session.id, list(transcript)))

    async def run_agent(
        self,
        key: SessionKey,
        agent: str,
        text: str,
        *,
        approval: ApprovalFunc | None = None,
        user_id: str | None = None,
        progress: ProgressSink | None = None,
        meter: Meter | None = None,
        images: Sequence[ImagePart] = (),
        place: Place | None = None,
    ) -> TaskOutcome:
        """`@agent text`: run one sub-agent directly in the foreground, no main LLM call.

        `images` go with the task's text, as image parts. The exchange (text only) is
        written to the session's history, so the main agent knows of it next turn.
        """
        registry = self.main_agent.registry
        definition = registry.get(agent)
        if definition is None:
            raise UnknownAgentError(agent, registry.names())
        session = await self.store.get_or_create(key)
        async with self.lock_for(key):
            turn = Turn(
                session=session,
                approval=approval,
                user_id=user_id,
                progress=progress,
                meter=meter,
                place=place,
            )
            with prompt_images(images):
                outcome = await self.main_agent.runner.run_foreground(
                    definition,
                    text,
                    description=text[:60],
                    parent=self.main_agent.parent_context(turn),
                )
            reply = (
                outcome.text
                if outcome.state == "completed"
                else (f"[{outcome.state}: {outcome.error}]\n{outcome.text}".strip())
            )
            await self.store.append(
                session.id,
                [
                    ChatMessage(role="user", content=f"@{agent} {text}"),
                    ChatMessage(
                        role="assistant",
                        content=f"[{agent} sub-agent, task {outcome.task_id}] {reply}",
                    ),
                ],
            )
            return outcome
