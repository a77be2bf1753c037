"""Background children: run outside the turn, are capped, cancel, deliver once, survive restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.config import PermissionsConfig
from bot.engine import ToolResult
from bot.store import instances
from bot.store.tasks import TaskRecord
from bot.subagents.tracker import RESTART_REASON
from tests.fakes.openai_api import ErrorReply, FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.processes import alive, running_with
from tests.subagents.harness import (
    OTHER_THREAD,
    THREAD,
    Router,
    make_baton,
    run_turn,
    wait_finished,
)

EXPLORE = "Your job is to investigate"
GENERAL = "Understand the task first"


def background(agent: str, prompt: str, id: str = "bg") -> ToolCallSpec:
    return ToolCallSpec(
        "task", {"subagent_type": agent, "prompt": prompt, "background": True}, id=id
    )


def user_text(request: RecordedRequest) -> str:
    return str(request.messages[-1]["content"])


async def test_background_returns_at_once_and_its_result_is_injected_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    release = asyncio.Event()

    async def slow_child(request: RecordedRequest) -> Reply:
        await release.wait()
        return Reply(text="Found 3 TODOs in src/.")

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[background("explore", "count TODOs", id="B")]),
        Reply(text="Started it."),
        Reply(text="Here is what it found."),
        Reply(text="Other thread reply."),
        Reply(text="Nothing new."),
    ]
    router.children[EXPLORE] = [slow_child]
    try:
        events = await run_turn(baton, "count the TODOs in the background")
        result = next(e for e in events if isinstance(e, ToolResult))
        assert result.output == '<task id="task-explore-1" state="running"/>'
        # The turn is over and the child still runs: the turn did not wait for it.
        detail = await baton.tracker.get("task-explore-1")
        assert detail is not None and detail.task.state == "running" and detail.task.background

        release.set()
        finished = await wait_finished(baton, "task-explore-1")
        assert finished.state == "completed" and finished.result == "Found 3 TODOs in src/."
        # Looking a task up does not consume its result.
        assert (await baton.tracker.get("task-explore-1")) is not None

        await run_turn(baton, "what did it find?")
        await run_turn(baton, "hello", key=OTHER_THREAD)
        await run_turn(baton, "anything else?")
    finally:
        await baton.close()
    main = router.main_requests()
    injected = user_text(main[2])
    assert injected.startswith("<background_task_results>")
    assert '<task id="task-explore-1" agent="explore" state="completed">' in injected
    assert "Found 3 TODOs in src/." in injected
    assert injected.endswith("</background_task_results>\n\nwhat did it find?")
    assert "background_task_results" not in str(main[3].body)  # another session
    assert user_text(main[4]) == "anything else?"  # delivered once only
    assert "background_task_results" in str(main[4].messages)  # kept in history


async def test_the_cap_refuses_one_more_before_any_id_is_made(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm, max_background_tasks=2)
    never = asyncio.Event()

    async def stuck(request: RecordedRequest) -> Reply:
        await never.wait()
        return Reply(text="never")

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[background("explore", f"job {n}", id=f"j{n}") for n in range(3)]),
        Reply(text="two started"),
    ]
    router.default_child = stuck
    try:
        events = await run_turn(baton, "start three")
        results = [e for e in events if isinstance(e, ToolResult)]
        tasks = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    running = [r for r in results if not r.is_error]
    refused = [r for r in results if r.is_error]
    assert len(running) == 2 and len(refused) == 1
    assert "at most 2 background tasks may run at once" in refused[0].output
    assert sorted(t.id for t in tasks) == ["task-explore-1", "task-explore-2"]


async def test_cancel_stops_the_child_and_no_result_is_injected(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    started = asyncio.Event()

    async def stuck(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="SHOULD-NOT-APPEAR")

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[background("explore", "long job")]),
        Reply(text="started"),
        Reply(text="ok"),
    ]
    router.children[EXPLORE] = [stuck]
    try:
        await run_turn(baton, "start")
        await asyncio.wait_for(started.wait(), 10)
        record = await baton.tracker.cancel("task-explore-1", by="U1")
        assert record is not None and record.state == "cancelled"
        assert not baton.tracker.is_running_here("task-explore-1")
        assert await baton.tracker.cancel("task-explore-1") is None  # already over
        detail = await baton.tracker.get("task-explore-1")
        await run_turn(baton, "and?")
    finally:
        await baton.close()
    assert detail is not None and detail.task.state == "cancelled"
    assert detail.log[-1] == "⊘ cancelled by U1"
    injected = user_text(router.main_requests()[-1])
    assert 'state="cancelled"' in injected and "there is no result" in injected
    assert "SHOULD-NOT-APPEAR" not in injected


async def test_cancel_kills_the_childs_commands(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    baton = await make_baton(tmp_path, fake_llm, permissions=PermissionsConfig(allow=("bash",)))
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[background("explore", "sleep")]), Reply(text="ok")]
    router.children[EXPLORE] = [
        # No redirection: an allow rule never covers a command that writes through one.
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "sleep 300.4242"})])
    ]
    try:
        await run_turn(baton, "start")
        for _ in range(500):
            if running := running_with("sleep 300.4242"):
                break
            await asyncio.sleep(0.02)
        assert running, "the child's command never started"
        await baton.tracker.cancel("task-explore-1")
    finally:
        await baton.close()
    assert not any(alive(pid) for pid in running)
    assert not running_with("sleep 300.4242")


async def test_background_children_never_wait_for_a_person(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    approvals: list[object] = []

    async def approval(request: object) -> object:
        approvals.append(request)
        raise AssertionError("a background child must not ask")

    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[background("general-purpose", "write it")]), Reply(text="k")]
    router.children[GENERAL] = [
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "x.txt", "content": "x"})]),
        Reply(text="I could not write it."),
    ]
    try:
        await run_turn(baton, "go", approval=approval)
        task = await wait_finished(baton, "task-general-purpose-1")
        detail = await baton.tracker.get(task.id)
    finally:
        await baton.close()
    assert approvals == []
    assert not (baton.workspace.root / "x.txt").exists()
    told = router.child_requests()[-1].messages[-1]["content"]
    assert "background sub-agents cannot ask anyone" in told and "fail closed" in told
    assert detail is not None
    assert any("denied write_file without asking" in line for line in detail.log)
    assert task.state == "completed"


async def test_a_failed_child_does_not_stop_its_siblings(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)

    def child(request: RecordedRequest) -> Reply | ErrorReply:
        if request.messages[1]["content"] == "will fail":
            return ErrorReply(status=400, message="bad request for this one")
        return Reply(text="sibling finished fine")

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[background("explore", "will fail", id="a"),
                          background("explore", "will work", id="b")]),
        Reply(text="both started"),
        Reply(text="summary"),
    ]  # fmt: skip
    router.default_child = child
    try:
        await run_turn(baton, "go")
        first = await wait_finished(baton, "task-explore-1")
        second = await wait_finished(baton, "task-explore-2")
        await run_turn(baton, "results?")
    finally:
        await baton.close()
    states = {first.prompt: first.state, second.prompt: second.state}
    assert states == {"will fail": "failed", "will work": "completed"}
    injected = user_text(router.main_requests()[-1])
    assert 'state="failed"' in injected and "bad request for this one" in injected
    assert 'state="completed"' in injected and "sibling finished fine" in injected


async def test_restart_marks_running_tasks_failed_and_tells_the_thread(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await make_baton(tmp_path, fake_llm)
    session = await first.conversations.store.get_or_create(THREAD)
    orphan = await first.tracker.start(
        session_id=session.id, channel_id="C1", agent="explore", description="d",
        prompt="long job", background=True, started_by="U1",
    )  # fmt: skip
    finished = await first.tracker.start(
        session_id=session.id, channel_id="C1", agent="explore", description="d",
        prompt="short job", background=True, started_by="U1",
    )  # fmt: skip
    await first.tracker.finish(finished.id, state="completed", result="kept result")
    await first.database.close()  # the process dies: no shutdown of its tasks
    # ...and its heartbeat goes stale (8 s later in life; at once here).
    monkeypatch.setattr(instances, "STALE_AFTER_S", 0.0)

    second = await make_baton(tmp_path, fake_llm)
    told: list[TaskRecord] = []

    async def tell(record: TaskRecord) -> None:
        told.append(record)

    second.tracker.on_finish(tell)
    router = Router(fake_llm)
    router.main += [Reply(text="I see the restart.")]
    try:
        recovered = await second.tracker.recover()
        await second.tracker.wait_for_children()
        kept = await second.tracker.get(finished.id)
        await run_turn(second, "status?")
        again = await second.tracker.start(
            session_id=session.id, channel_id="C1", agent="explore", description="d",
            prompt="new", background=False, started_by=None,
        )  # fmt: skip
    finally:
        await second.close()
    assert [r.id for r in recovered] == [orphan.id]
    assert recovered[0].state == "failed" and recovered[0].error == RESTART_REASON
    assert [r.id for r in told] == [orphan.id]
    assert kept is not None and kept.task.result == "kept result"
    injected = user_text(router.main_requests()[-1])
    assert RESTART_REASON in injected and "kept result" in injected
    assert again.id == "task-explore-3"  # ids stay unique across restarts


async def test_drain_hands_each_result_over_exactly_once_under_races(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    try:
        session = await baton.conversations.store.get_or_create(THREAD)
        other = await baton.conversations.store.get_or_create(OTHER_THREAD)
        ids = []
        for n in range(6):
            record = await baton.tracker.start(
                session_id=session.id, channel_id="C1", agent="explore", description="d",
                prompt=f"p{n}", background=True, started_by=None,
            )  # fmt: skip
            await baton.tracker.finish(record.id, state="completed", result=f"r{n}")
            ids.append(record.id)
        drains = await asyncio.gather(
            *(baton.tracker.drain_completed(session.id) for _ in range(4)),
            baton.tracker.drain_completed(other.id),
        )
    finally:
        await baton.close()
    handed = [r.id for batch in drains for r in batch]
    assert sorted(handed) == sorted(ids)
    assert drains[-1] == []


async def test_finish_callbacks_fire_with_the_record(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    seen: list[TaskRecord] = []

    async def on_finish(record: TaskRecord) -> None:
        seen.append(record)

    baton.tracker.on_finish(on_finish)
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[background("explore", "quick")]), Reply(text="ok")]
    router.children[EXPLORE] = [Reply(text="quick result")]
    try:
        await run_turn(baton, "go")
        await wait_finished(baton, "task-explore-1")
    finally:
        await baton.close()
    assert [(r.id, r.state, r.result) for r in seen] == [
        ("task-explore-1", "completed", "quick result")
    ]
    assert seen[0].duration_s is not None and seen[0].duration_s >= 0
