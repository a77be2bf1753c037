"""A child's long answer reaches its parent whole, whatever path it took: a handoff,
the fallback of its last text, a run cut at its turn limit, in the foreground and in the
background. The parent is shown the head (a tool result is capped) and reads the rest
with `read_task_result`; the task's record keeps it whole. The real composition root,
the fake model over HTTP."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.errors import ToolError
from bot.subagents.control import control_tools
from bot.subagents.handoff import GroupMember, Handoff
from bot.subagents.results import CUT_MARKER
from bot.subagents.task_tool import format_group
from bot.tools.base import DEFAULT_OUTPUT_LIMIT, Tool
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import (
    Router,
    make_baton,
    numbered_lines,
    run_turn,
    wait_finished,
)
from tests.subagents.test_delegation import task_call, tool_result_of, write_agent

EXPLORE = "Your job is to investigate"
LOOPER = "LOOPER-PROMPT"
SIZE = 60_000
READ_ON = re.compile(r'read_task_result\(id="([a-z0-9-]+)", offset=(\d+)\)')
PAGE = re.compile(
    r'<task_result id="[^"]+" from="(\d+)" to="(\d+)" of="(\d+)">(.*?)</task_result>', re.S
)


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def follow(request: RecordedRequest) -> Reply:
    """A parent that reads on wherever the last message says a result goes on."""
    content = str(request.messages[-1].get("content") or "")
    if found := READ_ON.findall(content):
        task_id, offset = found[-1]
        call = ToolCallSpec(
            "read_task_result", {"id": task_id, "offset": int(offset)}, id=f"read-{offset}"
        )
        return Reply(tool_calls=[call])
    return Reply(text="I have read it all.")


def read_on_from(request: RecordedRequest, shown: int) -> str:
    """The pages the parent read with read_task_result, from `shown` on, joined."""
    pages = []
    expected = shown
    for message in request.messages:
        if not str(message.get("tool_call_id", "")).startswith("read-"):
            continue
        [(start, end, _total, body)] = PAGE.findall(str(message["content"]))
        assert int(start) == expected  # no gap, no overlap
        pages.append(unescape(body))
        expected = int(end)
    return "".join(pages)


def first_cut(result: str) -> int:
    """The offset the parent is told to read on from."""
    [(_, offset)] = READ_ON.findall(result)
    return int(offset)


def assert_head_shown(result: str, answer: str, shown: int) -> None:
    """Every line of the first `shown` characters is in the parent's result (indented
    and escaped as results are), then the cut marker."""
    body = unescape(result)
    for line in answer[:shown].splitlines():
        assert line.strip() in body
    assert CUT_MARKER in body
    assert answer[shown:].splitlines()[1] not in body  # the rest is not shown twice


def assert_within_one_tool_result(result: str) -> None:
    """The engine never had to cut it blindly: it is under the cap on a tool result."""
    assert len(result) <= DEFAULT_OUTPUT_LIMIT
    assert "output truncated" not in result


async def test_a_60000_character_handoff_reaches_the_parent_whole(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    answer = numbered_lines(SIZE)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "write it all", id="T"), *[follow] * 8]
    router.children[EXPLORE] = [
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "submit_result",
                    {"status": "complete", "answer": answer, "evidence": ["bot/x.py:1"]},
                    id="s",
                )
            ]
        )
    ]
    try:
        await run_turn(baton, "go")
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    last = router.main_requests()[-1]
    result = tool_result_of(last, "T")
    assert result.startswith('<task state="completed"><task_result>[Cut for length')
    assert "status: complete" in result and "- bot/x.py:1" in result  # trust kept whole
    assert_within_one_tool_result(result)
    shown = first_cut(result)
    assert_head_shown(result, answer, shown)
    assert answer[:shown] + read_on_from(last, shown) == answer
    assert task.state == "completed" and task.result == answer


async def test_a_child_that_never_submits_keeps_its_whole_last_text(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The fallback: no handoff, the last text is the answer, uncut (it was cut at
    49,800 characters before)."""
    answer = numbered_lines(SIZE)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "write it all", id="T"), *[follow] * 8]
    router.children[EXPLORE] = [Reply(text=answer)]
    try:
        await run_turn(baton, "go")
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    assert fake_llm.handoff_requests  # asked once for a handoff, it declined
    last = router.main_requests()[-1]
    result = tool_result_of(last, "T")
    assert "status: uncertain" in result
    assert_within_one_tool_result(result)
    shown = first_cut(result)
    assert_head_shown(result, answer, shown)
    assert answer[:shown] + read_on_from(last, shown) == answer
    assert task.result == answer


