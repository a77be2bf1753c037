"""The thread inbox and leases under contention: two `Database` objects on one database
stand for two replicas; on PostgreSQL they race for real."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from bot.store.database import Database
from bot.store.thread_inbox import PENDING, TAKEN, Inbound, ThreadInbox
from tests.databases import fresh_database

KEY = "slack:T1:C1:1700000000.000100"


@pytest.fixture(params=["sqlite", "postgresql"])
async def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[
    tuple[ThreadInbox, ThreadInbox]
]:  # fmt: skip
    async with fresh_database(request.param, tmp_path) as url:
        one, two = Database(url), Database(url)
        await one.create_schema()
        try:
            yield ThreadInbox(one), ThreadInbox(two)
        finally:
            await one.close()
            await two.close()


async def store(inbox: ThreadInbox, ts: str, *, addressed: bool = True) -> int:
    inbound = Inbound(
        session_key=KEY,
        channel_id="C1",
        thread_ts="1700000000.000100",
        ts=ts,
        user_id="U1",
        text=f"message {ts}",
        addressed=addressed,
    )
    message = await inbox.receive(inbound, holder="a", state=PENDING)
    assert message is not None
    return message.id


async def test_one_lease_per_thread_whoever_asks(replicas: tuple[ThreadInbox, ThreadInbox]) -> None:
    one, two = replicas
    alive = [f"p{i}" for i in range(20)]
    granted = await asyncio.gather(
        *(
            (one if i % 2 else two).lease(KEY, owner=f"p{i}", run_id=f"r{i}", alive=alive)
            for i in range(20)
        )
    )
    assert sum(granted) == 1
    holder = await one.holder(KEY, alive=alive)
    assert holder is not None and holder.run_id == f"r{granted.index(True)}"


async def test_a_dead_holders_lease_is_taken_over_once(
    replicas: tuple[ThreadInbox, ThreadInbox],
) -> None:
    one, two = replicas
    assert await one.lease(KEY, owner="dead", run_id="r-dead", alive=["dead"])
    alive = [f"p{i}" for i in range(10)]
    granted = await asyncio.gather(
        *(
            (one if i % 2 else two).lease(KEY, owner=f"p{i}", run_id=f"r{i}", alive=alive)
            for i in range(10)
        )
    )
    assert sum(granted) == 1
    # A live holder keeps it; releasing someone else's run frees nothing.
    assert not await one.lease(KEY, owner="p99", run_id="r99", alive=[*alive, "p99"])
    await two.release(KEY, "r-dead")
    assert await one.holder(KEY, alive=alive) is not None


async def test_each_waiting_message_is_taken_once_in_ts_order(
    replicas: tuple[ThreadInbox, ThreadInbox],
) -> None:
    one, two = replicas
    stamps = [f"1700000001.{n:06d}" for n in (5, 1, 4, 2, 3)]
    for ts in stamps:
        await store(one, ts)
    takes = await asyncio.gather(
        *(
            (one if i % 2 else two).take(KEY, run_id=f"r{i}", holder=f"p{i}", questions_only=False)
            for i in range(6)
        )
    )
    taken = [m for batch in takes for m in batch]
    assert sorted(m.ts for m in taken) == sorted(stamps)  # each exactly once
    for batch in takes:
        assert [m.ts for m in batch] == sorted(m.ts for m in batch)
        assert all(m.state == TAKEN for m in batch)


async def test_a_turn_takes_the_oldest_question_only(
    replicas: tuple[ThreadInbox, ThreadInbox],
) -> None:
    one, _ = replicas
    await store(one, "1700000002.000003")
    await store(one, "1700000002.000001", addressed=False)  # talk is not a question
    await store(one, "1700000002.000002")
    [question] = await one.take(KEY, run_id="r1", holder="a", questions_only=True)
    assert question.ts == "1700000002.000002"
    assert await one.has_questions(KEY)
    rest = await one.take(KEY, run_id="r1", holder="a", questions_only=False)
    assert [m.ts for m in rest] == ["1700000002.000001", "1700000002.000003"]
    assert not await one.has_questions(KEY)


async def test_a_duplicate_delivery_is_not_stored_twice(
    replicas: tuple[ThreadInbox, ThreadInbox],
) -> None:
    one, two = replicas
    results = await asyncio.gather(
        *(
            (one if i % 2 else two).receive(
                Inbound(
                    session_key=KEY,
                    channel_id="C1",
                    thread_ts="1",
                    ts="1700000003.000001",
                    user_id="U1",
                    text="same",
                ),
                holder=f"p{i}",
            )
            for i in range(8)
        )
    )
    assert sum(r is not None for r in results) == 1


async def test_talk_left_after_a_turn_is_dropped_not_kept_for_the_next(
    replicas: tuple[ThreadInbox, ThreadInbox],
) -> None:
    one, _ = replicas
    await store(one, "1700000004.000001", addressed=False)
    await store(one, "1700000004.000002")
    assert await one.drop_talk(KEY) == 1
    rest = await one.take(KEY, run_id="r1", holder="a", questions_only=False)
    assert [m.ts for m in rest] == ["1700000004.000002"]


async def test_old_finished_messages_are_pruned_waiting_ones_kept(
    replicas: tuple[ThreadInbox, ThreadInbox],
) -> None:
    one, _ = replicas
    done = await store(one, "1700000005.000001")
    waiting = await store(one, "1700000005.000002")
    await one.move([done], "done", only_from=[PENDING])
    assert await one.prune(older_than=timedelta(seconds=-1)) == 1
    assert await one.get(done) is None
    assert await one.get(waiting) is not None
    assert await one.prune() == 0  # nothing a week old
