"""Tokens spent per LLM call, and the day's totals for a person or a channel, by model."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import func, insert
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import RunRow, UsageRow, utcnow

_INSERT = insert(UsageRow)


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
    """Record each LLM call's tokens; sum them per UTC day for a person, a channel or a run.

    Rows recorded at the same time (the children of a fan-out ending together) are
    written in one transaction: with SQLite, every concurrent write transaction waits
    for the file's lock, in back-off sleeps of up to 100 ms, so sixteen of them at once
    took hundreds of milliseconds each (bench/fanout.py). `record` still returns only
    once its row is stored.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self._queue: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

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
        row = {
            "day": day.isoformat(),
            "user_id": user_id,
            "channel_id": channel_id,
            "run_id": run_id,
            "task_id": task_id,
            "model": model,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "created_at": utcnow(),
        }
        stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Read even when the caller stopped waiting (cancelled): never "never retrieved".
        stored.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._queue.append((row, stored))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="usage-writer")
        # Shielded: a cancelled run's call was paid for, its row is written all the same.
        await asyncio.shield(stored)

    async def _write(self) -> None:
        """Write what is queued, one transaction for all that waits, until nothing does."""
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                # A plain INSERT: an ORM session costs twice the CPU of the statement
                # itself (0.7 ms a call, bench/loop_overhead.py).
                async with self.database.engine.begin() as connection:
                    await connection.execute(_INSERT, [row for row, _ in batch])
            except BaseException as exc:
                # Cancelled too (shutdown): nobody waits for ever on a row not written.
                for _, stored in batch:
                    if not stored.done():
                        stored.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for _, stored in batch:
                    if not stored.done():
                        stored.set_result(None)

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

    async def session_total(self, session_id: int) -> UsageTotals:
        """What every run of one conversation spent, its sub-agents included."""
        runs = select(RunRow.id).where(col(RunRow.session_id) == session_id)
        return await self._totals(col(UsageRow.run_id).in_(runs))

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
