"""Runs counted per window of time (a watched channel's hour), across every replica.

A slot is taken by one conditional update (`count < cap`), so two replicas taking the
last slot at once take it once.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from bot.store.database import Database
from bot.store.models import TriggerWindowRow, utcnow

# Windows are hours: a day of them is far more than any cap needs.
KEEP_WINDOWS = timedelta(days=1)


class TriggerWindows:
    """Counts of runs per window key, capped."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def take(self, key: str, *, cap: int) -> bool:
        """Take one of the `cap` slots of window `key`; False when all are taken."""
        await self._ensure(key)
        async with self.database.sessions() as session:
            result = await session.exec(
                update(TriggerWindowRow)
                .where(col(TriggerWindowRow.key) == key)
                .where(col(TriggerWindowRow.count) < cap)
                .values(count=TriggerWindowRow.count + 1)
            )
            await session.commit()
            return bool(result.rowcount)

    async def note_once(self, key: str) -> bool:
        """True for the first caller only: the one to say that window `key` is full."""
        await self._ensure(key)
        async with self.database.sessions() as session:
            result = await session.exec(
                update(TriggerWindowRow)
                .where(col(TriggerWindowRow.key) == key)
                .where(col(TriggerWindowRow.noted).is_(False))
                .values(noted=True)
            )
            await session.commit()
            return bool(result.rowcount)

    async def count(self, key: str) -> int:
        async with self.database.sessions() as session:
            row = await session.get(TriggerWindowRow, key)
            return row.count if row is not None else 0

    async def prune(self, older_than: timedelta = KEEP_WINDOWS) -> int:
        """Forget windows made more than `older_than` ago."""
        async with self.database.sessions() as session:
            result = await session.exec(
                delete(TriggerWindowRow).where(
                    col(TriggerWindowRow.created_at) < utcnow() - older_than
                )
            )
            await session.commit()
            return int(result.rowcount or 0)

    async def _ensure(self, key: str) -> None:
        async with self.database.sessions() as session:
            if await session.get(TriggerWindowRow, key) is not None:
                return
            try:
                session.add(TriggerWindowRow(key=key))
                await session.commit()
            except IntegrityError:
                await session.rollback()  # another replica made it meanwhile
