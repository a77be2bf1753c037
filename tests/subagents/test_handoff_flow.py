"""Handoffs and fan-in end to end: submit_result, the one request, groups of results."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bot.subagents.handoff import HANDOFF_REQUEST, Handoff
from bot.subagents.runner import NO_HANDOFF_REASON
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import Router, make_baton, run_turn, wait_finished
from tests.subagents.test_delegation import task_call, tool_result_of

EXPLORE = "Your job is to investigate"


def submit(call_id: str = "s1", **fields: Any) -> Reply:
    arguments = {"status": "complete", "answer": "The answer.", **fields}
    return Reply(tool_calls=[ToolCallSpec("submit_result", arguments, id=call_id)])


def asked_for_handoff(request: RecordedRequest) -> bool:
    last = request.messages[-1]
    return last.get("role") == "user" and last.get("content") == HANDOFF_REQUEST


def group_call(agent: str, prompt: str, id: str, group: str = "g", **extra: Any) -> ToolCallSpec:
    arguments = {"subagent_type": agent, "prompt": prompt, "group": group, **extra}
    return ToolCallSpec("task", arguments, id=id)


async def test_a_valid_handoff_reaches_the_parent_whole_and_is_stored(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "find the loader", id="T"), Reply(text="ok")]
    router.children[EXPLORE] = [
        submit(
            answer="The loader is bot/config.py.",
            evidence=["bot/config.py:10 def load_settings"],
            limitations=["did not read the tests"],
            claims=[{"topic": "loader", "position": "bot/config.py"}],
        ),
        Reply(text="Submitted."),
    ]
    try:
        await run_turn(baton, "where?")
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    result = tool_result_of(router.main_requests()[-1], "T")
    assert result.startswith('<task state="completed"><task_result>status: complete\n')
    assert "answer:\n  The loader is bot/config.py." in result
    assert "evidence:\n- bot/config.py:10 def load_settings" in result
    assert "limitations:\n- did not read the tests" in result
    assert "claims:\n- loader: bot/config.py" in result
    assert fake_llm.handoff_requests == []  # it submitted: it was never asked
    assert not any(asked_for_handoff(r) for r in router.child_requests())
    assert task.state == "completed" and task.result == "The loader is bot/config.py."
    assert task.handoff is not None
    stored = Handoff.from_json(task.handoff)
    assert stored is not None and stored.status == "complete"
    assert stored.evidence == ("bot/config.py:10 def load_settings",)
    assert json.loads(task.handoff)["claims"] == [{"topic": "loader", "position": "bot/config.py"}]


async def test_an_invalid_handoff_is_a_tool_error_and_the_child_can_retry(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "check", id="T"), Reply(text="ok")]
    router.children[EXPLORE] = [
        submit("bad1", status="done"),  # not a status
        submit("bad2", status="blocked"),  # blocked with no limitations
        submit("bad3", extra_field="smuggled"),
        submit("good", status="blocked", limitations=["needs the API key"]),
        Reply(text="never asked for"),
    ]
    try:
        await run_turn(baton, "go")
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    child = router.child_requests()
    errors = [tool_result_of(child[n], f"bad{n}") for n in (1, 2, 3)]
    assert "status" in errors[0] and "complete" in errors[0]
    assert "limitations must say what is needed to proceed" in errors[1]
    assert "extra_field" in errors[2]
    # A refused submission does not end the run; the valid one does, with no model call
    # after it (the child's last scripted reply is never asked for).
    assert len(child) == 4
    assert router.children[EXPLORE] == [Reply(text="never asked for")]
    result = tool_result_of(router.main_requests()[-1], "T")
    assert "status: blocked" in result and "- needs the API key" in result
    assert fake_llm.handoff_requests == []
    assert task.handoff is not None and json.loads(task.handoff)["status"] == "blocked"


async def test_a_child_that_never_submits_is_asked_exactly_once_then_uncertain(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.declines_handoffs = False
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "check", id="T"), Reply(text="ok")]
    router.children[EXPLORE] = [
        Reply(text="FOUND-IT in main.py"),
        # Asked for its handoff, it stalls with tools instead (a hostile model): the
        # request is bounded and never repeated.
        Reply(tool_calls=[ToolCallSpec("list_dir", {})]),
        Reply(tool_calls=[ToolCallSpec("list_dir", {})]),
        Reply(tool_calls=[ToolCallSpec("list_dir", {})]),
        Reply(tool_calls=[ToolCallSpec("list_dir", {})]),
        Reply(text="never"),
    ]
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 20)
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    asked = [r for r in router.child_requests() if asked_for_handoff(r)]
    assert len(asked) == 1
    assert (
        sum(m.get("content") == HANDOFF_REQUEST for m in router.child_requests()[-1].messages) == 1
    )
    result = tool_result_of(router.main_requests()[-1], "T")
    assert result.startswith('<task state="completed"><task_result>status: uncertain')
    assert "FOUND-IT in main.py" in result and NO_HANDOFF_REASON in result
    assert task.state == "completed"
    assert task.handoff is not None and json.loads(task.handoff)["status"] == "uncertain"


async def test_a_child_that_submits_when_asked_is_complete(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.declines_handoffs = False
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [task_call("explore", "check", id="T"), Reply(text="ok")]
    router.children[EXPLORE] = [
        Reply(text="It is in main.py."),
        submit(answer="It is in main.py.", evidence=["main.py:1"]),
        Reply(text="Done."),
    ]
    try:
        await run_turn(baton, "go")
        [task] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    assert sum(asked_for_handoff(r) for r in router.child_requests()) == 1
    result = tool_result_of(router.main_requests()[-1], "T")
    assert "status: complete" in result and "- main.py:1" in result
    assert NO_HANDOFF_REASON not in result
    assert task.handoff is not None and json.loads(task.handoff)["status"] == "complete"


def claiming_child(positions: dict[str, str]) -> Any:
    """Each child (told apart by its prompt) submits its claim on 'root cause', then ends."""

    def respond(request: RecordedRequest) -> Reply:
        prompt = request.messages[1]["content"]
        if request.messages[-1]["role"] == "tool":
            return Reply(text="Submitted.")
        claims = (
            [{"topic": "root cause", "position": positions[prompt]}] if prompt in positions else []
        )
        return submit(f"s-{prompt}", answer=f"answer of {prompt}", claims=claims)

    return respond


async def test_a_foreground_group_comes_back_as_one_block_marking_the_conflict(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[group_call("explore", p, id=p) for p in ("a", "b", "c")]),
        Reply(text="compared"),
    ]
    router.default_child = claiming_child(
        {"a": "the cache is stale", "b": "the network drops packets", "c": "The cache is  stale"}
    )
    try:
        await asyncio.wait_for(run_turn(baton, "investigate"), 20)
        tasks = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    last = router.main_requests()[-1]
    first = tool_result_of(last, "a")
    assert first.startswith('<task_group name="g">') and first.count("<task_group") == 1
    assert "CONFLICT — review: root cause (2 different positions)" in first
    assert "Conflicts: 1 topic(s) need review: root cause" in first
    for prompt in ("a", "b", "c"):
        assert f"answer of {prompt}" in first
    for other in ("b", "c"):
        pointer = tool_result_of(last, other)
        assert (
            'group="g"' in pointer and "group block returned for the group's first call" in pointer
        )
        assert "answer of" not in pointer
    assert {t.group for t in tasks} == {"g"} and len(tasks) == 3


async def test_a_group_that_agrees_has_no_conflicts(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[group_call("explore", p, id=p) for p in ("a", "b")]),
        Reply(text="ok"),
    ]
    router.default_child = claiming_child({"a": "the cache", "b": "THE CACHE"})
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 20)
    finally:
        await baton.close()
    block = tool_result_of(router.main_requests()[-1], "a")
    assert "Conflicts: none" in block and "CONFLICT" not in block
    assert "agreed: root cause" in block


async def test_a_refused_sibling_does_not_block_the_group(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[
            group_call("explore", "a", id="a"),
            group_call("nobody", "x", id="x"),  # no such agent
            group_call("explore", "   ", id="y"),  # empty prompt
            ToolCallSpec("task", '{"subagent_type": "explore", "group": "g"', id="z"),  # broken
            group_call("explore", "b", id="b"),
        ]),
        Reply(text="ok"),
    ]  # fmt: skip
    router.default_child = claiming_child({"a": "one", "b": "two"})
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 10)
    finally:
        await baton.close()
    last = router.main_requests()[-1]
    assert "no sub-agent named 'nobody'" in tool_result_of(last, "x")
    assert "the prompt is empty" in tool_result_of(last, "y")
    block = tool_result_of(last, "a")
    assert block.startswith('<task_group name="g">')
    assert "answer of a" in block and "answer of b" in block
    assert "CONFLICT — review: root cause" in block
    assert "group block" in tool_result_of(last, "b")


async def test_a_group_whose_first_call_is_refused_still_returns_its_block(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[
            group_call("nobody", "x", id="x"),  # refused, and first in the response
            group_call("explore", "a", id="a"),
            group_call("explore", "b", id="b"),
        ]),
        Reply(text="ok"),
    ]  # fmt: skip
    router.default_child = claiming_child({"a": "one", "b": "two"})
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 10)
    finally:
        await baton.close()
    last = router.main_requests()[-1]
    results = [tool_result_of(last, c) for c in ("x", "a", "b")]
    # Some call's result must carry the group's answers: else they are lost.
    assert any("answer of a" in r and "answer of b" in r for r in results), results


async def test_a_background_group_is_delivered_together_once_none_runs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    release = asyncio.Event()

    async def child(request: RecordedRequest) -> Reply:
        prompt = request.messages[1]["content"]
        if request.messages[-1]["role"] == "tool":
            return Reply(text="Submitted.")
        if prompt == "slow":
            await release.wait()
        return submit(f"s-{prompt}", answer=f"ANSWER-{prompt}",
                      claims=[{"topic": "verdict", "position": prompt}])  # fmt: skip

    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[
            group_call("explore", "fast", id="f", group="bg", background=True),
            group_call("explore", "slow", id="s", group="bg", background=True),
        ]),
        Reply(text="started"),
        Reply(text="still waiting"),
        Reply(text="both in"),
        Reply(text="nothing more"),
    ]  # fmt: skip
    router.default_child = child
    try:
        await run_turn(baton, "start both")
        fast = await wait_for_state(baton, "task-explore-1")
        assert fast.state == "completed"
        await run_turn(baton, "anything yet?")
        release.set()
        await wait_finished(baton, "task-explore-2")
        await run_turn(baton, "and now?")
        await run_turn(baton, "more?")
    finally:
        await baton.close()
    main = router.main_requests()
    started = tool_result_of(main[1], "f")
    assert started == '<task id="task-explore-1" state="running" group="bg"/>'
    waiting = str(main[2].messages[-1]["content"])
    assert waiting == "anything yet?"  # the fast one alone is held back
    delivered = str(main[3].messages[-1]["content"])
    assert delivered.count("<task_group") == 1
    assert '<task_group name="bg" ids="task-explore-1,task-explore-2">' in delivered
    assert "ANSWER-fast" in delivered and "ANSWER-slow" in delivered
    assert "CONFLICT — review: verdict" in delivered
    assert delivered.endswith("and now?")
    assert str(main[4].messages[-1]["content"]) == "more?"  # once only


async def wait_for_state(baton: Any, task_id: str) -> Any:
    """The record once it is no longer running (a sibling may still run)."""

    async def poll() -> Any:
        while True:
            detail = await baton.tracker.get(task_id)
            if detail is not None and detail.task.state != "running":
                return detail.task
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), 10)


async def test_a_group_call_that_never_ran_leaves_nothing_a_later_response_joins(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.subagents import task_tool

    # Every response's ResponseCalls at one address: what CPython does when it reuses
    # the freed object's memory for the next response's.
    monkeypatch.setattr(task_tool, "id", lambda obj: 1, raising=False)
    baton = await make_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[
            group_call("explore", "a", id="a"),
            ToolCallSpec("task", {"subagent_type": "explore", "group": "g"}, id="m"),  # no prompt
        ]),
        Reply(tool_calls=[group_call("explore", "c", id="c"), group_call("explore", "d", id="d")]),
        Reply(text="ok"),
    ]  # fmt: skip
    router.default_child = claiming_child({"a": "one", "c": "two", "d": "three"})
    try:
        await asyncio.wait_for(run_turn(baton, "go"), 5)
    finally:
        await baton.close()
    last = router.main_requests()[-1]
    block = tool_result_of(last, "c")
    assert "answer of c" in block and "answer of d" in block and "answer of a" not in block
