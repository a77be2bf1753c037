"""Signals: wake-ups within one process (SQLite, PostgreSQL) and between replicas (PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store import Database
from bot.store.signals import MAX_PAYLOAD_BYTES, Signals, payload
from tests.databases import POSTGRES_SERVER, fresh_database, fresh_postgres

needs_postgres = pytest.mark.skipif(
    not POSTGRES_SERVER, reason="BATON_TEST_POSTGRES_URL is not set"
)

# Waits here are 30 s: a wake-up within this (milliseconds when the machine is idle)
# can only be the signal's.
PROMPT_S = 3.0


@contextlib.asynccontextmanager
async def started(url: str) -> AsyncIterator[Signals]:
    database = Database(url)
    signals = Signals(database)
    await signals.start()
    try:
        yield signals
    finally:
        await signals.close()
        await database.close()


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with fresh_postgres() as url:
        yield url


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=needs_postgres)])
async def test_a_notify_wakes_this_process_at_once(kind: str, tmp_path: Path) -> None:
    async with fresh_database(kind, tmp_path) as url, started(url) as signals:
        approvals = signals.subscribe("approval")
        tasks = signals.subscribe("task")
        waiting = asyncio.create_task(approvals.wait(30))
        await asyncio.sleep(0)
        began = time.monotonic()
        await signals.notify("approval", "A1")
        assert await waiting is True
        assert time.monotonic() - began < PROMPT_S
        # Another topic's subscriber is not woken.
        assert await tasks.wait(0.05) is False
        approvals.close()
        tasks.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=needs_postgres)])
async def test_a_signal_is_kept_until_taken_and_taken_once(kind: str, tmp_path: Path) -> None:
    async with fresh_database(kind, tmp_path) as url, started(url) as signals:
        subscription = signals.subscribe("task")
        await signals.notify("task", "t1")
        await signals.notify("task", "t2")
        assert await subscription.wait(0) is True
        # Two signals before one wait are one wake-up; then nothing is pending.
        assert await subscription.wait(0.3) is False
        subscription.close()
        await signals.notify("task")  # nobody subscribed: nothing to do, no error


@needs_postgres
async def test_a_notify_on_one_replica_wakes_the_other(pg_url: str) -> None:
    async with started(pg_url) as first, started(pg_url) as second:
        subscription = second.subscribe("cancel")
        waiting = asyncio.create_task(subscription.wait(30))
        await asyncio.sleep(0)
        began = time.monotonic()
        await first.notify("cancel", "run-1")
        assert await waiting is True
        assert time.monotonic() - began < PROMPT_S
        subscription.close()


@needs_postgres
async def test_a_signal_from_another_replica_while_nobody_waits_is_not_lost(pg_url: str) -> None:
    async with started(pg_url) as first, started(pg_url) as second:
        subscription = second.subscribe("steer")
        await first.notify("steer", "C1:1.1")
        await asyncio.sleep(0.3)  # delivered meanwhile; nobody is in wait()
        assert await subscription.wait(0) is True
        assert await subscription.wait(0.2) is False
        subscription.close()


@needs_postgres
async def test_the_listener_reconnects_after_its_connection_is_killed(pg_url: str) -> None:
    async with started(pg_url) as first, started(pg_url) as second:
        subscription = second.subscribe("admission")
        assert second.listening
        admin = create_async_engine(
            make_url(pg_url).set(drivername="postgresql+asyncpg"), isolation_level="AUTOCOMMIT"
        )
        try:
            async with admin.connect() as connection:
                killed = await connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND query ILIKE 'LISTEN%'"
                    )
                )
                assert killed.all() == [(True,), (True,)]
        finally:
            await admin.dispose()
        # Once back it wakes every subscriber (a signal may have been missed)...
        assert await subscription.wait(5) is True
        assert second.listening
        # ...and signals flow again.
        waiting = asyncio.create_task(subscription.wait(30))
        await asyncio.sleep(0)
        began = time.monotonic()
        await first.notify("admission")
        assert await waiting is True
        assert time.monotonic() - began < PROMPT_S
        subscription.close()


@needs_postgres
async def test_a_hostile_key_is_delivered_safely(pg_url: str) -> None:
    async with started(pg_url) as first, started(pg_url) as second:
        async with first.database.engine.connect() as setup:
            await setup.execute(text("CREATE TABLE canary (id int)"))
            await setup.commit()
        received: list[str] = []
        # Read what arrives as the listener does, to check the payload itself.
        await second._connection.add_listener(
            "baton_signals", lambda _c, _p, _ch, body: received.append(body)
        )
        subscription = second.subscribe("approval")
        hostile = 'x\'); DROP TABLE canary; --\n"quoted"\r\n\x00é' + "é" * 8_000
        await first.notify("approval", hostile)
        assert await subscription.wait(5) is True
        for _ in range(50):
            if received:
                break
            await asyncio.sleep(0.05)
        [body] = received
        assert body == payload("approval", hostile)
        assert body.startswith('approval:x\'); DROP TABLE canary; --\n"quoted"\r\né')
        assert len(body.encode()) <= MAX_PAYLOAD_BYTES
        async with first.database.engine.connect() as check:
            tables = await check.execute(text("SELECT to_regclass('canary') IS NOT NULL"))
            assert tables.scalar() is True
        subscription.close()


@needs_postgres
async def test_start_on_a_database_that_is_down_does_not_raise(pg_url: str) -> None:
    url = make_url(pg_url).set(port=1).render_as_string(hide_password=False)
    async with started(url) as signals:
        assert not signals.listening
        subscription = signals.subscribe("task")
        await signals.notify("task")  # logged, not raised; still wakes this process
        assert await subscription.wait(0) is True
        subscription.close()


def test_payload_is_cut_on_a_character_boundary() -> None:
    body = payload("steer", "é" * 5_000)
    assert len(body.encode()) <= MAX_PAYLOAD_BYTES
    assert body.startswith("steer:é")
    assert body.encode().decode() == body
    assert payload("task", "t\x001") == "task:t1"
