"""Approval requests, persisted: pending → approved / denied / expired / cancelled."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import update
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import ApprovalRow, as_utc, utcnow

ApprovalState = Literal["pending", "approved", "denied", "expired", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    """One request for a person's decision, and how it ended."""

    id: str
    session_id: int
    task_id: str | None
    agent: str
    tool: str
    arguments: str
    reason: str
    state: ApprovalState
    requested_by: str | None
    decided_by: str | None
    decided_at: datetime | None
    channel_id: str | None
    message_ts: str | None
    created_at: datetime


def _record(row: ApprovalRow) -> ApprovalRecord:
    return ApprovalRecord(
        id=row.id,
        session_id=row.session_id,
        task_id=row.task_id,
        agent=row.agent,
        tool=row.tool,
        arguments=row.arguments,
        reason=row.reason,
        state=row.state,  # type: ignore[arg-type]
        requested_by=row.requested_by,
        decided_by=row.decided_by,
        decided_at=as_utc(row.decided_at) if row.decided_at else None,
        channel_id=row.channel_id,
        message_ts=row.message_ts,
        created_at=as_utc(row.created_at),
    )


class ApprovalStore:
    """The database is the truth: whoever writes the first decision wins."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def create(
        self,
        *,
        session_id: int,
        agent: str,
        task_id: str | None,
        tool: str,
        arguments: str,
        reason: str,
        requested_by: str | None,
        channel_id: str | None,
        owner: str | None = None,
    ) -> ApprovalRecord:
        row = ApprovalRow(
            owner=owner,
            id=f"ap-{uuid.uuid4().hex[:16]}",
            session_id=session_id,
            agent=agent,
            task_id=task_id,
            tool=tool,
            arguments=arguments,
            reason=reason,
            requested_by=requested_by,
            channel_id=channel_id,
        )
        async with self.database.sessions() as session:
            session.add(row)
            await session.commit()
            return _record(row)

    async def set_message(self, approval_id: str, *, channel_id: str, message_ts: str) -> None:
        async with self.database.sessions() as session:
            await session.exec(
                update(ApprovalRow)
                .where(col(ApprovalRow.id) == approval_id)
                .values(channel_id=channel_id, message_ts=message_ts)
            )
            await session.commit()

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        async with self.database.sessions() as session:
            row = await session.get(ApprovalRow, approval_id)
            return _record(row) if row else None

    async def decide(
        self, approval_id: str, state: ApprovalState, *, by: str | None
    ) -> ApprovalRecord | None:
        """Move a pending request to `state`; None if it was already decided."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(ApprovalRow)
                .where(col(ApprovalRow.id) == approval_id, col(ApprovalRow.state) == "pending")
                .values(state=state, decided_by=by, decided_at=utcnow())
            )
            await session.commit()
            if outcome.rowcount == 0:
                return None
        return await self.get(approval_id)

    async def orphans(self, *, alive: set[str]) -> list[ApprovalRecord]:
        """Pending requests whose waiting process is gone."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ApprovalRow).where(
                    ApprovalRow.state == "pending",
                    col(ApprovalRow.owner).is_(None) | col(ApprovalRow.owner).not_in(alive),
                )
            )
            return [_record(row) for row in result.all()]
