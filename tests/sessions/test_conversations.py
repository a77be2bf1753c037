"""Turns of a session: history goes in, the run's messages are kept, even when cut short."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.engine import ApprovalFunc, Done, Engine, LLMClient, ToolStart
from bot.engine.messages import INTERRUPTED_TOOL_RESULT
from bot.sessions import Conversations
from bot.store import Database, SessionKey, SessionStore
from bot.tools import Workspace, build_workspace_tools
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await db.create_schema()
    yield db
    await db.close()


def conversations(database: Database, llm: LLMClient, workspace: Workspace) -> Conversations:
    def build(approval: ApprovalFunc | None) -> Engine:
        return Engine(
            llm=llm,
            model="fake-model",
            tools=build_workspace_tools(workspace),
            system_prompt="system",
            approval=approval,
        )

    return Conversations(store=SessionStore(database), build_engine=build)


THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.000")
OTHER = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="2.000")


async def test_memory_across_turns_stays_in_its_session(
    database: Database, llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    convo = conversations(database, llm, workspace)
    fake_llm.script(
        Reply(text="Nice to meet you, Ada."), Reply(text="You are Ada."), Reply(text="?")
    )
    [e async for e in convo.run_turn(THREAD, "My name is Ada.")]
    events = [e async for e in convo.run_turn(THREAD, "What is my name?")]
    assert isinstance(events[-1], Done) and events[-1].final_text == "You are Ada."
    second = [(m["role"], m["content"]) for m in fake_llm.requests[1].messages]
    assert second == [
        ("system", "system"),
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ]
    [e async for e in convo.run_turn(OTHER, "Who am I?")]
    assert all("Ada" not in str(m["content"]) for m in fake_llm.requests[2].messages)


async def test_history_survives_a_restart(
    tmp_path: Path, llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    first = Database(url)
    await first.create_schema()
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")]),
        Reply(text="The workspace is empty."),
    )
    [e async for e in conversations(first, llm, workspace).run_turn(THREAD, "What is here?")]
    await first.close()

    second = Database(url)
    await second.create_schema()
    try:
        fake_llm.script(Reply(text="I listed it before."))
        [e async for e in conversations(second, llm, workspace).run_turn(THREAD, "Again?")]
    finally:
        await second.close()
    roles = [m["role"] for m in fake_llm.requests[-1].messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert fake_llm.requests[-1].messages[3]["tool_call_id"] == "c1"


async def test_a_cancelled_turn_keeps_what_it_did_and_the_next_turn_still_works(
    database: Database, llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    convo = conversations(database, llm, workspace)
    fake_llm.script(Reply(tool_calls=[ToolCallSpec("bash", {"command": "sleep 60"}, id="slow")]))
    started = asyncio.Event()

    async def turn() -> None:
        async for event in convo.run_turn(THREAD, "run the slow thing"):
            if isinstance(event, ToolStart):
                started.set()

    task = asyncio.create_task(turn())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    fake_llm.script(Reply(text="It was interrupted."))
    [e async for e in convo.run_turn(THREAD, "what happened?")]
    messages = fake_llm.requests[-1].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[3] == {
        "role": "tool",
        "content": INTERRUPTED_TOOL_RESULT,
        "tool_call_id": "slow",
    }


async def test_turns_of_one_session_never_interleave(
    database: Database, llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    convo = conversations(database, llm, workspace)
    fake_llm.script(Reply(text="first answer", delay=0.3), Reply(text="second answer"))

    async def turn(text: str) -> None:
        [e async for e in convo.run_turn(THREAD, text)]

    await asyncio.gather(turn("one"), turn("two"))
    # The second turn started only after the first was saved, so it saw all of it.
    last = [(m["role"], m["content"]) for m in fake_llm.requests[1].messages]
    assert last[1:] == [("user", "one"), ("assistant", "first answer"), ("user", "two")]
