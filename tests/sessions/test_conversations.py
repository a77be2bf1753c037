"""Turns of a session: history goes in, the run's messages are kept, even when cut short."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.app import Baton, build_baton
from bot.engine import Done, ToolStart
from bot.engine.messages import INTERRUPTED_TOOL_RESULT
from bot.store import SessionKey
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec

THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.000")
OTHER = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="2.000")


async def turn(baton: Baton, key: SessionKey, text: str) -> list[object]:
    return [e async for e in baton.conversations.run_turn(key, text)]


async def test_memory_across_turns_stays_in_its_session(baton: Baton, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(
        Reply(text="Nice to meet you, Ada."), Reply(text="You are Ada."), Reply(text="?")
    )
    await turn(baton, THREAD, "My name is Ada.")
    events = await turn(baton, THREAD, "What is my name?")
    assert isinstance(events[-1], Done) and events[-1].final_text == "You are Ada."
    second = [(m["role"], m["content"]) for m in fake_llm.requests[1].messages]
    assert second[1:] == [
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ]
    await turn(baton, OTHER, "Who am I?")
    assert all("Ada" not in str(m["content"]) for m in fake_llm.requests[2].messages)


async def test_history_survives_a_restart(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    settings = make_settings(tmp_path, fake_llm.url)
    first = await build_baton(settings)
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")]),
        Reply(text="The workspace is empty."),
    )
    await turn(first, THREAD, "What is here?")
    await first.close()

    second = await build_baton(settings)
    try:
        fake_llm.script(Reply(text="I listed it before."))
        await turn(second, THREAD, "Again?")
    finally:
        await second.close()
    roles = [m["role"] for m in fake_llm.requests[-1].messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert fake_llm.requests[-1].messages[3]["tool_call_id"] == "c1"


async def test_a_cancelled_turn_keeps_what_it_did_and_the_next_turn_still_works(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    second_call = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        if len(fake_llm.requests) == 1:
            return Reply(tool_calls=[ToolCallSpec("glob", {"pattern": "*"}, id="slow")])
        second_call.set()
        await asyncio.Event().wait()  # the model never answers the second call
        raise AssertionError("unreachable")

    fake_llm.responder = respond
    task = asyncio.create_task(turn(baton, THREAD, "look around"))
    await asyncio.wait_for(second_call.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    fake_llm.responder = lambda request: Reply(text="It was interrupted.")
    await turn(baton, THREAD, "what happened?")
    messages = fake_llm.requests[-1].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[3]["tool_call_id"] == "slow"


async def test_an_interrupted_tool_call_is_repaired_in_history(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCallSpec("bash", {"command": "sleep 60"}, id="slow")]))
    # bash asks for approval by default; an approval that never comes keeps it pending.
    never = asyncio.Event()

    async def approval(request: object) -> object:
        await never.wait()
        raise AssertionError("unreachable")

    started = asyncio.Event()

    async def consume() -> None:
        async for event in baton.conversations.run_turn(THREAD, "slow", approval=approval):  # type: ignore[arg-type]
            if isinstance(event, ToolStart):
                started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fake_llm.script(Reply(text="ok"))
    await turn(baton, THREAD, "and now?")
    messages = fake_llm.requests[-1].messages
    assert messages[3] == {
        "role": "tool",
        "content": INTERRUPTED_TOOL_RESULT,
        "tool_call_id": "slow",
    }


async def test_turns_of_one_session_never_interleave(baton: Baton, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(Reply(text="first answer", delay=0.3), Reply(text="second answer"))
    await asyncio.gather(turn(baton, THREAD, "one"), turn(baton, THREAD, "two"))
    # Either turn may take the session first (the two start together); whichever
    # went second started only after the first was saved, so it saw all of it.
    first = fake_llm.requests[0].messages[-1]["content"]
    second = {"one": "two", "two": "one"}[first]
    last = [(m["role"], m["content"]) for m in fake_llm.requests[1].messages]
    assert last[1:] == [("user", first), ("assistant", "first answer"), ("user", second)]


async def test_run_usage_is_recorded_per_session(baton: Baton, fake_llm: FakeOpenAI) -> None:
    from tests.fakes.openai_api import Usage

    fake_llm.script(
        Reply(text="one", usage=Usage(prompt_tokens=100, completion_tokens=7)),
        Reply(text="two", usage=Usage(prompt_tokens=120, completion_tokens=9)),
    )
    await turn(baton, THREAD, "first")
    await turn(baton, THREAD, "second")
    session = await baton.conversations.store.get_or_create(THREAD)
    assert await baton.conversations.store.usage(session.id) == (220, 16)
