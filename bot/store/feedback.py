"""Feedback on runs' answers: one 👍 or 👎 per person and run, the latest click kept.

A click is recorded only for a run that exists in the channel the click came from,
so a button value carried to another channel (or made up) counts nothing. The check
and the write are one statement (``INSERT … SELECT … ON CONFLICT DO UPDATE``), on
SQLite and PostgreSQL alike: a double click, a replayed request or two replicas
taking the same click leave one row per person and run, with the latest value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, literal
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import FeedbackRow, RunRow, utcnow

GOOD = "good"
BAD = "bad"
VALUES = (GOOD, BAD)


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackCounts:
    """How many 👍 (`good`) and 👎 (`bad`) answers were given."""

    good: int = 0
    bad: int = 0

    @property
    def total(self) -> int:
        return self.good + self.bad


class FeedbackStore:
    """Record people's feedback on runs and count it."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def _insert(self) -> Any:
        """The dialect's INSERT, the one that knows ON CONFLICT."""
        if self.database.engine.dialect.name == "postgresql":
            return postgresql.insert(FeedbackRow)
        return sqlite.insert(FeedbackRow)

    async def record(self, run_id: str, *, user_id: str, channel_id: str, value: str) -> bool:
        """Keep `user_id`'s `value` for the run, replacing what they said before.

        Args:
            run_id: The run whose answer was rated.
            user_id: The person who clicked.
            channel_id: The channel of the message clicked.
            value: ``"good"`` or ``"bad"``.

        Returns:
            False, and nothing stored, when there is no such run in `channel_id`.

        Raises:
            ValueError: If `value` is neither ``"good"`` nor ``"bad"``.
        """
        if value not in VALUES:
            raise ValueError(f"feedback is 'good' or 'bad', not {value!r}")
        now = utcnow()
        # Only the run's own row can supply the values: no run in that channel, no insert.
        source = select(
            col(RunRow.id),
            literal(user_id),
            col(RunRow.channel_id),
            literal(value),
            literal(now, type_=FeedbackRow.__table__.c.created_at.type),  # type: ignore[attr-defined]
        ).where(col(RunRow.id) == run_id, col(RunRow.channel_id) == channel_id)
        insert = self._insert()
        statement = insert.from_select(
            ["run_id", "user_id", "channel_id", "value", "created_at"], source
        ).on_conflict_do_update(
            index_elements=["run_id", "user_id"],
            set_={"value": insert.excluded.value, "created_at": insert.excluded.created_at},
        )
        async with self.database.sessions() as session:
            outcome = await session.exec(statement)
            await session.commit()
            return outcome.rowcount == 1

    async def get(self, run_id: str, *, user_id: str) -> str | None:
        """What `user_id` last said about the run, if anything."""
        async with self.database.sessions() as session:
            row = await session.get(FeedbackRow, (run_id, user_id))
            return row.value if row else None

    async def counts(
        self, *, started_by: str | None = None, channel_id: str | None = None
    ) -> FeedbackCounts:
        """👍 and 👎 given to answers, by everyone who rated them.

        Args:
            started_by: Only runs this person started (App Home shows its viewer's).
            channel_id: Only runs in this channel.

        Returns:
            The totals; every person's latest rating of a run counts once.
        """
        statement = select(
            func.coalesce(func.sum(case((col(FeedbackRow.value) == GOOD, 1), else_=0)), 0),
            func.coalesce(func.sum(case((col(FeedbackRow.value) == BAD, 1), else_=0)), 0),
        ).select_from(FeedbackRow)
        if started_by is not None:
            statement = statement.join(RunRow, col(RunRow.id) == col(FeedbackRow.run_id)).where(
                col(RunRow.user_id) == started_by
            )
        if channel_id is not None:
            statement = statement.where(col(FeedbackRow.channel_id) == channel_id)
        async with self.database.sessions() as session:
            good, bad = (await session.exec(statement)).one()
        return FeedbackCounts(good=int(good), bad=int(bad))


__all__ = ["BAD", "GOOD", "FeedbackCounts", "FeedbackStore"]
