"""Runs in Slack threads, persisted, so any replica can cancel them or clean up after them."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import RunRow


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
    )


class RunStore:
    """Start, find, cancel-request and end runs."""

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
    ) -> None:
        async with self.database.sessions() as session:
            session.add(
                RunRow(
                    id=run_id,
                    owner=owner,
                    session_id=session_id,
                    channel_id=channel_id,
                    thread_ts=thread_ts,
                    user_id=user_id,
                )
            )
            await session.commit()

    async def set_progress(self, run_id: str, progress_ts: str) -> None:
        await self._update(run_id, progress_ts=progress_ts)

    async def finish(self, run_id: str) -> None:
        await self._update(run_id, state="finished")

    async def request_cancel(self, run_id: str, *, by: str) -> bool:
        """Ask the owning process to cancel; False if the run is not running."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(RunRow)
                .where(col(RunRow.id) == run_id, col(RunRow.state) == "running")
                .values(cancel_requested_by=by)
            )
            await session.commit()
            return outcome.rowcount == 1

    async def get(self, run_id: str) -> RunRecord | None:
        async with self.database.sessions() as session:
            row = await session.get(RunRow, run_id)
            return _record(row) if row else None

    async def cancel_requests(self, owner: str) -> list[RunRecord]:
        """This owner's running runs that someone asked to cancel."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(RunRow).where(
                    RunRow.owner == owner,
                    RunRow.state == "running",
                    col(RunRow.cancel_requested_by).is_not(None),
                )
            )
            return [_record(row) for row in result.all()]

    async def orphans(self, *, alive: set[str]) -> list[RunRecord]:
        """Runs left running by processes that are gone."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(RunRow).where(RunRow.state == "running", col(RunRow.owner).not_in(alive))
            )
            return [_record(row) for row in result.all()]

    async def _update(self, run_id: str, **values: object) -> None:
        async with self.database.sessions() as session:
            await session.exec(update(RunRow).where(col(RunRow.id) == run_id).values(**values))
            await session.commit()
