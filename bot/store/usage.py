"""Tokens spent per LLM call, and the day's totals for a person or a channel, by model."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import func
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import UsageRow


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelUsage:
    """Tokens one model spent (prices are per model, so totals keep them apart)."""

    model: str
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageTotals:
    """Summed usage, broken down by model (sorted by model name)."""

    by_model: tuple[ModelUsage, ...] = ()

    @property
    def prompt_tokens(self) -> int:
        return sum(m.prompt_tokens for m in self.by_model)

    @property
    def completion_tokens(self) -> int:
        return sum(m.completion_tokens for m in self.by_model)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class UsageStore:
    """Record each LLM call's tokens; sum them per UTC day for a person, a channel or a run."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def record(
        self,
        *,
        day: date,
        user_id: str | None,
        channel_id: str | None,
        run_id: str | None,
        task_id: str | None,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> None:
        async with self.database.sessions() as session:
            session.add(
                UsageRow(
                    day=day.isoformat(),
                    user_id=user_id,
                    channel_id=channel_id,
                    run_id=run_id,
                    task_id=task_id,
                    model=model,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                )
            )
            await session.commit()

    async def user_day(self, user_id: str, day: date) -> UsageTotals:
        """What runs started by `user_id` spent on `day` (UTC), their sub-agents included."""
        return await self._totals(
            col(UsageRow.user_id) == user_id, col(UsageRow.day) == day.isoformat()
        )

    async def channel_day(self, channel_id: str, day: date) -> UsageTotals:
        """What runs in `channel_id` spent on `day` (UTC), whoever started them."""
        return await self._totals(
            col(UsageRow.channel_id) == channel_id, col(UsageRow.day) == day.isoformat()
        )

    async def run_total(self, run_id: str) -> UsageTotals:
        """What one run spent, over every day it lasted, its sub-agents included."""
        return await self._totals(col(UsageRow.run_id) == run_id)

    async def _totals(self, *conditions: Any) -> UsageTotals:
        query = (
            select(
                UsageRow.model,
                func.coalesce(func.sum(UsageRow.prompt_tokens), 0),
                func.coalesce(func.sum(UsageRow.completion_tokens), 0),
            )
            .where(*conditions)
            .group_by(UsageRow.model)
            .order_by(UsageRow.model)
        )
        async with self.database.sessions() as session:
            rows = (await session.exec(query)).all()
        # int(): PostgreSQL sums integers as bigint or numeric depending on the type.
        return UsageTotals(
            by_model=tuple(
                ModelUsage(
                    model=model, prompt_tokens=int(prompt), completion_tokens=int(completion)
                )
                for model, prompt, completion in rows
            )
        )
