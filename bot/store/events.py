"""The ledger of Slack events already taken, so each message starts at most one run."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from bot.store.database import Database
from bot.store.models import ProcessedEventRow


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
