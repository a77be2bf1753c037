"""People's messages for threads, kept from the moment they are taken from Slack, and
the lease that lets one process at a time run a thread's turn, across every replica.

A message's life: ``new`` (stored before Slack is answered; its receiver then checks
who sent it) → ``pending`` (waiting for the thread's turn) → ``taken`` (a run has it,
as its question or as steering) → ``done``. Talk nobody acted on ends ``dropped``, a
refused message ``refused``; a message whose run's process stopped ends
``interrupted`` (and ``offered`` once a redelivery offered to retry it), until a Retry
makes it ``retried``.

Within a thread, messages are taken in Slack's order (their ts), whichever replica
received them.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Insert, Row, delete, func, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.group_commit import GroupCommit
from bot.store.models import ThreadLeaseRow, ThreadMessageRow, storable, utcnow

NEW = "new"
PENDING = "pending"
TAKEN = "taken"
DONE = "done"
DROPPED = "dropped"
REFUSED = "refused"
INTERRUPTED = "interrupted"
OFFERED = "offered"
RETRIED = "retried"
RETRYABLE = (INTERRUPTED, OFFERED)
# States nothing acts on again. An interrupted message keeps its Retry for as long as
# Slack may redeliver it and people may scroll back: the same week as the rest.
FINAL = (DONE, DROPPED, REFUSED, RETRIED, INTERRUPTED, OFFERED)
# How long a message whose sender is still being checked holds back later ones.
ORDER_WAIT = timedelta(seconds=30)
# Slack redelivers within minutes; a week of messages is far more than any retry needs.
KEEP_MESSAGES = timedelta(days=7)
# A batch of arrivals stays far below SQLite's and asyncpg's 32,766 bound parameters (18
# a row), and a few huge texts do not make one huge statement.
MAX_BATCH_MESSAGES = 100
MAX_BATCH_TEXT = 4_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Inbound:
    """A message as a surface received it, before it is stored: what the thread's
    turns need of it, whatever platform it came from."""

    session_key: str
    channel_id: str
    thread_ts: str
    ts: str
    user_id: str
    text: str
    # Who wrote it, when not `user_id` (a Retry runs someone's question as another's turn).
    author_id: str | None = None
    team_id: str | None = None
    user_team: str | None = None
    enterprise_id: str | None = None
    files: Sequence[dict[str, Any]] = ()
    is_dm: bool = False
    # For Baton (a mention, a DM, the terminal), not talk beside a running turn.
    addressed: bool = True
    # The trigger that wrote it (`schedule:<name>`, `webhook:<name>`, `watch:<channel>`);
    # None for a person's message.
    trigger: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadMessage:
    id: int
    session_key: str
    channel_id: str
    thread_ts: str
    ts: str
    user_id: str
    author_id: str
    team_id: str | None
    user_team: str | None
    enterprise_id: str | None
    text: str
    files: tuple[dict[str, Any], ...]
    is_dm: bool
    addressed: bool
    state: str
    holder: str | None
    run_id: str | None
    trigger: str | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    session_key: str
    owner: str
    run_id: str
    direct: bool


def _one_message_at_fault(error: Exception) -> bool:
    """Whether a batch of messages may have failed for what one of them holds (a NUL or
    an id too long for PostgreSQL's columns, text that is no valid Unicode), so that
    each is tried alone, rather than for the database as a whole (unreachable, locked,
    a table missing on SQLite), which fails every message of the batch at once."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return False
    return not isinstance(error, OperationalError | InterfaceError | OSError | TimeoutError)


@functools.cache
def _arrivals_insert(dialect: str) -> Insert:
    """INSERT … ON CONFLICT (channel_id, ts) DO NOTHING RETURNING every column, written
    out by SQLAlchemy's "insertmanyvalues" for a whole batch in one statement. A row whose
    channel and ts are stored is not inserted and not returned, as a second INSERT failed
    with an IntegrityError. Built once: only its parameters change."""
    table = ThreadMessageRow.__table__
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    return (
        insert(table)
        .on_conflict_do_nothing(index_elements=[table.c.channel_id, table.c.ts])
        .returning(*table.c)
    )


def _message(row: ThreadMessageRow | Row[Any]) -> ThreadMessage:
    """A stored message, from its ORM row or straight from a result row (which skips the
    ORM's per-object bookkeeping: a batch of arrivals answers without it)."""
    assert row.id is not None
    return ThreadMessage(
        id=row.id,
        session_key=row.session_key,
        channel_id=row.channel_id,
        thread_ts=row.thread_ts,
        ts=row.ts,
        user_id=row.user_id,
        author_id=row.author_id,
        team_id=row.team_id,
        user_team=row.user_team,
        enterprise_id=row.enterprise_id,
        text=row.text,
        files=tuple(row.files or ()),
        is_dm=row.is_dm,
        addressed=row.addressed,
        state=row.state,
        holder=row.holder,
        run_id=row.run_id,
        trigger=row.trigger,
    )


class ThreadInbox:
    """Stores thread messages and hands them to runs; grants and releases thread leases."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._arrivals: GroupCommit[dict[str, Any], ThreadMessage | None] = GroupCommit(
            self._store_arrivals,
            name="thread-inbox",
            max_items=MAX_BATCH_MESSAGES,
            size=lambda row: len(row["text"]),
            max_size=MAX_BATCH_TEXT,
            alone=_one_message_at_fault,
        )

    # ------------------------------------------------------------------ messages

    async def receive(
        self, message: Inbound, *, holder: str, state: str = NEW, run_id: str | None = None
    ) -> ThreadMessage | None:
        """Store a message; None if one with its channel and ts is stored already (a
        retried or duplicate delivery). Database errors propagate: the caller must not
        tell Slack the message was taken.

        Messages received together are stored together, in one transaction (see
        `_store_arrivals`); each caller still gets its own answer."""
        return await self._arrivals.submit(
            {
                "session_key": message.session_key,
                "channel_id": message.channel_id,
                "thread_ts": message.thread_ts,
                "ts": message.ts,
                "user_id": message.user_id,
                "author_id": message.author_id or message.user_id,
                "team_id": message.team_id,
                "user_team": message.user_team,
                "enterprise_id": message.enterprise_id,
                "text": storable(message.text),
                "files": list(message.files),
                "is_dm": message.is_dm,
                "addressed": message.addressed,
                "state": state,
                "holder": holder if state in (NEW, TAKEN) else None,
                "run_id": run_id,
                "trigger": message.trigger,
                "created_at": utcnow(),
            }
        )

    async def _store_arrivals(self, rows: Sequence[dict[str, Any]]) -> list[ThreadMessage | None]:
        """Insert `rows` in one transaction; per row its message, or None for a row whose
        channel and ts are stored already (by an earlier batch, another replica, or an
        earlier row of this batch: the first to arrive is the one stored)."""
        first: dict[tuple[str, str], int] = {}
        for index, row in enumerate(rows):
            first.setdefault((row["channel_id"], row["ts"]), index)
        engine = self.database.intake_engine
        statement = _arrivals_insert(engine.dialect.name)
        async with engine.begin() as connection:
            result = await connection.execute(statement, [rows[i] for i in first.values()])
            stored = {(row.channel_id, row.ts): row for row in result.all()}
        messages: list[ThreadMessage | None] = []
        for index, row in enumerate(rows):
            key = (row["channel_id"], row["ts"])
            inserted = stored.get(key) if first[key] == index else None
            messages.append(_message(inserted) if inserted else None)
        return messages

    async def get(self, message_id: int) -> ThreadMessage | None:
        async with self.database.sessions() as session:
            row = await session.get(ThreadMessageRow, message_id)
            return _message(row) if row else None

    async def find(self, channel_id: str, ts: str) -> ThreadMessage | None:
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ThreadMessageRow).where(
                    ThreadMessageRow.channel_id == channel_id, ThreadMessageRow.ts == ts
                )
            )
            row = result.first()
            return _message(row) if row else None

    async def move(
        self, message_ids: Collection[int], state: str, *, only_from: Collection[str]
    ) -> int:
        """Set the state of those of `message_ids` in one of `only_from`; how many moved.
        Leaving ``taken`` (or ``new``) frees the message of its holder."""
        if not message_ids:
            return 0
        values: dict[str, object] = {"state": state}
        if state not in (NEW, TAKEN):
            values["holder"] = None
        if state == PENDING:
            values["run_id"] = None
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(ThreadMessageRow)
                .where(
                    col(ThreadMessageRow.id).in_(list(message_ids)),
                    col(ThreadMessageRow.state).in_(list(only_from)),
                )
                .values(**values)
            )
            await session.commit()
            return int(outcome.rowcount or 0)

    async def take_over(self, message: ThreadMessage, *, holder: str) -> bool:
        """Become the holder of a ``new`` message whose holder died; False if another
        process did first (or the message moved on)."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(ThreadMessageRow)
                .where(
                    col(ThreadMessageRow.id) == message.id,
                    ThreadMessageRow.state == NEW,
                    col(ThreadMessageRow.holder) == message.holder,
                )
                .values(holder=holder)
            )
            await session.commit()
            return outcome.rowcount == 1

    async def take(
        self, session_key: str, *, run_id: str, holder: str, questions_only: bool
    ) -> list[ThreadMessage]:
        """Hand a thread's pending messages to run `run_id`, oldest (by ts) first: only
        the oldest message that asked Baton (a turn's question), or every pending one
        (steering). A message another process took meanwhile is not returned."""
        async with self.database.sessions() as session:
            query = select(ThreadMessageRow).where(
                ThreadMessageRow.session_key == session_key, ThreadMessageRow.state == PENDING
            )
            if questions_only:
                query = query.where(col(ThreadMessageRow.addressed).is_(True))
            else:
                # An older message still being checked (who sent it, may they steer)
                # comes first: what came after it waits for it, so the run reads the
                # thread in Slack's order. Not for long: a check that never ended (its
                # process died) holds nothing back after ORDER_WAIT.
                checking = await session.exec(
                    select(func.min(ThreadMessageRow.ts)).where(
                        ThreadMessageRow.session_key == session_key,
                        ThreadMessageRow.state == NEW,
                        col(ThreadMessageRow.created_at) > utcnow() - ORDER_WAIT,
                    )
                )
                first_unchecked = checking.one()
                if first_unchecked is not None:
                    query = query.where(col(ThreadMessageRow.ts) < first_unchecked)
            result = await session.exec(
                query.order_by(col(ThreadMessageRow.ts), col(ThreadMessageRow.id))
            )
            rows = list(result.all())
            if questions_only:
                rows = rows[:1]
            taken = []
            for row in rows:
                outcome = await session.exec(
                    update(ThreadMessageRow)
                    .where(col(ThreadMessageRow.id) == row.id, ThreadMessageRow.state == PENDING)
                    .values(state=TAKEN, run_id=run_id, holder=holder)
                )
                if outcome.rowcount == 1:
                    row.state, row.run_id, row.holder = TAKEN, run_id, holder
                    taken.append(_message(row))
            await session.commit()
            return taken

    async def drop_talk(self, session_key: str) -> int:
        """Talk (no question) still waiting in a thread whose turn is over: nobody reads
        it now, and a later turn must not take it as said while it worked."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(ThreadMessageRow)
                .where(
                    ThreadMessageRow.session_key == session_key,
                    ThreadMessageRow.state == PENDING,
                    col(ThreadMessageRow.addressed).is_(False),
                )
                .values(state=DROPPED, holder=None)
            )
            await session.commit()
            return int(outcome.rowcount or 0)

    async def with_pending(self, session_keys: Collection[str]) -> set[str]:
        """Those of `session_keys` with a message waiting (one query for many threads)."""
        if not session_keys:
            return set()
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ThreadMessageRow.session_key)
                .where(
                    col(ThreadMessageRow.session_key).in_(list(session_keys)),
                    ThreadMessageRow.state == PENDING,
                )
                .distinct()
            )
            return set(result.all())

    async def has_questions(self, session_key: str) -> bool:
        """Whether a message that asked Baton waits for the thread's next turn."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(func.count()).where(
                    ThreadMessageRow.session_key == session_key,
                    ThreadMessageRow.state == PENDING,
                    col(ThreadMessageRow.addressed).is_(True),
                )
            )
            return bool(result.one())

    async def of_run(self, run_id: str, *, states: Collection[str]) -> list[ThreadMessage]:
        """The messages run `run_id` had, in one of `states`, in thread order."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ThreadMessageRow)
                .where(
                    ThreadMessageRow.run_id == run_id,
                    col(ThreadMessageRow.state).in_(list(states)),
                )
                .order_by(col(ThreadMessageRow.ts), col(ThreadMessageRow.id))
            )
            return [_message(row) for row in result.all()]

    async def end_run(self, run_id: str, state: str) -> int:
        """Every message run `run_id` still has taken ends in `state` (``done`` or
        ``interrupted``)."""
        async with self.database.sessions() as session:
            values: dict[str, object] = {"state": state, "holder": None}
            outcome = await session.exec(
                update(ThreadMessageRow)
                .where(ThreadMessageRow.run_id == run_id, ThreadMessageRow.state == TAKEN)
                .values(**values)
            )
            await session.commit()
            return int(outcome.rowcount or 0)

    async def unclaimed(self, *, alive: Collection[str]) -> list[ThreadMessage]:
        """Messages stored as ``new`` by a process that died before looking at them."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ThreadMessageRow)
                .where(
                    ThreadMessageRow.state == NEW,
                    col(ThreadMessageRow.holder).not_in(list(alive)),
                )
                .order_by(col(ThreadMessageRow.ts), col(ThreadMessageRow.id))
            )
            return [_message(row) for row in result.all()]

    async def waiting(self, *, alive: Collection[str]) -> list[ThreadMessage]:
        """Per thread with a question waiting and no live process running its turn,
        the oldest such question (so someone starts that thread's turn)."""
        async with self.database.sessions() as session:
            live = select(ThreadLeaseRow.session_key).where(
                col(ThreadLeaseRow.owner).in_(list(alive))
            )
            result = await session.exec(
                select(ThreadMessageRow)
                .where(
                    ThreadMessageRow.state == PENDING,
                    col(ThreadMessageRow.addressed).is_(True),
                    col(ThreadMessageRow.session_key).not_in(live),
                )
                .order_by(col(ThreadMessageRow.ts), col(ThreadMessageRow.id))
            )
            first: dict[str, ThreadMessage] = {}
            for row in result.all():
                first.setdefault(row.session_key, _message(row))
            return list(first.values())

    async def prune(self, older_than: timedelta = KEEP_MESSAGES) -> int:
        """Forget messages older than `older_than` that nothing will act on again (their
        text lives on in the session's history); returns how many were removed."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                delete(ThreadMessageRow).where(
                    col(ThreadMessageRow.created_at) < utcnow() - older_than,
                    col(ThreadMessageRow.state).in_(FINAL),
                )
            )
            await session.commit()
            return int(outcome.rowcount or 0)

    # -------------------------------------------------------------------- leases

    async def lease(
        self, session_key: str, *, owner: str, run_id: str, alive: Collection[str]
    ) -> bool:
        """Take the thread's lease for run `run_id`; False while a live process holds
        it. A lease left by a process that is gone is taken over."""
        try:
            async with self.database.sessions() as session:
                session.add(ThreadLeaseRow(session_key=session_key, owner=owner, run_id=run_id))
                await session.commit()
                return True
        except IntegrityError:
            pass
        async with self.database.sessions() as session:
            # Re-checked by the database as it updates: of two processes taking over a
            # dead owner's lease, the second finds a live owner and gets nothing.
            outcome = await session.exec(
                update(ThreadLeaseRow)
                .where(
                    ThreadLeaseRow.session_key == session_key,
                    col(ThreadLeaseRow.owner).not_in(list(alive)),
                )
                .values(owner=owner, run_id=run_id, direct=False, created_at=func.now())
            )
            await session.commit()
            return outcome.rowcount == 1

    async def mark_direct(self, session_key: str, run_id: str) -> None:
        """The lease's run is an `@agent` run: talk in its thread does not steer it."""
        async with self.database.sessions() as session:
            await session.exec(
                update(ThreadLeaseRow)
                .where(ThreadLeaseRow.session_key == session_key, ThreadLeaseRow.run_id == run_id)
                .values(direct=True)
            )
            await session.commit()

    async def release(self, session_key: str, run_id: str) -> None:
        async with self.database.sessions() as session:
            await session.exec(
                delete(ThreadLeaseRow).where(
                    ThreadLeaseRow.session_key == session_key, ThreadLeaseRow.run_id == run_id
                )
            )
            await session.commit()

    async def holder(self, session_key: str, *, alive: Collection[str]) -> Lease | None:
        """Who runs the thread's turn now, if that process is alive."""
        async with self.database.sessions() as session:
            row = await session.get(ThreadLeaseRow, session_key)
            if row is None or row.owner not in alive:
                return None
            return Lease(row.session_key, row.owner, row.run_id, row.direct)

    async def forget_dead_leases(self, *, alive: Collection[str]) -> int:
        async with self.database.sessions() as session:
            outcome = await session.exec(
                delete(ThreadLeaseRow).where(col(ThreadLeaseRow.owner).not_in(list(alive)))
            )
            await session.commit()
            return int(outcome.rowcount or 0)
