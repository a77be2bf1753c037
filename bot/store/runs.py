"""Runs in Slack threads, persisted, so any replica can cancel them or clean up after them.

A run is ``queued`` while it waits for a slot under ``limits`` (see
`bot.access.admission`), ``running`` once admitted, and ``finished`` at the end.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.database import Database
from bot.store.models import RunRow, as_utc

RUNNING = "running"
QUEUED = "queued"
FINISHED = "finished"

# Held, inside the admitting transaction, by every PostgreSQL admission of every
# replica: counting the slots and taking one is then a single step deployment-wide.
# An arbitrary constant ("baton" + "run"); nothing else in Baton takes it.
ADMISSION_LOCK_KEY = 0x626174_72756E

# SQLite has no advisory locks and Baton runs one process per SQLite file, so an
# asyncio lock per Database serialises admissions there.
_sqlite_locks: weakref.WeakKeyDictionary[Database, asyncio.Lock] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    id: str
    owner: str
    session_id: int
    channel_id: str
    thread_ts: str
    user_id: str
    progress_ts: str | None
    state: str
    cancel_requested_by: str | None
    created_at: datetime
    trigger: str | None = None


def _record(row: RunRow) -> RunRecord:
    return RunRecord(
        id=row.id,
        owner=row.owner,
        session_id=row.session_id,
        channel_id=row.channel_id,
        thread_ts=row.thread_ts,
        user_id=row.user_id,
        progress_ts=row.progress_ts,
        state=row.state,
        cancel_requested_by=row.cancel_requested_by,
        created_at=as_utc(row.created_at),
        trigger=row.trigger,
    )


async def _running_by_user(session: AsyncSession, alive: Collection[str]) -> dict[str, int]:
    result = await session.exec(
        select(RunRow.user_id, func.count())
        .where(RunRow.state == RUNNING, col(RunRow.owner).in_(list(alive)))
        .group_by(RunRow.user_id)
    )
    return {user_id: count for user_id, count in result.all()}


async def _queued(session: AsyncSession, alive: Collection[str]) -> list[RunRecord]:
    result = await session.exec(
        select(RunRow)
        .where(RunRow.state == QUEUED, col(RunRow.owner).in_(list(alive)))
        .order_by(col(RunRow.created_at), col(RunRow.id))
    )
    return [_record(row) for row in result.all()]


async def _admit(session: AsyncSession, run_id: str) -> bool:
    outcome = await session.exec(
        update(RunRow)
        .where(col(RunRow.id) == run_id, col(RunRow.state) == QUEUED)
        .values(state=RUNNING)
    )
    return outcome.rowcount == 1


class AdmissionView:
    """What one admitting transaction reads and the one change it may make.

    Only `RunStore.admitting` makes these; every call runs in its transaction,
    under the admission lock.
    """

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def running_by_user(self, *, alive: Collection[str]) -> dict[str, int]:
        """Running runs of live owners, counted per user who started them."""
        return await _running_by_user(self._session, alive)

    async def queued(self, *, alive: Collection[str]) -> list[RunRecord]:
        """Queued runs of live owners, first come first (created_at, then id)."""
        return await _queued(self._session, alive)

    async def admit(self, run_id: str) -> bool:
        """Queued → running; False if the run is no longer queued."""
        return await _admit(self._session, run_id)


class RunStore:
    """Start, find, queue, admit, cancel-request and end runs."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def start(
        self,
        *,
        run_id: str,
        owner: str,
        session_id: int,
        channel_id: str,
        thread_ts: str,
        user_id: str,
        state: str = RUNNING,
        trigger: str | None = None,
    ) -> None:
        """Record a run, ``running`` at once or ``queued`` until admitted; `trigger`
        names what started it when no person did."""
        if state not in (RUNNING, QUEUED):
            raise ValueError(f"a run starts running or queued, not {state!r}")
        async with self.database.sessions() as session:
            session.add(
                RunRow(
                    id=run_id,
                    owner=owner,
                    session_id=session_id,
                    channel_id=channel_id,
                    thread_ts=thread_ts,
                    user_id=user_id,
                    state=state,
                    trigger=trigger,
                )
            )
            await session.commit()

    async def set_progress(self, run_id: str, progress_ts: str) -> None:
        await self._update(run_id, progress_ts=progress_ts)

    async def finish(self, run_id: str) -> None:
        await self._update(run_id, state=FINISHED)

    async def close(self, run_id: str) -> bool:
        """Finish a run still running or queued; True if this call did (of replicas
        closing a dead process's run together, one does)."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(RunRow)
                .where(col(RunRow.id) == run_id, col(RunRow.state).in_((RUNNING, QUEUED)))
                .values(state=FINISHED)
            )
            await session.commit()
            return outcome.rowcount == 1

    async def request_cancel(self, run_id: str, *, by: str) -> bool:
        """Ask the owning process to cancel; False if the run is neither running nor queued."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(RunRow)
                .where(col(RunRow.id) == run_id, col(RunRow.state).in_((RUNNING, QUEUED)))
                .values(cancel_requested_by=by)
            )
            await session.commit()
            return outcome.rowcount == 1

    async def get(self, run_id: str) -> RunRecord | None:
        async with self.database.sessions() as session:
            row = await session.get(RunRow, run_id)
            return _record(row) if row else None

    async def cancel_requests(self, owner: str) -> list[RunRecord]:
        """This owner's running or queued runs that someone asked to cancel."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(RunRow).where(
                    RunRow.owner == owner,
                    col(RunRow.state).in_((RUNNING, QUEUED)),
                    col(RunRow.cancel_requested_by).is_not(None),
                )
            )
            return [_record(row) for row in result.all()]

    async def orphans(self, *, alive: set[str]) -> list[RunRecord]:
        """Runs left running or queued by processes that are gone."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(RunRow).where(
                    col(RunRow.state).in_((RUNNING, QUEUED)),
                    col(RunRow.owner).not_in(alive),
                )
            )
            return [_record(row) for row in result.all()]

    async def triggered(
        self, *, channel_id: str | None = None, user_id: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        """Runs a trigger started (a schedule, a webhook, a watched channel), newest
        first: of one channel, of one owner (whom they ran for), or of both."""
        query = select(RunRow).where(col(RunRow.trigger).is_not(None))
        if channel_id is not None:
            query = query.where(RunRow.channel_id == channel_id)
        if user_id is not None:
            query = query.where(RunRow.user_id == user_id)
        query = query.order_by(col(RunRow.created_at).desc(), col(RunRow.id).desc()).limit(limit)
        async with self.database.sessions() as session:
            result = await session.exec(query)
            return [_record(row) for row in result.all()]

    async def count_running(self, *, alive: Collection[str], user_id: str | None = None) -> int:
        """Running runs whose owner is alive: all of them, or those `user_id` started."""
        async with self.database.sessions() as session:
            counts = await _running_by_user(session, alive)
        return counts.get(user_id, 0) if user_id is not None else sum(counts.values())

    async def queued(self, *, alive: Collection[str]) -> list[RunRecord]:
        """Queued runs whose owner is alive, first come first (created_at, then id)."""
        async with self.database.sessions() as session:
            return await _queued(session, alive)

    async def admit(self, run_id: str) -> bool:
        """Queued → running, only if still queued; True if this call made the change."""
        async with self.database.sessions() as session:
            admitted = await _admit(session, run_id)
            await session.commit()
            return admitted

    @asynccontextmanager
    async def admitting(self) -> AsyncIterator[AdmissionView]:
        """One admission step, serialised with every other one on this database.

        On PostgreSQL the transaction takes ``pg_advisory_xact_lock`` first, so
        replicas admit one at a time and each sees the others' committed admissions;
        the lock ends with the transaction. On SQLite (one process per file) an
        asyncio lock per `Database` does the same within the process. The view's
        changes are committed when the block ends without an exception.
        """
        if self.database.engine.dialect.name == "postgresql":
            async with self.database.sessions() as session:
                await session.exec(select(func.pg_advisory_xact_lock(ADMISSION_LOCK_KEY)))
                yield AdmissionView(session)
                await session.commit()
            return
        lock = _sqlite_locks.setdefault(self.database, asyncio.Lock())
        async with lock, self.database.sessions() as session:
            yield AdmissionView(session)
            await session.commit()

    async def _update(self, run_id: str, **values: object) -> None:
        async with self.database.sessions() as session:
            await session.exec(update(RunRow).where(col(RunRow.id) == run_id).values(**values))
            await session.commit()
