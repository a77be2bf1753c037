"""Baton processes sharing one database, and which of them are still alive.

Tasks and approvals record the process that owns them. Only a dead owner's work
is failed or expired, so restarting one replica never touches another's.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import InstanceRow, as_utc, utcnow

HEARTBEAT_EVERY_S = 15.0
STALE_AFTER = timedelta(seconds=60)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Instances:
    """This process's registration and heartbeat, and the liveness of the others."""

    def __init__(self, database: Database, *, instance_id: str | None = None) -> None:
        self.database = database
        self.id = instance_id or f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:12]}"
        self.host = socket.gethostname()
        self.pid = os.getpid()

    async def register(self) -> None:
        async with self.database.sessions() as session:
            session.add(InstanceRow(id=self.id, host=self.host, pid=self.pid))
            await session.commit()

    async def beat(self) -> None:
        async with self.database.sessions() as session:
            await session.exec(
                update(InstanceRow)
                .where(col(InstanceRow.id) == self.id)
                .values(heartbeat_at=utcnow())
            )
            await session.commit()

    async def alive(self) -> set[str]:
        """Ids of the instances that may still own tasks and approvals (this one included).

        Dead are: a heartbeat older than STALE_AFTER, or, on this host, a process that
        is gone or whose pid is now ours (an earlier run of this very container).
        Work owned by an id that is not alive may be failed or expired.
        """
        async with self.database.sessions() as session:
            rows = (await session.exec(select(InstanceRow))).all()
        now = utcnow()
        alive = {self.id}
        for row in rows:
            if row.id == self.id:
                continue
            stale = now - as_utc(row.heartbeat_at) > STALE_AFTER
            gone_here = row.host == self.host and (row.pid == self.pid or not _pid_alive(row.pid))
            if not (stale or gone_here):
                alive.add(row.id)
        return alive

    async def forget_dead(self) -> None:
        """Drop the rows of dead instances once their work has been recovered."""
        alive = await self.alive()
        async with self.database.sessions() as session:
            rows = (await session.exec(select(InstanceRow))).all()
            for row in rows:
                if row.id not in alive:
                    await session.delete(row)
            await session.commit()
