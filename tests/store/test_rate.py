"""The Slack rate budget's state: GCRA reservations in memory and in PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator

import pytest

from bot.store.database import Database
from bot.store.rate import (
    FallbackRateStore,
    MemoryRateStore,
    PostgresRateStore,
    Reservation,
    rate_store_for,
)
from tests.databases import POSTGRES_SERVER, fresh_postgres

needs_postgres = pytest.mark.skipif(
    not POSTGRES_SERVER, reason="BATON_TEST_POSTGRES_URL is not set"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_memory_reservations_move_the_arrival_time_one_interval_each() -> None:
    clock = Clock()
    store = MemoryRateStore(clock)
    assert await store.reserve("chat.update", 2.0, math.inf) == Reservation(True, 0.0)
    assert await store.reserve("chat.update", 2.0, math.inf) == Reservation(True, 2.0)
    assert await store.reserve("chat.update", 2.0, math.inf) == Reservation(True, 4.0)
    assert store.tats["chat.update"] == 1006.0
    clock.now += 5.0  # the debt runs off with time
    assert await store.reserve("chat.update", 2.0, math.inf) == Reservation(True, 1.0)
    clock.now += 100.0  # and never turns into credit
    assert await store.reserve("chat.update", 2.0, math.inf) == Reservation(True, 0.0)
    assert store.tats["chat.update"] == clock.now + 2.0


async def test_memory_refuses_beyond_the_tolerance_and_changes_nothing() -> None:
    clock = Clock()
    store = MemoryRateStore(clock)
    await store.reserve("k", 1.0, 0.0)
    assert await store.reserve("k", 1.0, 0.5) == Reservation(False, 1.0)
    assert store.tats["k"] == 1001.0
    clock.now += 0.5
    taken = await store.reserve("k", 1.0, 0.5)
    assert taken == Reservation(True, 0.5) and taken.tat == 1002.0
    assert await store.release("k", 1.0, taken.tat)
    assert store.tats["k"] == 1001.0
    assert (await store.reserve("other", 1.0, 0.0)).granted  # keys are separate


async def test_memory_gives_a_slot_back_only_while_nobody_reserved_after_it() -> None:
    """A cancelled caller's slot, with a later caller already planned behind it, stays
    used: moving the arrival time back would hand the next caller the later caller's
    slot, and the two would go out together (a 429 at Slack)."""
    clock = Clock()
    store = MemoryRateStore(clock)
    first = await store.reserve("k", 1.0, math.inf)  # due now
    cancelled = await store.reserve("k", 1.0, math.inf)  # due at +1
    later = await store.reserve("k", 1.0, math.inf)  # due at +2
    assert not await store.release("k", 1.0, cancelled.tat)
    assert store.tats["k"] == later.tat == 1003.0
    following = await store.reserve("k", 1.0, math.inf)
    assert following.ahead == 3.0  # not +2, which `later` holds
    assert await store.release("k", 1.0, following.tat)  # the last one: given back
    assert store.tats["k"] == 1003.0
    assert not await store.release("k", 1.0, following.tat)  # and only once
    assert first.tat == 1001.0


async def test_a_store_for_sqlite_is_in_memory(tmp_path: object) -> None:
    assert isinstance(rate_store_for(None), MemoryRateStore)
    database = Database("sqlite:///:memory:")
    try:
        assert isinstance(rate_store_for(database), MemoryRateStore)
    finally:
        await database.close()


class Broken:
    def __init__(self) -> None:
        self.calls = 0

    async def reserve(self, key: str, interval: float, tolerance: float) -> Reservation:
        self.calls += 1
        raise OSError("connection refused")

    async def release(self, key: str, interval: float, tat: float) -> bool:
        raise OSError("connection refused")


async def test_a_failing_shared_store_falls_back_to_memory_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    primary, clock = Broken(), Clock()
    store = FallbackRateStore(primary, MemoryRateStore(clock), cool_down_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="bot.store.rate"):
        first = await store.reserve("k", 1.0, math.inf)
        second = await store.reserve("k", 1.0, math.inf)  # within the cool-down: memory only
        clock.now += 11.0
        third = await store.reserve("k", 1.0, math.inf)  # PostgreSQL is asked again
    assert (first, second, third) == (
        Reservation(True, 0.0),
        Reservation(True, 1.0),
        Reservation(True, 0.0),
    )
    assert primary.calls == 2 and store.fallbacks == 3
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1


class Hanging(Broken):
    async def reserve(self, key: str, interval: float, tolerance: float) -> Reservation:
        self.calls += 1
        await asyncio.sleep(60)
        raise AssertionError("not reached")


async def test_a_hanging_shared_store_costs_one_timeout_not_one_per_call() -> None:
    primary = Hanging()
    store = FallbackRateStore(primary, timeout_s=0.1)
    began = time.monotonic()
    for _ in range(5):
        assert (await store.reserve("k", 0.01, math.inf)).granted
    assert time.monotonic() - began < 0.5
    assert primary.calls == 1


# ------------------------------------------------------------------ PostgreSQL


@pytest.fixture
async def pg() -> AsyncIterator[Database]:
    async with fresh_postgres() as url:
        database = Database(url)
        await database.create_schema()
        try:
            yield database
        finally:
            await database.close()


@needs_postgres
async def test_postgres_reservations_are_gcra_on_the_database_clock(pg: Database) -> None:
    store = PostgresRateStore(pg)
    assert isinstance(rate_store_for(pg), FallbackRateStore)
    first = await store.reserve("chat.update", 10.0, math.inf)
    second = await store.reserve("chat.update", 10.0, math.inf)
    third = await store.reserve("chat.update", 10.0, 15.0)  # finds 20 s of debt
    assert first.granted and first.ahead < 0.5
    assert second.granted and 9.5 < second.ahead <= 10.0
    assert not third.granted and 19.5 < third.ahead <= 20.0
    assert not await store.release("chat.update", 10.0, first.tat)  # `second` is behind it
    assert await store.release("chat.update", 10.0, second.tat)
    assert not await store.release("chat.update", 10.0, second.tat)  # only once
    again = await store.reserve("chat.update", 10.0, 15.0)
    assert again.granted and 9.5 < again.ahead <= 10.0
    assert (await store.reserve("channel:C1", 10.0, 0.0)).granted


@needs_postgres
async def test_postgres_shares_one_limit_between_processes(pg: Database) -> None:
    """Two engines (two replicas' pools), five callers each: never above the rate."""
    interval, burst = 0.05, 3
    tolerance = (burst - 1) * interval
    other = Database(pg.url)
    granted: list[float] = []
    try:

        async def caller(database: Database) -> None:
            store = PostgresRateStore(database)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                if (await store.reserve("shared", interval, tolerance)).granted:
                    granted.append(time.monotonic())
                else:
                    await asyncio.sleep(0.005)

        began = time.monotonic()
        await asyncio.gather(*(caller(db) for db in (pg, other) for _ in range(5)))
        elapsed = time.monotonic() - began
    finally:
        await other.close()
    # GCRA: at most the burst, then one per interval; well used, too.
    assert len(granted) <= burst + elapsed / interval + 1
    assert len(granted) >= 0.6 / interval
    # In any window of 0.25 s there are at most burst + 0.25 / interval calls.
    for start in granted:
        window = [t for t in granted if start <= t < start + 0.25]
        assert len(window) <= burst + 0.25 / interval + 1