async def test_a_child_cut_at_its_turn_limit_keeps_its_whole_partial_work(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_agent(tmp_path, "looper", "description: Loops.\nmax_turns: 1", LOOPER)
    answer = numbered_lines(SIZE)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("looper", "write it all", id="T"), *[follow] * 8]
    router.children[LOOPER] = [Reply(text=answer, tool_calls=[ToolCallSpec("list_dir", {})])]
    try:
        await run_turn(baton, "go")
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    last = router.main_requests()[-1]
    result = tool_result_of(last, "T")
    assert result.startswith('<task state="error">looper (task-looper-1) did not finish: ')
    assert "stopped early at the limit of 1 turns" in result
    assert_within_one_tool_result(result)
    shown = first_cut(result)
    assert_head_shown(result, answer, shown)
    whole = answer[:shown] + read_on_from(last, shown)
    assert task.state == "failed" and task.result == whole
    assert whole.startswith(answer) and "[Stopped early" in whole[len(answer) :]


async def test_a_long_background_result_is_delivered_capped_and_read_whole(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """DESIGN.md: the injected block is capped, pointing to the rest; the parent reads
    the rest from there."""
    answer = numbered_lines(SIZE)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        task_call("explore", "write it all", background=True, id="B"),
        Reply(text="Started."),
    ]
    router.children[EXPLORE] = [Reply(text=answer)]
    try:
        await run_turn(baton, "start it")
        task = await wait_finished(baton, "task-explore-1")
        router.main += [*[follow] * 8]
        await run_turn(baton, "what did it write?")  # delivered before this message
    finally:
        await baton.close()
    requests = router.main_requests()
    injected = next(
        str(m["content"])
        for r in requests
        for m in r.messages
        if m.get("role") == "user" and "<background_task_results>" in str(m.get("content"))
    )
    block = injected.split("</background_task_results>")[0]
    assert '<task id="task-explore-1" agent="explore" state="completed">' in block
    assert len(block) < 10_000  # capped, as DESIGN.md says
    shown = first_cut(block)
    assert_head_shown(block, answer, shown)
    last = requests[-1]
    assert answer[:shown] + read_on_from(last, shown) == answer
    assert task.result == answer


async def refusal(tool: Tool, arguments: dict[str, object]) -> str:
    """The error a control tool answers a call with."""
    try:
        await tool.run(tool.parse_arguments(json.dumps(arguments)))
    except ToolError as exc:
        return str(exc)
    raise AssertionError(f"{tool.name} did not refuse {arguments}")


async def test_read_task_result_refuses_an_undelivered_or_foreign_result(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "bg", background=True, id="B"), Reply(text="ok")]
    router.children[EXPLORE] = [Reply(text="short answer")]
    try:
        await run_turn(baton, "start it")
        await wait_finished(baton, "task-explore-1")

        def reader(session_id: int) -> Tool:
            tools = control_tools(baton.tracker, session_id=session_id, parent_id=None)
            return next(tool for tool in tools if tool.name == "read_task_result")

        undelivered = await refusal(reader(1), {"id": "task-explore-1"})
        elsewhere = await refusal(reader(2), {"id": "task-explore-1"})
    finally:
        await baton.close()
    assert "arrives with the next message" in undelivered
    assert "no task 'task-explore-1' among the ones you started" in elsewhere


def test_a_groups_long_answers_share_one_result_each_saying_where_it_goes_on() -> None:
    answers = {f"task-explore-{n}": numbered_lines(SIZE) for n in (1, 2, 3)}
    members = [
        GroupMember(
            task_id=task_id,
            agent="explore",
            state="completed",
            handoff=Handoff(status="complete", answer=answer, limitations=("LIMIT",)),
        )
        for task_id, answer in answers.items()
    ]
    block = format_group("g", members)
    assert_within_one_tool_result(block)
    assert block.count("LIMIT") == 3 and block.count(CUT_MARKER) == 3
    for task_id in answers:
        assert f"## {task_id} (explore)" in block
        assert f'read_task_result(id="{task_id}", offset=' in block
