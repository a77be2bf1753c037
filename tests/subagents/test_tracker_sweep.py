"""The sweep that stops children ended elsewhere leaves alone a child that ended here.

A child records its result a moment before its asyncio task returns; a sweep that runs
meanwhile (its period, or a signal about another task) must not take that ending for
a cancel from another replica and cancel the child on its last step. Its own ending
signals no sweep at all: only endings of tasks running elsewhere concern one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.store.database import Database
from bot.store.instances import Instances
from bot.store.models import SessionRow
from bot.store.signals import Signals
from bot.store.tasks import TaskStore
from bot.subagents.tracker import TaskTracker


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[TaskTracker]:
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await database.create_schema()
    instances = Instances(database)
    await instances.register()
    signals = Signals(database)
    await signals.start()
    async with database.sessions() as session:
        session.add(SessionRow(key="chat:t", kind="chat"))
        await session.commit()
    try:
        yield TaskTracker(TaskStore(database), instances, sweep_s=30.0, signals=signals)
    finally:
        await signals.close()
        await database.close()


async def started(tracker: TaskTracker) -> str:
    record = await tracker.start(
        session_id=1, channel_id=None, agent="explore", description="d", prompt="p",
        background=False, started_by=None,
    )  # fmt: skip
    return record.id


async def test_a_child_that_recorded_its_own_end_is_not_cancelled(tracker: TaskTracker) -> None:
    task_id = await started(tracker)

    async def child() -> str:
        await tracker.finish(task_id, state="completed", result="done")
        await asyncio.sleep(0.3)  # its last steps after recording (logs, the outcome)
        return "finished"

    task = asyncio.create_task(child())
    tracker.attach(task_id, task)
    assert await task == "finished"


async def test_a_child_ended_elsewhere_is_still_stopped(tracker: TaskTracker) -> None:
    task_id = await started(tracker)

    async def child() -> None:
        await asyncio.Event().wait()

    task = asyncio.create_task(child())
    tracker.attach(task_id, task)
    await asyncio.sleep(0)
    # Another replica's cancel: the store ends it, and the signal wakes the sweep here.
    await tracker.store.finish(task_id, state="cancelled", result=None, error="cancelled")
    assert tracker.signals is not None
    await tracker.signals.notify("task", task_id)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_a_child_ending_here_wakes_no_sweep_and_a_cancel_from_here_does(
    tracker: TaskTracker,
) -> None:
    """The "task" signal tells a child's owner that its task was ended elsewhere; a
    child ending on its own replica concerns no sweep (sixteen ending together woke
    every replica's sweep sixteen times, each reading every running task)."""
    assert tracker.signals is not None
    watching = tracker.signals.subscribe("task")
    try:
        ours = await started(tracker)
        recorded, release = asyncio.Event(), asyncio.Event()

        async def child() -> None:
            await tracker.finish(ours, state="completed", result="done")
            recorded.set()
            await release.wait()

        task = asyncio.create_task(child())
        tracker.attach(ours, task)
        await recorded.wait()
        assert not await watching.wait(0.2)
        release.set()
        await task

        # A task this replica does not run (another replica's child): ending it here
        # must still reach its owner.
        theirs = await started(tracker)
        await tracker.cancel(theirs, by="U1")
        assert await watching.wait(1.0)
    finally:
        watching.close()
