"""The usage ledger: calls recorded together are each stored, in one transaction or several."""

from __future__ import annotations

import asyncio
from datetime import date
from pathlib import Path

import pytest
from sqlmodel import select

from bot.store.database import Database
from bot.store.models import UsageRow
from bot.store.usage import UsageStore

DAY = date(2026, 11, 30)


@pytest.fixture
async def database(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'usage.db'}")
    await database.create_schema()
    yield database  # type: ignore[misc]
    await database.close()


async def record(store: UsageStore, n: int) -> None:
    await store.record(
        day=DAY, user_id="U1", channel_id="C1", run_id="run", task_id=f"task-{n}",
        model="fake-model", prompt_tokens=100 + n, completion_tokens=n,
    )  # fmt: skip


async def test_concurrent_records_are_each_stored_once_they_return(database: Database) -> None:
    store = UsageStore(database)
    await asyncio.gather(*(record(store, n) for n in range(20)))
    async with database.sessions() as session:
        rows = (await session.exec(select(UsageRow))).all()
    assert sorted(r.task_id or "" for r in rows) == sorted(f"task-{n}" for n in range(20))
    totals = await store.run_total("run")
    assert totals.prompt_tokens == sum(100 + n for n in range(20))
    assert totals.completion_tokens == sum(range(20))


async def test_a_cancelled_caller_still_gets_its_row_written(database: Database) -> None:
    store = UsageStore(database)
    call = asyncio.create_task(record(store, 1))
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await record(store, 2)  # queued behind it: when this returns, both are stored
    assert (await store.run_total("run")).prompt_tokens == 101 + 102
