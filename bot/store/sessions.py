"""Sessions and their message history, persisted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from bot.engine.messages import ChatMessage, ToolCall, summary_message
from bot.store.database import Database
from bot.store.models import CompactionRow, MessageRow, SessionRow, storable, utcnow

_MESSAGE_INSERT = insert(MessageRow)

APPEND_ATTEMPTS = 5


# The thread of a DM's session: a DM is one continuing conversation.
DM_THREAD = "dm"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionKey:
    """What identifies a conversation: a Slack thread, or a named terminal chat."""

    kind: str
    team_id: str | None = None
    channel_id: str | None = None
    thread_ts: str | None = None
    name: str | None = None

    @classmethod
    def slack_thread(cls, *, team_id: str, channel_id: str, thread_ts: str) -> SessionKey:
        return cls(kind="slack", team_id=team_id, channel_id=channel_id, thread_ts=thread_ts)

    @classmethod
    def terminal(cls, name: str = "default") -> SessionKey:
        return cls(kind="chat", name=name)

    @classmethod
    def parse(cls, key: str) -> SessionKey:
        """The key whose `.key` is `key` (stored beside the messages of a session)."""
        kind, _, rest = key.partition(":")
        if kind == "slack":
            team_id, channel_id, thread_ts = rest.split(":", 2)
            return cls.slack_thread(team_id=team_id, channel_id=channel_id, thread_ts=thread_ts)
        return cls(kind=kind, name=rest)

    def holds(self, channel_id: str, thread_ts: str) -> bool:
        """Whether a message of `channel_id`'s thread `thread_ts` may belong to this
        session: a Slack thread's are its channel's and thread's (a DM's, any of its
        channel's); a terminal session has one thread of its own."""
        if self.kind != "slack":
            return True
        if self.channel_id != channel_id:
            return False
        return self.thread_ts in (thread_ts, DM_THREAD)

    @property
    def key(self) -> str:
        if self.kind == "slack":
            return f"slack:{self.team_id}:{self.channel_id}:{self.thread_ts}"
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    """A stored session."""

    id: int
    key: str
    kind: str
    team_id: str | None
    channel_id: str | None
    thread_ts: str | None
    created_at: datetime


