"""Several processes on one database: only a dead process's work is recovered."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from bot.store import SessionKey
from bot.store.approvals import ApprovalStore
from bot.store.models import InstanceRow, utcnow
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import THREAD, Router, make_baton, run_turn

EXPLORE = "Your job is to investigate"


async def add_instance(baton: object, instance_id: str, *, age: timedelta) -> None:
    async with baton.database.sessions() as session:  # type: ignore[attr-defined]
        session.add(
            InstanceRow(id=instance_id, host="another-host", pid=4242,
                        heartbeat_at=utcnow() - age)
        )  # fmt: skip
        await session.commit()


async def test_recovery_leaves_live_replicas_alone(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    try:
        session = await baton.conversations.store.get_or_create(THREAD)
        await add_instance(baton, "replica-a", age=timedelta(seconds=5))
        await add_instance(baton, "replica-dead", age=timedelta(minutes=10))
        store = baton.tracker.store
        for owner in ("replica-a", "replica-dead"):
            await store.create(
                task_id=f"task-explore-{owner}", session_id=session.id, channel_id="C1",
                agent="explore", description="d", prompt="p", background=True,
                started_by=None, owner=owner,
            )  # fmt: skip
        approvals = ApprovalStore(baton.database)
        live_request = await approvals.create(
            session_id=session.id, agent="main", task_id=None, tool="bash", arguments="{}",
            reason="r", requested_by="U1", channel_id="C1", owner="replica-a",
        )  # fmt: skip
        dead_request = await approvals.create(
            session_id=session.id, agent="main", task_id=None, tool="bash", arguments="{}",
            reason="r", requested_by="U1", channel_id="C1", owner="replica-dead",
        )  # fmt: skip
        failed = await baton.tracker.recover()
        orphans = await approvals.orphans(alive=await baton.instances.alive())
    finally:
        await baton.close()
    assert [t.id for t in failed] == ["task-explore-replica-dead"]
    assert [a.id for a in orphans] == [dead_request.id]
    assert live_request.id not in {a.id for a in orphans}


async def test_a_cancel_written_by_another_replica_stops_the_child_here(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    baton.tracker.sweep_s = 0.05
    started = asyncio.Event()

    async def child(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="never")

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[ToolCallSpec("task", {"subagent_type": "explore", "prompt": "p",
                                                "background": True})]),
        Reply(text="started"),
    ]  # fmt: skip
    router.children[EXPLORE] = [child]
    try:
        await run_turn(baton, "go", key=SessionKey.terminal("replicas"))
        await asyncio.wait_for(started.wait(), 10)
        assert baton.tracker.is_running_here("task-explore-1")
        # Replica B handled the Cancel click: it can only write the row.
        await baton.tracker.store.finish(
            "task-explore-1", state="cancelled", result=None, error="cancelled by <@U2>"
        )
        async with asyncio.timeout(10):
            while baton.tracker.is_running_here("task-explore-1"):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        detail = await baton.tracker.get("task-explore-1")
    finally:
        await baton.close()
    assert detail is not None and detail.task.state == "cancelled"
    assert detail.task.error == "cancelled by <@U2>"
