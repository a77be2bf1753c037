"""Schedules: those made from Slack, where each schedule stands, and its claimed fire times.

A schedule's state and fire times are kept by name, whichever made it (baton.yaml or
Slack): the replicas share them. A fire time is claimed by inserting its row (a
schedule and fire time are unique), so it fires once across every replica.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import (
    ScheduleFireRow,
    ScheduleRow,
    ScheduleStateRow,
    as_utc,
    utcnow,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlackSchedule:
    """A schedule made from Slack (`/tasks schedule`)."""

    id: int
    name: str
    cron: str
    timezone: str
    channel_id: str
    prompt: str
    agent: str
    owner: str
    created_by: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleState:
    """Where a schedule stands (see `ScheduleStateRow`)."""

    name: str
    spec: str
    since: datetime
    last_fire_at: datetime | None
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    failures: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleFire:
    """One claimed fire time of a schedule, and how its run went."""

    id: int
    name: str
    fire_at: datetime
    missed: int
    claimed_by: str
    run_id: str | None
    message_ts: str | None
    outcome: str | None
    created_at: datetime


def _schedule(row: ScheduleRow) -> SlackSchedule:
    assert row.id is not None
    return SlackSchedule(
        id=row.id,
        name=row.name,
        cron=row.cron,
        timezone=row.timezone,
        channel_id=row.channel_id,
        prompt=row.prompt,
        agent=row.agent,
        owner=row.owner,
        created_by=row.created_by,
        created_at=as_utc(row.created_at),
    )


def _state(row: ScheduleStateRow) -> ScheduleState:
    return ScheduleState(
        name=row.name,
        spec=row.spec,
        since=as_utc(row.since),
        last_fire_at=as_utc(row.last_fire_at) if row.last_fire_at else None,
        paused=row.paused,
        paused_by=row.paused_by,
        paused_at=as_utc(row.paused_at) if row.paused_at else None,
        failures=row.failures,
    )


def _fire(row: ScheduleFireRow) -> ScheduleFire:
    assert row.id is not None
    return ScheduleFire(
        id=row.id,
        name=row.name,
        fire_at=as_utc(row.fire_at),
        missed=row.missed,
        claimed_by=row.claimed_by,
        run_id=row.run_id,
        message_ts=row.message_ts,
        outcome=row.outcome,
        created_at=as_utc(row.created_at),
    )


class ScheduleStore:
    """Slack-made schedules, schedule states and fire claims, shared by every replica."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # ------------------------------------------------------------- Slack-made

    async def create(
        self,
        *,
        name: str,
        cron: str,
        timezone: str,
        channel_id: str,
        prompt: str,
        agent: str,
        owner: str,
        created_by: str,
    ) -> SlackSchedule | None:
        """Store a schedule made from Slack; None if one of that name exists already."""
        row = ScheduleRow(
            name=name,
            cron=cron,
            timezone=timezone,
            channel_id=channel_id,
            prompt=prompt,
            agent=agent,
            owner=owner,
            created_by=created_by,
        )
        try:
            async with self.database.sessions() as session:
                session.add(row)
                await session.commit()
                await session.refresh(row)
        except IntegrityError:
            return None
        return _schedule(row)

    async def get(self, name: str) -> SlackSchedule | None:
        async with self.database.sessions() as session:
            result = await session.exec(select(ScheduleRow).where(col(ScheduleRow.name) == name))
            row = result.first()
            return _schedule(row) if row else None

    async def made_in_slack(self, *, channel_id: str | None = None) -> list[SlackSchedule]:
        """The schedules made from Slack, by name; of one channel if given."""
        query = select(ScheduleRow).order_by(col(ScheduleRow.name))
        if channel_id is not None:
            query = query.where(col(ScheduleRow.channel_id) == channel_id)
        async with self.database.sessions() as session:
            return [_schedule(row) for row in (await session.exec(query)).all()]

    async def delete(self, name: str) -> bool:
        """Delete a schedule made from Slack, with its state and fires; False if none."""
        async with self.database.sessions() as session:
            result = await session.exec(delete(ScheduleRow).where(col(ScheduleRow.name) == name))
            await session.exec(delete(ScheduleStateRow).where(col(ScheduleStateRow.name) == name))
            await session.exec(delete(ScheduleFireRow).where(col(ScheduleFireRow.name) == name))
            await session.commit()
            return bool(result.rowcount)

    async def delete_made_in_slack(self, name: str) -> bool:
        """Delete a schedule made from Slack, keeping where its name stands (a shadowed
        one: the state and fires are baton.yaml's schedule's now); False if none."""
        async with self.database.sessions() as session:
            result = await session.exec(delete(ScheduleRow).where(col(ScheduleRow.name) == name))
            await session.commit()
            return bool(result.rowcount)

    # ------------------------------------------------------------------ state

    async def states(self, names: Collection[str] | None = None) -> dict[str, ScheduleState]:
        """The states of schedules `names` (all when None) that have one, by name."""
        query = select(ScheduleStateRow)
        if names is not None:
            query = query.where(col(ScheduleStateRow.name).in_(list(names)))
        async with self.database.sessions() as session:
            return {row.name: _state(row) for row in (await session.exec(query)).all()}

    async def ensure(self, name: str, spec: str, *, now: datetime) -> ScheduleState:
        """The schedule's state; a schedule seen for the first time, or whose spec (cron
        and time zone) changed, counts its fire times from `now`."""
        async with self.database.sessions() as session:
            row = await session.get(ScheduleStateRow, name)
            if row is not None and row.spec == spec:
                return _state(row)
            if row is None:
                try:
                    session.add(ScheduleStateRow(name=name, spec=spec, since=now, updated_at=now))
                    await session.commit()
                except IntegrityError:
                    await session.rollback()  # another replica made it meanwhile
            else:
                await session.exec(
                    update(ScheduleStateRow)
                    .where(col(ScheduleStateRow.name) == name)
                    .where(col(ScheduleStateRow.spec) != spec)
                    .values(spec=spec, since=now, last_fire_at=None, updated_at=now)
                )
                await session.commit()
        async with self.database.sessions() as session:
            fresh = await session.get(ScheduleStateRow, name)
            assert fresh is not None
            return _state(fresh)

    async def advance(self, name: str, fire_at: datetime) -> bool:
        """Record `fire_at` as the schedule's latest fire time, unless a later one is."""
        return await self._update(
            name,
            or_(
                col(ScheduleStateRow.last_fire_at).is_(None),
                col(ScheduleStateRow.last_fire_at) < fire_at,
            ),
            last_fire_at=fire_at,
        )

    async def pause(self, name: str, *, by: str, now: datetime | None = None) -> bool:
        """Pause a running schedule (`by`: a user id, or ``failures``); False if it was
        paused already, or has no state."""
        return await self._update(
            name,
            col(ScheduleStateRow.paused).is_(False),
            paused=True,
            paused_by=by,
            paused_at=now or utcnow(),
        )

    async def resume(self, name: str, *, now: datetime) -> bool:
        """Resume a paused schedule: its failures are forgotten, and the fire times that
        passed while it was paused do not run (it counts from `now`)."""
        return await self._update(
            name,
            col(ScheduleStateRow.paused).is_(True),
            paused=False,
            paused_by=None,
            paused_at=None,
            failures=0,
            since=now,
            last_fire_at=None,
        )

    async def record_outcome(self, name: str, *, failed: bool) -> int:
        """Count a run's end: a failure adds one to the failures in a row, a success
        resets them. The failures in a row now."""
        async with self.database.sessions() as session:
            values = {"failures": ScheduleStateRow.failures + 1} if failed else {"failures": 0}
            await session.exec(
                update(ScheduleStateRow)
                .where(col(ScheduleStateRow.name) == name)
                .values(**values, updated_at=utcnow())
            )
            await session.commit()
            row = await session.get(ScheduleStateRow, name, populate_existing=True)
            return row.failures if row is not None else 0

    async def forget(self, name: str) -> None:
        """Forget a schedule's state and fires (a schedule removed from baton.yaml)."""
        async with self.database.sessions() as session:
            await session.exec(delete(ScheduleStateRow).where(col(ScheduleStateRow.name) == name))
            await session.exec(delete(ScheduleFireRow).where(col(ScheduleFireRow.name) == name))
            await session.commit()

    async def _update(self, name: str, condition: object, **values: object) -> bool:
        async with self.database.sessions() as session:
            result = await session.exec(
                update(ScheduleStateRow)
                .where(col(ScheduleStateRow.name) == name)
                .where(condition)  # type: ignore[arg-type]
                .values(**values, updated_at=utcnow())
            )
            await session.commit()
            return bool(result.rowcount)

    # ------------------------------------------------------------------ fires

    async def claim(
        self, name: str, fire_at: datetime, *, missed: int, instance: str
    ) -> ScheduleFire | None:
        """Claim one fire time of a schedule; None if a replica claimed it already."""
        row = ScheduleFireRow(name=name, fire_at=fire_at, missed=missed, claimed_by=instance)
        try:
            async with self.database.sessions() as session:
                session.add(row)
                await session.commit()
                await session.refresh(row)
        except IntegrityError:
            return None
        return _fire(row)

    async def fired(
        self,
        fire_id: int,
        *,
        message_ts: str | None = None,
        run_id: str | None = None,
        outcome: str | None = None,
    ) -> None:
        """Record what became of a claimed fire time: its thread, its run, its end."""
        values = {
            key: value
            for key, value in (("message_ts", message_ts), ("run_id", run_id), ("outcome", outcome))
            if value is not None
        }
        if not values:
            return
        async with self.database.sessions() as session:
            await session.exec(
                update(ScheduleFireRow).where(col(ScheduleFireRow.id) == fire_id).values(**values)
            )
            await session.commit()

    async def fire_of(self, name: str, message_ts: str) -> ScheduleFire | None:
        """The fire whose run answers in the thread of `message_ts`."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ScheduleFireRow)
                .where(col(ScheduleFireRow.name) == name)
                .where(col(ScheduleFireRow.message_ts) == message_ts)
            )
            row = result.first()
            return _fire(row) if row else None

    async def latest_fires(self, names: Collection[str]) -> dict[str, datetime]:
        """The latest claimed fire time of each of `names` that has one, by name."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ScheduleFireRow.name, func.max(ScheduleFireRow.fire_at))
                .where(col(ScheduleFireRow.name).in_(list(names)))
                .group_by(col(ScheduleFireRow.name))
            )
            return {name: as_utc(at) for name, at in result.all() if at is not None}

    async def recent_fires(self, name: str, *, limit: int = 5) -> list[ScheduleFire]:
        """The schedule's latest fires, newest first."""
        async with self.database.sessions() as session:
            result = await session.exec(
                select(ScheduleFireRow)
                .where(col(ScheduleFireRow.name) == name)
                .order_by(col(ScheduleFireRow.fire_at).desc())
                .limit(limit)
            )
            return [_fire(row) for row in result.all()]