def _record(row: SessionRow) -> SessionRecord:
    assert row.id is not None
    return SessionRecord(
        id=row.id,
        key=row.key,
        kind=row.kind,
        team_id=row.team_id,
        channel_id=row.channel_id,
        thread_ts=row.thread_ts,
        created_at=row.created_at,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredHistory:
    """A session's history as a run starts from it: the latest summary, then the rest.

    `seqs` holds the seq of each message of `messages`, so a compaction can say
    which messages it folded; `folded` is how many the summary stands for.
    """

    summary: str | None
    through_seq: int
    folded: int
    messages: list[ChatMessage]
    seqs: list[int]

    def as_messages(self) -> list[ChatMessage]:
        head = [summary_message(self.summary)] if self.summary is not None else []
        return [*head, *self.messages]


class SessionStore:
    """Finds or creates sessions and keeps their ordered message history."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def get_or_create(self, key: SessionKey) -> SessionRecord:
        if existing := await self.find(key):
            return existing
        row = SessionRow(
            key=key.key,
            kind=key.kind,
            team_id=key.team_id,
            channel_id=key.channel_id,
            thread_ts=key.thread_ts,
        )
        try:
            async with self.database.sessions() as session:
                session.add(row)
                await session.commit()
                return _record(row)
        except IntegrityError:
            # Another task or replica created it between our read and our insert.
            found = await self.find(key)
            assert found is not None
            return found

    async def archive(self, key: SessionKey) -> bool:
        """Put the session of `key` aside (kept, under another key): the next use of `key`
        starts a new, empty one. False when there was none."""
        aside = f"{key.key}:aside-{utcnow().strftime('%Y%m%dT%H%M%S.%f')}"
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(SessionRow).where(col(SessionRow.key) == key.key).values(key=aside)
            )
            await session.commit()
            return outcome.rowcount == 1

    async def get(self, session_id: int) -> SessionRecord | None:
        async with self.database.sessions() as session:
            row = await session.get(SessionRow, session_id)
            return _record(row) if row else None

    async def find(self, key: SessionKey) -> SessionRecord | None:
        async with self.database.sessions() as session:
            result = await session.exec(select(SessionRow).where(SessionRow.key == key.key))
            row = result.first()
            return _record(row) if row else None

    async def history(self, session_id: int) -> list[ChatMessage]:
        """The history a run starts from: the latest summary (if any), then what followed."""
        return (await self.load_history(session_id)).as_messages()

    async def load_history(self, session_id: int) -> StoredHistory:
        """The latest compaction of the session and the messages after it, with their seqs."""
        async with self.database.sessions() as session:
            found = await session.exec(
                select(CompactionRow)
                .where(CompactionRow.session_id == session_id)
                .order_by(col(CompactionRow.through_seq).desc(), col(CompactionRow.id).desc())
                .limit(1)
            )
            compaction = found.first()
            through = compaction.through_seq if compaction is not None else 0
            result = await session.exec(
                select(MessageRow)
                .where(MessageRow.session_id == session_id, MessageRow.seq > through)
                .order_by(col(MessageRow.seq))
            )
            rows = result.all()
        return StoredHistory(
            summary=compaction.summary if compaction is not None else None,
            through_seq=through,
            folded=compaction.folded if compaction is not None else 0,
            messages=[_message(row) for row in rows],
            seqs=[row.seq for row in rows],
        )

    async def record_compaction(
        self, session_id: int, *, through_seq: int, summary: str, folded: int
    ) -> None:
        """Keep a summary that stands for the session's messages up to `through_seq`."""
        async with self.database.sessions() as session:
            session.add(
                CompactionRow(
                    session_id=session_id,
                    through_seq=through_seq,
                    summary=storable(summary),
                    folded=folded,
                )
            )
            await session.commit()

    async def has_history(self, session_id: int) -> bool:
        """Whether the session holds any message (without loading them)."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(MessageRow.id).where(MessageRow.session_id == session_id).limit(1)
            )
            return result.first() is not None

    async def add_usage(
        self, session_id: int, *, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Count a run's tokens against its session."""
        async with self.database.sessions() as session:
            await session.exec(
                update(SessionRow)
                .where(col(SessionRow.id) == session_id)
                .values(
                    prompt_tokens=SessionRow.prompt_tokens + prompt_tokens,
                    completion_tokens=SessionRow.completion_tokens + completion_tokens,
                )
            )
            await session.commit()

    async def usage(self, session_id: int) -> tuple[int, int]:
        """(prompt, completion) tokens of every run of a session so far."""
        async with self.database.sessions() as session:
            row = await session.get(SessionRow, session_id)
            return (row.prompt_tokens, row.completion_tokens) if row else (0, 0)

    async def append(self, session_id: int, messages: Sequence[ChatMessage]) -> None:
        """Add messages after the session's last one, in one transaction.

        Appenders to one session take turns on the session's row; should two still
        collide on (session, seq), the loser reads the new end and tries again, so no
        turn is lost.
        """
        if not messages:
            return
        for attempt in range(APPEND_ATTEMPTS):
            try:
                await self._append_once(session_id, messages)
                return
            except IntegrityError:
                if attempt == APPEND_ATTEMPTS - 1:
                    raise

    async def _append_once(self, session_id: int, messages: Sequence[ChatMessage]) -> None:
        async with self.database.sessions() as session:
            now = utcnow()
            # The session's row first: that write waits for any other appender to commit
            # (a row lock on PostgreSQL, the write lock on SQLite), so the end read next
            # is the real one and appenders take turns instead of colliding.
            await session.exec(
                update(SessionRow).where(col(SessionRow.id) == session_id).values(updated_at=now)
            )
            result = await session.exec(
                select(func.max(MessageRow.seq)).where(MessageRow.session_id == session_id)
            )
            last = result.one() or 0
            rows = [
                {
                    "session_id": session_id,
                    "seq": last + offset,
                    "role": message.role,
                    "content": storable(message.content),
                    "tool_calls": [c.to_openai() for c in message.tool_calls] or None,
                    "tool_call_id": storable(message.tool_call_id),
                    "name": storable(message.name),
                    "created_at": now,
                }
                for offset, message in enumerate(messages, start=1)
            ]
            # One INSERT of many rows: as ORM objects each message was a statement of
            # its own (a fan-out's turn is 30-odd messages, written as its children start).
            await session.exec(_MESSAGE_INSERT, params=rows)  # type: ignore[call-overload]
            await session.commit()


def _message(row: MessageRow) -> ChatMessage:
    calls = tuple(
        ToolCall(
            id=call["id"],
            name=call["function"]["name"],
            arguments=call["function"]["arguments"],
        )
        for call in row.tool_calls or ()
    )
    return ChatMessage(
        role=row.role,  # type: ignore[arg-type]
        content=row.content,
        tool_calls=calls,
        tool_call_id=row.tool_call_id,
        name=row.name,
    )
