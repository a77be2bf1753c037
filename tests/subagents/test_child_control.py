"""steer_task, cancel_task and task_status end to end, scoped to the caller's own children."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.errors import SteeringFull
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import (
    OTHER_THREAD,
    THREAD,
    Router,
    make_baton,
    run_turn,
    wait_finished,
)
from tests.subagents.test_delegation import tool_result_of, write_agent

EXPLORE = "Your job is to investigate"
TASK_ID = "task-explore-1"


def background(prompt: str, id: str = "bg") -> Reply:
    arguments = {"subagent_type": "explore", "prompt": prompt, "background": True}
    return Reply(tool_calls=[ToolCallSpec("task", arguments, id=id)])


def user_text(request: RecordedRequest) -> str:
    return str(request.messages[-1]["content"])


async def test_task_status_reports_and_never_consumes_the_result(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    release = asyncio.Event()

    async def slow(request: RecordedRequest) -> Reply:
        await release.wait()
        return Reply(text="CHILD-RESULT-77")

    async def finish_then_ask(request: RecordedRequest) -> Reply:
        # The child finishes during this turn, before the status call.
        release.set()
        await wait_finished(baton, TASK_ID)
        return Reply(tool_calls=[ToolCallSpec("task_status", {"id": TASK_ID}, id="s2")])

    router = Router(fake_llm)
    router.main += [
        background("work"),
        Reply(text="started"),
        Reply(tool_calls=[ToolCallSpec("task_status", {"id": TASK_ID}, id="s1")]),
        Reply(text="still running"),
        finish_then_ask,
        Reply(text="it finished"),
        Reply(text="here it is"),
        Reply(text="nothing new"),
    ]
    router.children[EXPLORE] = [slow]
    try:
        await run_turn(baton, "start")
        await run_turn(baton, "how is it going?")
        await run_turn(baton, "and now?")
        await run_turn(baton, "the result?")
        await run_turn(baton, "anything else?")
    finally:
        await baton.close()
    main = router.main_requests()
    running = tool_result_of(main[3], "s1")
    assert running.startswith(f"{TASK_ID} (explore): running")
    assert "CHILD-RESULT-77" not in running
    finished = tool_result_of(main[5], "s2")
    assert finished.startswith(f"{TASK_ID} (explore): completed")
    assert "Its result is not shown here: it is delivered with the next message." in finished
    # Its log lines may quote the child, but the result is not taken: still undelivered.
    delivered = [r for r in main if "<background_task_results>" in user_text(r)]
    assert len(delivered) == 1 and "CHILD-RESULT-77" in user_text(delivered[0])
    assert user_text(delivered[0]).endswith("the result?")
    assert user_text(main[-1]) == "anything else?"


async def test_steer_task_reaches_the_child_before_its_next_model_call(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    first_seen = asyncio.Event()
    release = asyncio.Event()

    async def held(request: RecordedRequest) -> Reply:
        first_seen.set()
        await release.wait()
        return Reply(tool_calls=[ToolCallSpec("list_dir", {})])

    router = Router(fake_llm)
    router.main += [
        background("look around"),
        Reply(text="started"),
        Reply(tool_calls=[
            ToolCallSpec("steer_task", {"id": TASK_ID, "message": "Focus on STEER-XYZ only."},
                         id="st"),
        ]),
        Reply(text="steered"),
    ]  # fmt: skip
    router.children[EXPLORE] = [held, Reply(text="focused")]
    try:
        await run_turn(baton, "start")
        await asyncio.wait_for(first_seen.wait(), 10)
        await run_turn(baton, "steer it")
        release.set()
        task = await wait_finished(baton, TASK_ID)
        detail = await baton.tracker.get(TASK_ID)
    finally:
        await baton.close()
    assert tool_result_of(router.main_requests()[3], "st").startswith(f"Sent to {TASK_ID}")
    first, second = router.child_requests()
    assert "STEER-XYZ" not in str(first.messages)
    steering = [m for m in second.messages if "STEER-XYZ" in str(m.get("content"))]
    assert len(steering) == 1 and steering[0]["role"] == "user"
    assert "[Message from the agent that started you" in steering[0]["content"]
    assert task.state == "completed"
    assert detail is not None
    assert any(line.startswith("✉") and "STEER-XYZ" in line for line in detail.log)


async def test_cancel_task_cancels_a_running_child(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    started = asyncio.Event()

    async def stuck(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="NEVER")

    router = Router(fake_llm)
    router.main += [
        background("long"),
        Reply(text="started"),
        Reply(tool_calls=[ToolCallSpec("cancel_task", {"id": TASK_ID}, id="c1")]),
        Reply(tool_calls=[ToolCallSpec("cancel_task", {"id": TASK_ID}, id="c2")]),
        Reply(text="cancelled"),
    ]
    router.children[EXPLORE] = [stuck]
    try:
        await run_turn(baton, "start")
        await asyncio.wait_for(started.wait(), 10)
        await run_turn(baton, "cancel it")
        detail = await baton.tracker.get(TASK_ID)
    finally:
        await baton.close()
    main = router.main_requests()
    assert tool_result_of(main[3], "c1") == f"Cancelled {TASK_ID}."
    assert (
        tool_result_of(main[4], "c2") == f"{TASK_ID} is not running (cancelled); nothing to cancel."
    )
    assert detail is not None and detail.task.state == "cancelled"
    assert not baton.tracker.is_running_here(TASK_ID)


async def test_another_threads_task_is_no_such_task_and_is_left_alone(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    started = asyncio.Event()
    release = asyncio.Event()

    async def held(request: RecordedRequest) -> Reply:
        started.set()
        await release.wait()
        return Reply(tool_calls=[ToolCallSpec("list_dir", {})])

    router = Router(fake_llm)
    router.main += [
        background("the other thread's job"),  # in OTHER_THREAD
        Reply(text="started there"),
        # In THREAD, a model (told the id, or guessing) reaches for the other thread's task.
        Reply(tool_calls=[
            ToolCallSpec("task_status", {"id": TASK_ID}, id="s"),
            ToolCallSpec("steer_task", {"id": TASK_ID, "message": "HIJACK-ME"}, id="t"),
            ToolCallSpec("cancel_task", {"id": TASK_ID}, id="c"),
            ToolCallSpec("task_status", {"id": f" {TASK_ID} "}, id="s2"),
        ]),
        Reply(text="could not"),
    ]  # fmt: skip
    router.children[EXPLORE] = [held, Reply(text="OTHER-RESULT")]
    try:
        await run_turn(baton, "start", key=OTHER_THREAD)
        await asyncio.wait_for(started.wait(), 10)
        await run_turn(baton, "meddle")
        during = await baton.tracker.get(TASK_ID)
        release.set()
        task = await wait_finished(baton, TASK_ID)
        detail = await baton.tracker.get(TASK_ID)
    finally:
        await baton.close()
    last = router.main_requests()[3]
    for call in ("s", "t", "c", "s2"):
        result = tool_result_of(last, call)
        assert "there is no task" in result and "among the ones you started" in result
    assert during is not None and during.task.state == "running"
    assert task.state == "completed"
    assert "HIJACK-ME" not in str([r.body for r in router.child_requests()])
    assert detail is not None and not any("HIJACK-ME" in line for line in detail.log)


async def test_a_child_cannot_control_a_task_its_parent_started(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_agent(tmp_path, "lead", "description: Leads.\nallowed_subagents: helper", "LEAD-PROMPT")
    write_agent(tmp_path, "helper", "description: Helps.", "HELPER-PROMPT")
    baton = await make_baton(tmp_path, fake_llm)
    started = asyncio.Event()
    release = asyncio.Event()

    async def held(request: RecordedRequest) -> Reply:
        started.set()
        await release.wait()
        return Reply(text="MAIN-CHILD-RESULT")

    router = Router(fake_llm)
    router.main += [
        background("the main agent's own job"),
        Reply(tool_calls=[ToolCallSpec("task", {"subagent_type": "lead", "prompt": "lead"},
                                       id="L")]),
        Reply(text="done"),
    ]  # fmt: skip
    router.children[EXPLORE] = [held]
    router.children["LEAD-PROMPT"] = [
        Reply(tool_calls=[
            ToolCallSpec("cancel_task", {"id": TASK_ID}, id="c"),
            ToolCallSpec("steer_task", {"id": TASK_ID, "message": "LEAD-HIJACK"}, id="t"),
        ]),
        Reply(text="could not"),
    ]  # fmt: skip
    try:
        turn = asyncio.create_task(run_turn(baton, "go"))
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(turn, 10)
        during = await baton.tracker.get(TASK_ID)
        release.set()
        task = await wait_finished(baton, TASK_ID)
    finally:
        await baton.close()
    lead = [r for r in router.child_requests() if "LEAD-PROMPT" in str(r.messages[0]["content"])]
    for call in ("c", "t"):
        assert "there is no task" in tool_result_of(lead[1], call)
    assert during is not None and during.task.state == "running"
    assert task.state == "completed" and task.result == "MAIN-CHILD-RESULT"


async def test_a_lead_steers_and_checks_its_own_background_helper(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_agent(tmp_path, "lead", "description: Leads.\nallowed_subagents: helper", "LEAD-PROMPT")
    write_agent(tmp_path, "helper", "description: Helps.", "HELPER-PROMPT")
    baton = await make_baton(tmp_path, fake_llm)
    first_seen = asyncio.Event()
    release = asyncio.Event()

    async def held(request: RecordedRequest) -> Reply:
        first_seen.set()
        await release.wait()
        return Reply(tool_calls=[ToolCallSpec("list_dir", {})])

    async def steer_when_running(request: RecordedRequest) -> Reply:
        await asyncio.wait_for(first_seen.wait(), 10)
        return Reply(tool_calls=[
            ToolCallSpec("steer_task", {"id": "task-helper-1", "message": "LEAD-SAYS-HI"},
                         id="t"),
            ToolCallSpec("task_status", {"id": "task-helper-1"}, id="s"),
        ])  # fmt: skip

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[ToolCallSpec("task", {"subagent_type": "lead", "prompt": "lead"},
                                       id="L")]),
        Reply(text="done"),
    ]  # fmt: skip
    router.children["LEAD-PROMPT"] = [
        Reply(tool_calls=[ToolCallSpec("task", {"subagent_type": "helper", "prompt": "help",
                                                "background": True}, id="H")]),
        steer_when_running,
        Reply(text="lead done"),
    ]  # fmt: skip
    router.children["HELPER-PROMPT"] = [held, Reply(text="helper done")]
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 20)
        release.set()
        helper = await wait_finished(baton, "task-helper-1")
    finally:
        await baton.close()
    lead = [r for r in router.child_requests() if "LEAD-PROMPT" in str(r.messages[0]["content"])]
    assert tool_result_of(lead[1], "H") == '<task id="task-helper-1" state="running"/>'
    assert tool_result_of(lead[2], "t").startswith("Sent to task-helper-1")
    assert tool_result_of(lead[2], "s").startswith("task-helper-1 (helper): running")
    helpers = [
        r for r in router.child_requests() if "HELPER-PROMPT" in str(r.messages[0]["content"])
    ]
    assert "LEAD-SAYS-HI" in str(helpers[1].messages) and "LEAD-SAYS-HI" not in str(
        helpers[0].messages
    )
    assert helper.state == "completed" and helper.parent_id == "task-lead-1"


async def test_a_steering_flood_is_refused_once_enough_messages_wait(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """A model (or a person clicking) cannot pile messages on a child without end."""
    from bot.subagents.tracker import MAX_WAITING_STEERS

    baton = await make_baton(tmp_path, fake_llm)
    session = await baton.conversations.store.get_or_create(THREAD)
    try:
        record = await baton.tracker.start(
            session_id=session.id, channel_id="C1", agent="explore", description="d",
            prompt="p", background=True, started_by="U1",
        )  # fmt: skip
        for n in range(MAX_WAITING_STEERS):
            assert await baton.tracker.steer(record.id, f"m{n}", author="<@U1>") is not None
        with pytest.raises(SteeringFull):
            await baton.tracker.steer(record.id, "one more", author="<@U1>")
        assert await baton.tracker.store.waiting_messages(record.id) == MAX_WAITING_STEERS
    finally:
        await baton.close()
