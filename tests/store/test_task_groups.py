"""Task groups, steering messages and branch states in the tasks store, on real SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from bot.store import Database, SessionKey, SessionStore
from bot.store.models import utcnow
from bot.store.tasks import NewTask, TaskStore

THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.1")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[TaskStore, int]]:
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await database.create_schema()
    session = await SessionStore(database).get_or_create(THREAD)
    yield TaskStore(database), session.id
    await database.close()


async def start(
    tasks: TaskStore, session_id: int, name: str, *, parent: str | None = None, group: str
) -> str:
    task = NewTask(
        session_id=session_id, channel_id="C1", agent=name, description="", prompt="p",
        started_by="U1", parent_id=parent, group=group,
    )  # fmt: skip
    [record] = await tasks.create_backgrounds(16, [task])
    assert record is not None
    return record.id


async def test_a_group_waits_for_its_last_member_and_one_parents_group_not_anothers(
    store: tuple[TaskStore, int],
) -> None:
    tasks, session = store
    first = await start(tasks, session, "a", group="g")
    second = await start(tasks, session, "a", group="g")
    # A lead's group of the same name is another group.
    theirs = await start(tasks, session, "b", parent="task-lead-1", group="g")
    await tasks.finish(first, state="completed", result="one", error=None)
    await tasks.finish(theirs, state="completed", result="three", error=None)
    assert [t.id for t in await tasks.drain_finished(session)] == [theirs]
    await tasks.finish(second, state="completed", result="two", error=None)
    assert sorted(t.id for t in await tasks.drain_finished(session)) == sorted([first, second])
    assert await tasks.drain_finished(session) == []


async def test_steering_messages_are_taken_once_in_order(store: tuple[TaskStore, int]) -> None:
    tasks, session = store
    mine = await start(tasks, session, "a", group="g")
    other = await start(tasks, session, "b", group="h")
    await tasks.add_message(mine, author="<@U1>", text="first")
    await tasks.add_message(other, author="<@U2>", text="not yours")
    await tasks.add_message(mine, author="<@U1>", text="second")
    # Two takers at once (two sweeps): each message goes to one of them, in order.
    taken = await asyncio.gather(tasks.take_messages([mine]), tasks.take_messages([mine]))
    everything = [message for batch in taken for message in batch]
    assert sorted(everything) == [(mine, "<@U1>", "first"), (mine, "<@U1>", "second")]
    for batch in taken:
        assert batch == sorted(batch, key=lambda m: ["first", "second"].index(m[2]))
    assert await tasks.take_messages([mine]) == []
    assert await tasks.take_messages([other]) == [(other, "<@U2>", "not yours")]


async def test_a_branch_moves_through_its_states_once(store: tuple[TaskStore, int]) -> None:
    tasks, session = store
    task = await start(tasks, session, "coder", group="g")
    finished = await tasks.finish(
        task, state="completed", result="r", error=None, branch=f"baton/{task}", change="1 file"
    )
    assert finished is not None and finished.merge_state == "pending"
    claims = await asyncio.gather(
        *(tasks.move_merge_state(task, old="pending", new="merging") for _ in range(4))
    )
    assert sum(claim is not None for claim in claims) == 1
    assert await tasks.move_merge_state(task, old="pending", new="discarded") is None
    merged = await tasks.move_merge_state(task, old="merging", new="merged")
    assert merged is not None and merged.merge_state == "merged"


async def test_a_group_kept_busy_releases_a_member_that_waited_too_long(
    store: tuple[TaskStore, int],
) -> None:
    from sqlalchemy import update

    from bot.store.models import TaskRow
    from bot.store.tasks import GROUP_WAIT

    tasks, session = store
    early = await start(tasks, session, "a", group="g")
    await start(tasks, session, "a", group="g")  # keeps running (restarted again and again)
    await tasks.finish(early, state="completed", result="one", error=None)
    assert await tasks.drain_finished(session) == []
    async with tasks.database.sessions() as db:
        await db.exec(
            update(TaskRow)
            .where(TaskRow.id == early)  # type: ignore[arg-type]
            .values(finished_at=utcnow() - GROUP_WAIT - timedelta(seconds=1))
        )
        await db.commit()
    assert [t.id for t in await tasks.drain_finished(session)] == [early]
