"""Baton processes sharing one database, and which of them are still alive.

Tasks and approvals record the process that owns them. Only a dead owner's work
is failed or expired, so restarting one replica never touches another's.

Liveness is the heartbeat's age measured by the database's clock: heartbeats are
written and compared with the time the database reads (`now()` on PostgreSQL, the
SQLite file's host clock on SQLite), never with a process's own clock, so replicas
whose clocks disagree still agree on who is alive. An instance's id is random;
its host and pid are only information (two containers may share both).

A process that stalls for longer than STALE_AFTER_S (GC, a blocked loop, a database
failover) may meanwhile have been declared dead: the others then fail its tasks,
expire its pending approvals and close its runs' progress. Its next heartbeat finds
that out, re-registers under the same id (so its new work is owned again) and tells
its `on_lost` callbacks: the work it had before the stall must be treated as taken
away (it was reported to people as interrupted), not silently carried on.
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import delete, extract, func, insert, literal, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import InstanceRow

logger = logging.getLogger(__name__)

# How often a process writes its heartbeat. Several beats fit in STALE_AFTER_S, so
# one slow or failed beat (a busy database, a short failover) does not kill it.
HEARTBEAT_EVERY_S = 1.5
# An instance whose last heartbeat is older than this, by the database's clock, is
# dead: its work may be failed or expired. With the others sweeping every
# MAINTENANCE_EVERY_S (bot/slack/surface.py, 1 s), a dead replica's work is reported
# within STALE_AFTER_S + one sweep of its last heartbeat: about 7 s, well inside the
# 10 s promised, with four beats to miss before a live process is taken for dead.
STALE_AFTER_S = 6.0

LostCallback = Callable[[], Awaitable[None] | None]


def new_instance_id() -> str:
    """A random id for this process: never derived from the host or the pid."""
    return uuid.uuid4().hex


class Instances:
    """This process's registration and heartbeat, and the liveness of the others."""

    def __init__(self, database: Database, *, instance_id: str | None = None) -> None:
        self.database = database
        self.id = instance_id or new_instance_id()
        self.host = socket.gethostname()[:255]
        self.pid = os.getpid()
        # How many times this process found, on a heartbeat, that it had been declared
        # dead (and re-registered).
        self.losses = 0
        self._on_lost: list[LostCallback] = []

    # The database's clock, in SQL -------------------------------------------------

    @property
    def _sqlite(self) -> bool:
        return self.database.engine.dialect.name == "sqlite"

    def _now(self) -> ColumnElement[Any]:
        """The database's current time, as a value for a timestamp column."""
        if self._sqlite:
            # SQLAlchemy's own text form of a SQLite datetime (UTC, microseconds), so
            # these values compare and read back like the ones Python writes.
            return func.strftime("%Y-%m-%d %H:%M:%f", "now").concat("000")
        return func.now()

    def _age_s(self) -> ColumnElement[Any]:
        """Seconds since an instance's last heartbeat, by the database's clock."""
        column = col(InstanceRow.heartbeat_at)
        if self._sqlite:
            return (func.julianday("now") - func.julianday(column)) * literal(86400.0)
        return extract("epoch", func.now() - column)

    def _fresh(self) -> ColumnElement[bool]:
        return self._age_s() <= STALE_AFTER_S

    # This process -------------------------------------------------------------------

    def on_lost(self, callback: LostCallback) -> None:
        """Call `callback` when a heartbeat finds this process had been declared dead.

        By then the others may have failed its running tasks, expired its pending
        approvals and closed its runs' progress messages ("interrupted"): an owner
        should stop (or re-check in the database) the work it started before, rather
        than go on as if nothing happened. Work started after the call is owned anew.
        Callbacks run inside the heartbeat (bounded by its timeout): keep them short,
        start longer work as a task of its own.
        """
        self._on_lost.append(callback)

    async def register(self) -> None:
        async with self.database.sessions() as session:
            await session.exec(self._insert())
            await session.commit()

    def _insert(self) -> Any:
        now = self._now()
        return insert(InstanceRow).values(
            id=self.id, host=self.host, pid=self.pid, started_at=now, heartbeat_at=now
        )

    async def beat(self) -> bool:
        """Write a heartbeat. False when this process had been declared dead: it is then
        registered again under the same id, a warning is logged and `on_lost` told."""
        mine = col(InstanceRow.id) == self.id
        async with self.database.sessions() as session:
            fresh = await session.exec(
                update(InstanceRow).where(mine, self._fresh()).values(heartbeat_at=self._now())
            )
            if fresh.rowcount:
                await session.commit()
                return True
            # Stale (the others already treat it as dead) or gone (forget_dead ran).
            revived = await session.exec(
                update(InstanceRow).where(mine).values(heartbeat_at=self._now())
            )
            if not revived.rowcount:
                try:
                    await session.exec(self._insert())
                except IntegrityError:  # registered again meanwhile
                    await session.rollback()
            await session.commit()
        self.losses += 1
        logger.warning(
            "instance %s missed heartbeats for over %.0f s and was declared dead; "
            "its earlier tasks, approvals and runs may have been ended by other replicas. "
            "Registered again.",
            self.id,
            STALE_AFTER_S,
        )
        for callback in list(self._on_lost):
            try:
                outcome = callback()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                logger.exception("an on_lost callback failed")
        return False

    # The others ---------------------------------------------------------------------

    async def alive(self) -> set[str]:
        """Ids of the instances that may still own tasks and approvals (this one included).

        Alive are the instances whose heartbeat is at most STALE_AFTER_S old by the
        database's clock. Work owned by an id that is not alive may be failed or expired.
        """
        async with self.database.sessions() as session:
            query = select(InstanceRow.id).where(self._fresh())
            rows = (await session.exec(query)).all()
        return {self.id, *rows}

    async def unregister(self) -> None:
        """Say this process is gone (a clean shutdown, its work ended or handed over),
        so the others take care of what is left at once instead of after the expiry."""
        async with self.database.sessions() as session:
            await session.exec(delete(InstanceRow).where(col(InstanceRow.id) == self.id))
            await session.commit()

    async def forget_dead(self) -> None:
        """Drop the rows of dead instances (once their work has been recovered).

        One statement, so an instance that beats meanwhile is never dropped. A dropped
        instance that was only stalled registers again on its next heartbeat.
        """
        async with self.database.sessions() as session:
            await session.exec(
                delete(InstanceRow).where(
                    col(InstanceRow.id) != self.id, self._age_s() > STALE_AFTER_S
                )
            )
            await session.commit()
