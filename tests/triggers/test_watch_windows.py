"""A watched channel's hourly cap across replicas: each replica is a Database of its own
(its own engine and connections) on one SQLite file or one PostgreSQL database, and
they take slots at the same moment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlmodel import col

from bot.store import Database
from bot.store.models import TriggerWindowRow, utcnow
from bot.store.windows import TriggerWindows
from tests.databases import fresh_database

KEY = "watch:C0ALERTS00:2030-05-06T09"


@pytest.fixture(params=["sqlite", "postgresql"])
async def replicas(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[TriggerWindows, TriggerWindows]]:
    """Two replicas' windows on one fresh database (PostgreSQL skips without a server)."""
    async with fresh_database(request.param, tmp_path) as url:
        first, second = Database(url), Database(url)
        await first.create_schema()
        try:
            yield TriggerWindows(first), TriggerWindows(second)
        finally:
            await first.close()
            await second.close()


async def test_replicas_taking_at_once_take_exactly_the_cap(
    replicas: tuple[TriggerWindows, TriggerWindows],
) -> None:
    """Twenty takes at once, ten on each replica, of a window nobody made yet: both
    replicas make it at once, and exactly `cap` of them get a slot."""
    first, second = replicas
    taken = await asyncio.gather(
        *(windows.take(KEY, cap=7) for _ in range(10) for windows in (first, second))
    )
    assert sum(taken) == 7
    assert await first.count(KEY) == await second.count(KEY) == 7
    assert not await second.take(KEY, cap=7)
    assert await first.take(KEY, cap=8)  # a reload that raised the cap makes room


async def test_one_replica_says_a_window_is_full(
    replicas: tuple[TriggerWindows, TriggerWindows],
) -> None:
    first, second = replicas
    noted = await asyncio.gather(
        *(windows.note_once(KEY) for _ in range(5) for windows in (first, second))
    )
    assert sum(noted) == 1
    assert await first.note_once("watch:C0ALERTS00:2030-05-06T10")  # the next hour's own


async def test_windows_are_counted_apart_and_old_ones_forgotten(
    replicas: tuple[TriggerWindows, TriggerWindows],
) -> None:
    first, _ = replicas
    other = "watch:C0OTHER000:2030-05-06T09"
    assert await first.take(KEY, cap=1)
    assert await first.take(other, cap=1)
    assert not await first.take(KEY, cap=1)
    assert (await first.count(KEY), await first.count(other), await first.count("none")) == (
        1,
        1,
        0,
    )
    async with first.database.sessions() as session:
        await session.exec(
            update(TriggerWindowRow)
            .where(col(TriggerWindowRow.key) == KEY)
            .values(created_at=utcnow() - timedelta(days=2))
        )
        await session.commit()
    assert await first.prune() == 1
    assert (await first.count(KEY), await first.count(other)) == (0, 1)
