"""Which Baton processes are alive: random ids, the database's clock, re-registration.

Each test runs on SQLite and, when BATON_TEST_POSTGRES_URL names a server, on
PostgreSQL (tests/databases.py). Time travel is done in SQL, with the database's
own clock, never with Python's.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, extract, func, literal, update
from sqlmodel import col

from bot.store import Database, SessionKey, SessionStore, models
from bot.store import instances as instances_module
from bot.store.instances import HEARTBEAT_EVERY_S, STALE_AFTER_S, Instances
from bot.store.models import InstanceRow
from bot.store.tasks import TaskStore


async def registered(database: Database, **kwargs: str) -> Instances:
    instance = Instances(database, **kwargs)
    await instance.register()
    return instance


async def age_by(database: Database, instance: Instances, seconds: float) -> None:
    """Make `instance`'s last heartbeat `seconds` old, by the database's clock."""
    sqlite = database.engine.dialect.name == "sqlite"
    if sqlite:
        then = func.strftime("%Y-%m-%d %H:%M:%f", "now", f"-{seconds} seconds").concat("000")
    else:
        then = func.now() - literal(timedelta(seconds=seconds))
    async with database.sessions() as session:
        await session.exec(
            update(InstanceRow).where(col(InstanceRow.id) == instance.id).values(heartbeat_at=then)
        )
        await session.commit()


async def heartbeat_age(database: Database, instance: Instances) -> float:
    column = col(InstanceRow.heartbeat_at)
    if database.engine.dialect.name == "sqlite":
        age = (func.julianday("now") - func.julianday(column)) * 86400.0
    else:
        age = extract("epoch", func.now() - column)
    async with database.sessions() as session:
        result = await session.exec(
            InstanceRow.__table__.select()  # type: ignore[attr-defined]
            .with_only_columns(age)
            .where(col(InstanceRow.id) == instance.id)
        )
        return float(result.scalar_one())


def test_the_constants_let_others_act_within_ten_seconds() -> None:
    assert HEARTBEAT_EVERY_S * 3 <= STALE_AFTER_S < 10


async def test_ids_are_random_not_host_and_pid(database: Database) -> None:
    a, b = Instances(database), Instances(database)
    assert (a.host, a.pid) == (b.host, b.pid)
    assert a.id != b.id
    assert a.host not in a.id and str(a.pid) not in a.id


async def test_two_instances_on_the_same_host_and_pid_both_stay_alive(
    database: Database,
) -> None:
    a = await registered(database)
    b = await registered(database)
    b.host, b.pid = a.host, a.pid  # containers with host networking: same name, same pid
    assert await a.alive() == {a.id, b.id}
    assert await b.alive() == {a.id, b.id}
    await a.forget_dead()
    await b.forget_dead()
    assert await a.beat() and await b.beat()
    assert await a.alive() == {a.id, b.id}
    assert a.losses == b.losses == 0


async def test_dead_after_the_expiry_and_not_before(database: Database) -> None:
    here = await registered(database)
    other = await registered(database)
    await age_by(database, other, STALE_AFTER_S - 1.5)
    assert other.id in await here.alive()
    await here.forget_dead()
    assert other.id in await here.alive()
    await age_by(database, other, STALE_AFTER_S + 0.5)
    assert other.id not in await here.alive()
    # An instance never counts itself dead, however old its own row.
    assert here.id in await other.alive()


async def test_dead_after_the_expiry_in_real_time(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(instances_module, "STALE_AFTER_S", 0.6)
    here = await registered(database)
    other = await registered(database)
    await asyncio.sleep(0.35)
    assert await here.beat()
    assert other.id in await here.alive()
    await asyncio.sleep(0.35)
    assert other.id not in await here.alive()  # 0.7 s without a beat
    assert here.id in await other.alive()  # 0.35 s
    assert await other.beat() is False


async def test_a_skewed_python_clock_changes_nothing(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Replica A's clock is an hour ahead, B's an hour behind: neither matters.
    real = datetime.now(UTC)
    monkeypatch.setattr(models, "utcnow", lambda: real + timedelta(hours=1))
    a = await registered(database)
    monkeypatch.setattr(models, "utcnow", lambda: real - timedelta(hours=1))
    b = await registered(database)
    assert await a.beat() and await b.beat()
    assert await a.alive() == await b.alive() == {a.id, b.id}
    assert abs(await heartbeat_age(database, a)) < 5
    assert abs(await heartbeat_age(database, b)) < 5
    await a.forget_dead()
    await b.forget_dead()
    assert await a.alive() == {a.id, b.id}


async def test_a_stalled_instance_that_was_forgotten_registers_again(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    here = await registered(database)
    stalled = await registered(database)
    told: list[str] = []
    stalled.on_lost(lambda: told.append("sync"))

    async def later() -> None:
        told.append("async")

    stalled.on_lost(later)
    await age_by(database, stalled, STALE_AFTER_S + 2)  # it missed its heartbeats
    assert stalled.id not in await here.alive()
    await here.forget_dead()  # ... and the others dropped it
    with caplog.at_level(logging.WARNING, logger="bot.store.instances"):
        assert await stalled.beat() is False
    assert stalled.losses == 1
    assert told == ["sync", "async"]
    assert "declared dead" in caplog.text
    assert stalled.id in await here.alive()
    await here.forget_dead()
    assert stalled.id in await here.alive()
    # From then on it beats as usual.
    assert await stalled.beat() is True
    assert stalled.losses == 1


async def test_a_stale_instance_not_yet_forgotten_still_learns_it_was_lost(
    database: Database,
) -> None:
    here = await registered(database)
    stalled = await registered(database)
    await age_by(database, stalled, STALE_AFTER_S + 2)
    # The others may already have failed its work with this very answer:
    assert stalled.id not in await here.alive()
    assert await stalled.beat() is False
    assert stalled.losses == 1
    assert stalled.id in await here.alive()
    assert await heartbeat_age(database, stalled) < 5


async def test_a_failing_callback_does_not_stop_the_heartbeat(database: Database) -> None:
    stalled = await registered(database)

    def broken() -> None:
        raise RuntimeError("boom")

    stalled.on_lost(broken)
    async with database.sessions() as session:
        await session.exec(delete(InstanceRow).where(col(InstanceRow.id) == stalled.id))
        await session.commit()
    assert await stalled.beat() is False
    assert stalled.id in await Instances(database).alive()


async def test_a_crashed_replicas_tasks_are_failed_once_it_expired_not_before(
    database: Database,
) -> None:
    # A restart of the same container: same host and pid, a new id; the old run's
    # work is recovered when its heartbeat is STALE_AFTER_S old (the next sweep).
    crashed = await registered(database)
    restarted = await registered(database)
    session = await SessionStore(database).get_or_create(
        SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.1")
    )
    tasks = TaskStore(database)
    await tasks.create(
        task_id="task-explore-1", session_id=session.id, channel_id="C1", agent="explore",
        description="d", prompt="p", background=True, started_by=None, owner=crashed.id,
    )  # fmt: skip
    # (Three seconds short: a loaded machine may take a second or two to ask.)
    await age_by(database, crashed, STALE_AFTER_S - 3)
    assert await tasks.fail_orphans("gone", alive=await restarted.alive()) == []
    await age_by(database, crashed, STALE_AFTER_S + 0.5)
    failed = await tasks.fail_orphans("gone", alive=await restarted.alive())
    assert [t.id for t in failed] == ["task-explore-1"]


async def test_a_clean_shutdown_is_dead_at_once_for_the_others(database: Database) -> None:
    leaving = await registered(database)
    staying = await registered(database)
    await leaving.unregister()
    # No wait for the expiry: its work can be taken care of right away.
    assert leaving.id not in await staying.alive()
