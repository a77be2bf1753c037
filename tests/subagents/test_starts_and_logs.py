"""Background starts recorded together, and task logs that never hold a child up.

A fan-out's task calls arrive at once: their starts are counted and recorded in one
transaction, the session's limit still holding across them. Log lines are stored by
one writer behind the child's back; ending or reading a task waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import event, text

from bot.errors import TaskLimitReached
from bot.store.database import Database
from bot.store.instances import Instances
from bot.store.models import SessionRow
from bot.store.tasks import TaskRecord, TaskStore
from bot.subagents.tracker import TaskTracker


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await database.create_schema()
    async with database.sessions() as session:
        session.add(SessionRow(key="chat:t", kind="chat"))
        session.add(SessionRow(key="chat:u", kind="chat"))
        await session.commit()
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def tracker(database: Database) -> TaskTracker:
    instances = Instances(database)
    await instances.register()
    return TaskTracker(TaskStore(database), instances, sweep_s=30.0)


async def start(tracker: TaskTracker, n: int, *, session_id: int = 1, limit: int = 4) -> str:
    record = await tracker.start_background(
        limit=limit, session_id=session_id, channel_id=None, agent="explore",
        description=f"job {n}", prompt=f"job {n}", started_by=None,
    )  # fmt: skip
    return record.id


def count_commits(database: Database) -> list[int]:
    commits = [0]

    def committed(_connection: object) -> None:
        commits[0] += 1

    event.listen(database.engine.sync_engine, "commit", committed)
    return commits


async def test_a_fan_out_of_starts_is_one_transaction_within_the_limit(
    tracker: TaskTracker, database: Database
) -> None:
    commits = count_commits(database)
    outcomes = await asyncio.gather(
        *(start(tracker, n) for n in range(6)),
        start(tracker, 6, session_id=2),  # another session's limit is its own
        return_exceptions=True,
    )
    started = [o for o in outcomes if isinstance(o, str)]
    refused = [o for o in outcomes if isinstance(o, TaskLimitReached)]
    assert len(started) == 5 and len(refused) == 2
    assert outcomes[:4] == started[:4]  # the first asked got the places, in order
    assert len(set(started)) == 5
    assert commits[0] == 1  # seven starts, one transaction
    assert await tracker.running_background(1) == 4
    assert await tracker.running_background(2) == 1
    # Once full, a later start is refused too: the limit counts what is stored.
    with pytest.raises(TaskLimitReached):
        await start(tracker, 7)


async def test_a_start_whose_caller_went_away_while_queued_is_not_recorded(
    tracker: TaskTracker,
) -> None:
    waiting = asyncio.create_task(start(tracker, 1))
    await asyncio.sleep(0)  # queued; the writer has not taken it yet
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await start(tracker, 2, limit=1)  # it took no place
    assert [r.description for r in await tracker.list(session_id=1, limit=5)] == ["job 2"]


async def test_a_start_recorded_after_its_caller_went_away_is_ended_not_left_running(
    tracker: TaskTracker, tmp_path: Path
) -> None:
    # Another process holds SQLite's write lock: the batch waits in the database.
    other = sqlite3.connect(tmp_path / "baton.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        waiting = asyncio.create_task(start(tracker, 1))
        await asyncio.sleep(0.3)  # the writer is inside its transaction, waiting
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    finally:
        other.execute("COMMIT")
        other.close()
    records = []
    for _ in range(200):
        records = await tracker.list(session_id=1, limit=5)
        if records and records[0].state != "running":
            break
        await asyncio.sleep(0.02)
    [record] = records
    assert record.state == "cancelled" and record.error == "its start was cancelled"
    assert await tracker.running_background(1) == 0


async def test_log_lines_are_whole_and_in_order_when_the_task_is_read_or_ended(
    tracker: TaskTracker,
) -> None:
    task_id = await start(tracker, 1)
    for n in range(50):
        await tracker.append_log(task_id, f"line {n}", f"more {n}")
    detail = await tracker.get(task_id)
    assert detail is not None
    assert list(detail.log) == [line for n in range(50) for line in (f"line {n}", f"more {n}")]
    await tracker.append_log(task_id, "last words")
    await tracker.finish(task_id, state="completed", result="done")
    assert (await tracker.store.log(task_id))[-1] == "last words"


async def test_a_log_that_cannot_be_stored_never_stops_the_child(
    tracker: TaskTracker, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = await start(tracker, 1)
    async with database.engine.begin() as connection:
        await connection.execute(text("DROP TABLE task_log"))  # a real write failure
    with caplog.at_level(logging.ERROR, logger="bot.subagents.tracker"):
        await tracker.append_log(task_id, "→ write_file notes.txt")  # does not raise
        record = await tracker.finish(task_id, state="completed", result="done")
    assert record is not None and record.state == "completed"
    assert f"could not store log lines of {task_id}" in caplog.text


async def test_one_start_the_database_refuses_fails_alone(tracker: TaskTracker) -> None:
    """A prompt the driver cannot store (a lone surrogate, as a hostile model may send)
    in the same batch as other starts: they are recorded, it alone fails."""

    async def bad() -> str:
        record = await tracker.start_background(
            limit=8, session_id=1, channel_id=None, agent="explore", description="bad",
            prompt="\ud800", started_by=None,
        )  # fmt: skip
        return record.id

    outcomes = await asyncio.gather(
        start(tracker, 1, limit=8), bad(), start(tracker, 2, limit=8), return_exceptions=True
    )
    assert isinstance(outcomes[0], str) and isinstance(outcomes[2], str)
    assert isinstance(outcomes[1], Exception)
    recorded = await tracker.list(session_id=1, limit=5)
    assert sorted(r.description for r in recorded) == ["job 1", "job 2"]
    assert len({r.id for r in recorded}) == 2


async def test_endings_of_a_fan_out_are_one_transaction_each_with_its_whole_log(
    database: Database,
) -> None:
    instances = Instances(database)
    await instances.register()
    tracker = TaskTracker(TaskStore(database), instances, sweep_s=30.0)
    told: list[str] = []

    async def callback(record: TaskRecord) -> None:
        told.append(record.id)

    tracker.on_finish(callback)
    ids = [await start(tracker, n, limit=16) for n in range(16)]
    commits = count_commits(database)

    async def child(n: int, task_id: str) -> TaskRecord | None:
        # Its last lines, then its ending at once: no flush between them.
        await tracker.append_log(task_id, f"step {n}", f"done {n}")
        return await tracker.finish(task_id, state="completed", result=f"result {n}")

    records = await asyncio.gather(*(child(n, i) for n, i in enumerate(ids)))
    assert [r.result if r else None for r in records] == [f"result {n}" for n in range(16)]
    assert all(r is not None and r.state == "completed" and r.finished_at for r in records)
    assert commits[0] <= 2  # sixteen endings and their lines: one or two transactions
    for n, task_id in enumerate(ids):
        assert await tracker.store.log(task_id) == (f"step {n}", f"done {n}")
    await tracker.shutdown()
    assert sorted(told) == sorted(ids)
    # The first ending wins: a second one is None, and tells nobody.
    assert await tracker.finish(ids[0], state="failed", error="late") is None
    assert sorted(told) == sorted(ids)


async def test_one_ending_the_database_refuses_fails_alone(tracker: TaskTracker) -> None:
    """A result the driver cannot store (a lone surrogate from a hostile model) ending
    together with others: they end, with their logs; its `finish` alone raises."""
    ids = [await start(tracker, n, limit=8) for n in range(3)]

    async def child(n: int, task_id: str) -> TaskRecord | None:
        await tracker.append_log(task_id, f"step {n}")
        result = "\ud800" if n == 1 else f"result {n}"
        return await tracker.finish(task_id, state="completed", result=result)

    outcomes = await asyncio.gather(
        *(child(n, i) for n, i in enumerate(ids)), return_exceptions=True
    )
    assert isinstance(outcomes[1], Exception)
    for n in (0, 2):
        record = outcomes[n]
        assert isinstance(record, TaskRecord) and record.result == f"result {n}"
        assert await tracker.store.log(ids[n]) == (f"step {n}",)
    assert await tracker.store.log(ids[1]) == ("step 1",)  # its lines are kept
    assert (await tracker.store.get(ids[1])).state == "running"  # type: ignore[union-attr]
    # It can still be ended properly afterwards.
    ended = await tracker.finish(ids[1], state="failed", error="unstorable result")
    assert ended is not None and ended.state == "failed"


async def test_a_finish_whose_caller_goes_away_still_ends_the_task_and_tells(
    tracker: TaskTracker,
) -> None:
    told: list[TaskRecord] = []

    async def callback(record: TaskRecord) -> None:
        told.append(record)

    tracker.on_finish(callback)
    task_id = await start(tracker, 1)
    waiting = asyncio.create_task(tracker.finish(task_id, state="completed", result="kept"))
    await asyncio.sleep(0)  # queued for the writer
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await tracker.shutdown()
    record = await tracker.store.get(task_id)
    assert record is not None and record.state == "completed" and record.result == "kept"
    assert [r.id for r in told] == [task_id]


async def test_children_running_here_are_counted_until_their_ending_is_recorded(
    tracker: TaskTracker,
) -> None:
    """What a results poster waits on before asking the database: a child stops counting
    when its ending is recorded (not when its asyncio task is over), and a child that
    dies without an ending stops counting too."""
    ids = [await start(tracker, n, limit=8) for n in range(3)]
    release = asyncio.Event()
    counts: list[int] = []

    async def child(task_id: str, *, ends: bool) -> None:
        await release.wait()
        if ends:
            await tracker.finish(task_id, state="completed", result="ok")
            counts.append(tracker.unended_here(1))  # before this task is over
        else:
            raise RuntimeError("crashed before recording anything")

    for n, task_id in enumerate(ids):
        tracker.run_child(task_id, child(task_id, ends=n != 2), session_id=1)
    assert (tracker.unended_here(1), tracker.unended_here(2)) == (3, 0)
    release.set()
    await asyncio.gather(*tracker._children.values(), return_exceptions=True)
    assert max(counts) <= 2 and tracker.unended_here(1) == 0
