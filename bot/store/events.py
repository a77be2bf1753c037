"""The ledger of Slack events already taken, so each message starts at most one run."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from bot.store.database import Database
from bot.store.models import ProcessedEventRow, utcnow

# Slack retries within minutes; a week of claims is far more than any retry needs.
KEEP_CLAIMS = timedelta(days=7)


class EventLedger:
    """Claims event keys; the first claim wins, in this process or any other."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def claim(self, key: str) -> bool:
        """Record `key`; True if this call was the first to do so."""
        try:
            async with self.database.sessions() as session:
                session.add(ProcessedEventRow(key=key))
                await session.commit()
        except IntegrityError:
            return False
        return True

    async def release(self, key: str) -> None:
        """Forget a claim whose work failed, so the same event delivered again is taken."""
        async with self.database.sessions() as session:
            await session.exec(delete(ProcessedEventRow).where(col(ProcessedEventRow.key) == key))
            await session.commit()

    async def prune(self, older_than: timedelta = KEEP_CLAIMS) -> int:
        """Forget claims older than `older_than`; returns how many were removed."""
        async with self.database.sessions() as session:
            result = await session.exec(
                delete(ProcessedEventRow).where(
                    col(ProcessedEventRow.created_at) < utcnow() - older_than
                )
            )
            await session.commit()
            return int(result.rowcount or 0)
