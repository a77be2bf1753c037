"""Nesting end to end: a child that lists allowed_subagents delegates, down to max_task_depth."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import Router, make_baton, run_turn, wait_finished
from tests.subagents.test_delegation import task_call, tool_result_of, write_agent

LEAD = "LEAD-PROMPT"
HELPER = "HELPER-PROMPT"
EXPLORE = "Your job is to investigate"
CONTROL = {"task", "steer_task", "cancel_task", "task_status", "read_task_result"}


def sub_task(agent: str, prompt: str, *, id: str, background: bool = False) -> Reply:
    arguments: dict[str, object] = {"subagent_type": agent, "prompt": prompt}
    if background:
        arguments["background"] = True
    return Reply(tool_calls=[ToolCallSpec("task", arguments, id=id)])


def requests_of(router: Router, mark: str) -> list[RecordedRequest]:
    return [r for r in router.child_requests() if mark in str(r.messages[0]["content"])]


def task_enum(request: RecordedRequest) -> list[str]:
    schema = next(t for t in request.body["tools"] if t["function"]["name"] == "task")
    return schema["function"]["parameters"]["properties"]["subagent_type"]["enum"]


def write_lead_and_helper(tmp_path: Path, lead_extra: str = "", helper_extra: str = "") -> None:
    write_agent(tmp_path, "lead", f"description: Leads.\nallowed_subagents: helper{lead_extra}",
                LEAD)  # fmt: skip
    # The helper's file asks for delegation too (even back to the lead): at depth 2 it
    # is past the cap, so it must get no task tool whatever its file says.
    write_agent(tmp_path, "helper", f"description: Helps.\nallowed_subagents: helper, lead"
                f"{helper_extra}", HELPER)  # fmt: skip


async def test_main_lead_helper_runs_and_the_grandchild_cannot_delegate(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_lead_and_helper(tmp_path)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("lead", "lead the work", id="L"), Reply(text="all done")]
    router.children[LEAD] = [
        sub_task("helper", "help with the work", id="H"),
        Reply(text="lead finished: HELPER-SAID-HI"),
    ]
    router.children[HELPER] = [
        # A hostile grandchild tries to delegate anyway.
        sub_task("lead", "recurse", id="R"),
        Reply(text="HELPER-SAID-HI"),
    ]
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 20)
        tasks = {t.agent: t for t in await baton.tracker.list(session_id=1)}
    finally:
        await baton.close()
    lead_first, lead_second = requests_of(router, LEAD)
    assert CONTROL | {"submit_result"} <= set(lead_first.tools)
    assert task_enum(lead_first) == ["helper"]
    helper_requests = requests_of(router, HELPER)
    assert len(helper_requests) == 2  # no great-grandchild ran
    for request in helper_requests:
        assert not CONTROL & set(request.tools)
        assert "submit_result" in request.tools
    refusal = helper_requests[1].messages[-1]
    assert refusal["role"] == "tool" and "no tool named 'task'" in refusal["content"]
    assert "HELPER-SAID-HI" in tool_result_of(lead_second, "H")
    assert "lead finished: HELPER-SAID-HI" in tool_result_of(router.main_requests()[-1], "L")
    assert set(tasks) == {"lead", "helper"}
    assert tasks["lead"].depth == 1 and tasks["lead"].parent_id is None
    assert tasks["helper"].depth == 2 and tasks["helper"].parent_id == tasks["lead"].id
    assert tasks["helper"].state == tasks["lead"].state == "completed"


async def test_a_lead_delegating_to_an_unlisted_agent_gets_a_tool_error(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_lead_and_helper(tmp_path)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("lead", "lead", id="L"), Reply(text="done")]
    router.children[LEAD] = [
        # Not in the schema's enum, sent anyway (a hostile or confused model).
        sub_task("explore", "explore instead", id="X"),
        sub_task("general-purpose", "or this one", id="Y"),
        Reply(text="could not"),
    ]
    router.children[EXPLORE] = [Reply(text="SHOULD-NOT-RUN")]
    try:
        await run_turn(baton, "go")
        tasks = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    lead = requests_of(router, LEAD)
    assert "may delegate only to" in tool_result_of(lead[1], "X")
    assert "'explore'" in tool_result_of(lead[1], "X")
    assert "may delegate only to" in tool_result_of(lead[2], "Y")
    assert [r for r in router.child_requests() if EXPLORE in str(r.messages[0]["content"])] == []
    assert [t.agent for t in tasks] == ["lead"]


async def test_with_max_task_depth_1_the_lead_has_no_task_tool(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_lead_and_helper(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, max_task_depth=1)
    router = Router(fake_llm)
    router.main += [task_call("lead", "lead", id="L"), Reply(text="done")]
    router.children[LEAD] = [sub_task("helper", "help", id="H"), Reply(text="alone")]
    try:
        await run_turn(baton, "go")
        tasks = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    lead = requests_of(router, LEAD)
    assert not CONTROL & set(lead[0].tools)
    assert "no tool named 'task'" in tool_result_of(lead[1], "H")
    assert requests_of(router, HELPER) == []
    assert [t.agent for t in tasks] == ["lead"]
    # The main agent (depth 0) still delegates.
    assert CONTROL <= set(router.main_requests()[0].tools)


async def test_tools_narrow_at_every_level(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    write_agent(tmp_path, "lead", "description: Leads.\ntools: read_file\n"
                "allowed_subagents: helper, greedy", LEAD)  # fmt: skip
    write_agent(tmp_path, "helper", "description: Helps.", HELPER)
    # Asks for more than its parent holds: it must still get only what the lead has.
    write_agent(tmp_path, "greedy", "description: Greedy.\ntools: bash, write_file, read_file, "
                "task, steer_task", "GREEDY-PROMPT")  # fmt: skip
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("lead", "lead", id="L"), Reply(text="done")]
    router.children[LEAD] = [
        Reply(tool_calls=[
            ToolCallSpec("task", {"subagent_type": "helper", "prompt": "h"}, id="H"),
            ToolCallSpec("task", {"subagent_type": "greedy", "prompt": "g"}, id="G"),
        ]),
        Reply(text="both done"),
    ]  # fmt: skip
    router.children[HELPER] = [Reply(text="helped")]
    router.children["GREEDY-PROMPT"] = [
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "echo pwned > pwned.txt"})]),
        Reply(text="tried"),
    ]
    try:
        await run_turn(baton, "go")
    finally:
        await baton.close()
    lead = requests_of(router, LEAD)[0]
    assert set(lead.tools) == {"read_file", "submit_result"} | CONTROL
    assert set(requests_of(router, HELPER)[0].tools) == {"read_file", "submit_result"}
    greedy = requests_of(router, "GREEDY-PROMPT")
    assert set(greedy[0].tools) == {"read_file", "submit_result"}
    assert "no tool named 'bash'" in greedy[1].messages[-1]["content"]
    assert not (baton.workspace.root / "pwned.txt").exists()


async def test_a_grandchilds_background_task_counts_toward_the_session_cap(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_lead_and_helper(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, max_background_tasks=1)
    never = asyncio.Event()

    async def stuck(request: RecordedRequest) -> Reply:
        await never.wait()
        return Reply(text="never")

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[ToolCallSpec("task", {"subagent_type": "explore", "prompt": "bg",
                                                "background": True}, id="B")]),
        task_call("lead", "lead", id="L"),
        Reply(text="done"),
    ]  # fmt: skip
    router.children[EXPLORE] = [stuck]
    router.children[LEAD] = [
        sub_task("helper", "help in the background", id="H", background=True),
        Reply(text="refused"),
    ]
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 20)
        tasks = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    result = tool_result_of(requests_of(router, LEAD)[1], "H")
    assert "at most 1 background tasks may run at once" in result
    assert requests_of(router, HELPER) == []
    assert sorted(t.agent for t in tasks) == ["explore", "lead"]


async def test_a_lead_running_background_helpers_hits_the_cap_itself(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_lead_and_helper(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, max_background_tasks=1)
    never = asyncio.Event()

    async def stuck(request: RecordedRequest) -> Reply:
        await never.wait()
        return Reply(text="never")

    router = Router(fake_llm)
    router.main += [task_call("lead", "lead", id="L"), Reply(text="done")]
    router.children[LEAD] = [
        Reply(tool_calls=[
            ToolCallSpec("task", {"subagent_type": "helper", "prompt": f"h{n}",
                                  "background": True}, id=f"H{n}")
            for n in range(2)
        ]),
        Reply(text="one started"),
    ]  # fmt: skip
    router.children[HELPER] = [stuck]
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 20)
        running = await baton.tracker.running_background(1)
    finally:
        await baton.close()
    second = requests_of(router, LEAD)[1]
    results = [tool_result_of(second, f"H{n}") for n in range(2)]
    assert sum("at most 1 background tasks may run at once" in r for r in results) == 1
    assert running == 1


async def test_cancelling_the_lead_cancels_its_running_helper(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_lead_and_helper(tmp_path)
    baton = await make_baton(tmp_path, fake_llm)
    started = asyncio.Event()

    async def stuck(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="HELPER-NEVER")

    router = Router(fake_llm)
    router.main += [task_call("lead", "lead", id="L"), Reply(text="moving on")]
    router.children[LEAD] = [sub_task("helper", "help", id="H")]
    router.children[HELPER] = [stuck]
    try:
        turn = asyncio.create_task(run_turn(baton, "go"))
        await asyncio.wait_for(started.wait(), 10)
        tasks = {t.agent: t for t in await baton.tracker.list(session_id=1)}
        record = await baton.tracker.cancel(tasks["lead"].id, by="U1")
        assert record is not None and record.state == "cancelled"
        await asyncio.wait_for(turn, 10)
        helper = await wait_finished(baton, tasks["helper"].id)
        lead = await baton.tracker.get(tasks["lead"].id)
    finally:
        await baton.close()
    assert helper.state == "cancelled"
    assert not baton.tracker.is_running_here(helper.id)
    assert lead is not None and lead.task.state == "cancelled"
    result = tool_result_of(router.main_requests()[-1], "L")
    assert result.startswith('<task state="error">') and "HELPER-NEVER" not in result
