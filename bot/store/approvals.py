"""Approval requests, persisted: pending → approved / denied / expired / cancelled."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.database import Database
from bot.store.models import ApprovalDecidersRow, ApprovalRow, as_utc, storable, utcnow

ApprovalState = Literal["pending", "approved", "denied", "expired", "cancelled"]
# States that end a request by a person's decision or by nobody deciding in time.
DECIDED_STATES = ("approved", "denied", "expired")


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
    # Who may decide, fixed when the request was made (any replica decides by these).
    # A request from before deciders were stored: no sets, self-approval allowed.
    approver_sets: tuple[tuple[str, ...], ...] = ()
    self_approval: bool = True


def _record(row: ApprovalRow, deciders: ApprovalDecidersRow | None) -> ApprovalRecord:
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
        approver_sets=tuple(tuple(s) for s in deciders.approver_sets) if deciders else (),
        self_approval=deciders.self_approval if deciders else True,
    )


async def _records(session: AsyncSession, rows: Sequence[ApprovalRow]) -> list[ApprovalRecord]:
    """Records for `rows`, each with its deciders row (read in one query)."""
    ids = [row.id for row in rows]
    deciders: dict[str, ApprovalDecidersRow] = {}
    if ids:
        found = await session.exec(
            select(ApprovalDecidersRow).where(col(ApprovalDecidersRow.approval_id).in_(ids))
        )
        deciders = {d.approval_id: d for d in found.all()}
    return [_record(row, deciders.get(row.id)) for row in rows]


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
        approver_sets: Sequence[Sequence[str]] = (),
        self_approval: bool = True,
    ) -> ApprovalRecord:
        """Record a pending request and who may decide it, in one transaction."""
        row = ApprovalRow(
            owner=owner,
            id=f"ap-{uuid.uuid4().hex[:16]}",
            session_id=session_id,
            agent=agent,
            task_id=task_id,
            tool=tool,
            arguments=storable(arguments) or "",
            reason=storable(reason) or "",
            requested_by=requested_by,
            channel_id=channel_id,
        )
        deciders = ApprovalDecidersRow(
            approval_id=row.id,
            approver_sets=[list(s) for s in approver_sets],
            self_approval=self_approval,
        )
        async with self.database.sessions() as session:
            session.add(row)
            # The request row first: the deciders row refers to it.
            await session.flush()
            session.add(deciders)
            await session.commit()
            return _record(row, deciders)

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
            if row is None:
                return None
            return _record(row, await session.get(ApprovalDecidersRow, approval_id))

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
            return await _records(session, result.all())

    async def recent_decisions(self, channel_id: str, limit: int = 10) -> list[ApprovalRecord]:
        """The channel's latest approved, denied and expired requests, newest first."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ApprovalRow)
                .where(
                    ApprovalRow.channel_id == channel_id,
                    col(ApprovalRow.state).in_(DECIDED_STATES),
                )
                .order_by(col(ApprovalRow.decided_at).desc(), col(ApprovalRow.id).desc())
                .limit(limit)
            )
            return await _records(session, result.all())
