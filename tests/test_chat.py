"""`python -m bot` and `baton chat`, run as real processes against the fake model server;
then the terminal's share of the turn machine (queue, budgets, Retry), with `TerminalChat`
driven in this process on a pipe, as a person at a terminal types.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Baton, build_baton
from bot.chat import TERMINAL_CHANNEL, TERMINAL_USER, TerminalChat, thread_of
from bot.config import LimitsConfig
from bot.store import SessionKey
from bot.store.runs import RunStore
from bot.store.thread_inbox import RETRIED, TAKEN, Inbound, ThreadInbox
from tests.conftest import make_settings
from tests.fakes.openai_api import ErrorReply, FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.processes import bot_environment
from tests.scenarios.drivers import PATIENCE_S, TerminalDriver
from tests.sessions.recording import until

ROOT = Path(__file__).resolve().parent.parent


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    extra.setdefault("LOG_LEVEL", "")  # the default level, whatever the developer's shell says
    # Baton's own files stay beside the test's directory (which may be the workspace),
    # never in the real home.
    state = str(tmp_path.with_name(tmp_path.name + "-state"))
    return bot_environment(**{"BATON_STATE_DIR": state, **extra})


async def chat(tmp_path: Path, fake: FakeOpenAI, stdin: str, *args: str) -> tuple[int, str, str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    env = base_env(
        tmp_path,
        OPENAI_BASE_URL=fake.url,
        OPENAI_API_KEY="sk-test",
        BATON_MODEL="fake-model",
        BATON_WORKSPACE=str(workspace),
        DATABASE_URL=f"sqlite:///{tmp_path / 'chat.db'}",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", *args,
        cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def test_without_a_slack_token_the_bot_explains_what_to_set(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bot"],
        cwd=tmp_path, env=base_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    for expected in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "baton chat"):
        assert expected in result.stderr


def test_a_bad_config_stops_the_bot_naming_key_and_file(tmp_path: Path) -> None:
    (tmp_path / "baton.yaml").write_text("model: m\nmax_turn: 5\n")
    result = subprocess.run(
        [sys.executable, "-m", "bot", "chat"],
        cwd=tmp_path, env=base_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "unknown key 'max_turn'" in result.stderr
    assert str(tmp_path / "baton.yaml") in result.stderr


def test_chat_without_a_model_says_how_to_set_one(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bot", "chat"],
        cwd=tmp_path, env=base_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "BATON_MODEL" in result.stderr


async def test_chat_streams_asks_for_approval_and_remembers(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "hello.txt", "content": "hi\n"})]),
        Reply(text="I wrote hello.txt for you."),
    )
    code, out, err = await chat(tmp_path, fake_llm, "please write hello\ny\n")
    assert code == 0, err
    assert "▸ write_file hello.txt" in out
    assert "write_file needs your approval" in out
    assert "Approve? [y/N]" in out
    assert "  ▸ write_file hello.txt, hi\n" in out  # as Slack's progress describes it
    assert "\n    ✓\n" in out  # its result
    assert "I wrote hello.txt for you." in out
    assert "2 turns" in out
    assert (tmp_path / "ws" / "hello.txt").read_text() == "hi\n"
    # The terminal shows the conversation only: no library's INFO lines (each HTTP
    # request to the model) between the prompt and the answer, nor on stderr.
    assert "HTTP Request" not in out and "HTTP Request" not in err
    assert " INFO " not in out + err

    fake_llm.script(Reply(text="Earlier I wrote hello.txt."))
    code, out, err = await chat(tmp_path, fake_llm, "what did you do?\n")
    assert code == 0, err
    assert "4 earlier messages" in out
    assert "Earlier I wrote hello.txt." in out
    contents = [m["content"] for m in fake_llm.requests[-1].messages]
    assert "please write hello" in contents and "what did you do?" in contents
    fake_llm.assert_all_used()


async def test_chat_denial_is_told_to_the_model(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "rm -rf build"})]),
        Reply(text="Understood, I did not delete it."),
    )
    code, out, err = await chat(tmp_path, fake_llm, "clean up\nn\n")
    assert code == 0, err
    assert "bash needs your approval" in out
    assert "  ▸ bash rm -rf build\n" in out
    assert "    ✗ Not run: the person at the terminal denied this call\n" in out
    tool_result = fake_llm.requests[1].messages[-1]
    assert tool_result["role"] == "tool"
    assert "denied" in tool_result["content"]


async def test_sessions_are_separate(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(Reply(text="one"), Reply(text="two"))
    await chat(tmp_path, fake_llm, "first secret\n", "--session", "a")
    code, out, _ = await chat(tmp_path, fake_llm, "hello\n", "--session", "b")
    assert code == 0 and "earlier messages" not in out
    assert all(m["content"] != "first secret" for m in fake_llm.requests[-1].messages)


@pytest.mark.parametrize("command", ["/exit\n", ""])
async def test_chat_leaves_on_exit_or_end_of_input(
    tmp_path: Path, fake_llm: FakeOpenAI, command: str
) -> None:
    code, out, _ = await chat(tmp_path, fake_llm, command)
    assert code == 0 and "Baton chat" in out
    assert fake_llm.requests == []


async def test_chat_runs_an_agent_directly_and_lists_tasks(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    def respond(request: object) -> Reply:
        system = request.messages[0]["content"]  # type: ignore[attr-defined]
        if system.startswith("You are Baton"):
            return Reply(text="I see the explore run in the history.")
        return Reply(text="The README is one line long.")

    fake_llm.responder = respond
    stdin = "@explore how long is the README?\n@nobody hi\n/tasks\nwhat did explore say?\n"
    code, out, err = await chat(tmp_path, fake_llm, stdin)
    assert code == 0, err
    assert "◆ explore · task-explore-1\n" in out
    assert "── ✓ Done (explore) · 2 turns" in out
    assert "The README is one line long." in out
    assert "I have no agent named `nobody`. Available agents: " in out
    assert "⚙ 0 running · 1 done" in out
    assert "✓ task-explore-1  explore" in out and '"how long is the README?"' in out
    main_requests = [
        r for r in fake_llm.requests if r.messages[0]["content"].startswith("You are Baton")
    ]
    assert len(main_requests) == 1  # the direct run did not call the main agent
    history = [m["content"] for m in main_requests[0].messages]
    assert "@explore how long is the README?" in history
    assert any("The README is one line long." in str(c) for c in history)


async def test_chat_says_when_it_waits_for_a_rate_limited_model(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        ErrorReply(status=429, message="Rate limit reached", retry_after=0.2),
        Reply(text="Here after the wait."),
    )
    code, out, err = await chat(tmp_path, fake_llm, "hello\n")
    assert code == 0, err
    assert "… waiting for the model (rate limited, retry 1; next try in 0.2 s)" in out
    assert "Here after the wait." in out


# ------------------------------------------------------- the terminal on the turn machine


def last_asked(request: RecordedRequest) -> str:
    return [str(m["content"]) for m in request.messages if m["role"] == "user"][-1]


@contextlib.asynccontextmanager
async def at_the_terminal(
    baton: Baton, llm: FakeOpenAI, session: str = "default"
) -> AsyncIterator[TerminalDriver]:
    """`baton chat --session SESSION` on `baton`, at a terminal (a line typed while a
    run works steers it); leaves at end of input."""
    read_end, write_end = os.pipe()
    stdin, typed = os.fdopen(read_end, "r"), os.fdopen(write_end, "w")
    chat = TerminalChat(
        baton, SessionKey.terminal(session), stdin=stdin, stdout=io.StringIO(), steer=True
    )
    person = TerminalDriver(chat, llm, typed)
    looping = asyncio.create_task(chat.loop(), name=f"chat-{session}")
    try:
        await until(lambda: looping.done() or "Baton chat" in person.transcript(), PATIENCE_S)
        yield person
    finally:
        typed.close()
        try:
            async with asyncio.timeout(PATIENCE_S):
                await looping
        finally:
            if not looping.done():
                looping.cancel()
                await asyncio.gather(looping, return_exceptions=True)
            stdin.close()


@contextlib.asynccontextmanager
async def baton_on(tmp_path: Path, llm: FakeOpenAI, **settings: object) -> AsyncIterator[Baton]:
    baton = await build_baton(make_settings(tmp_path, llm.url, **settings))
    try:
        yield baton
    finally:
        await baton.close()


QUEUED = (
    "⏳ Queued: next in line; every slot is taken. It starts by itself when a slot frees; "
    "Ctrl-C withdraws it."
)


async def test_over_the_run_limit_the_terminal_shows_the_queue_and_ctrl_c_withdraws(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """`limits.runs: 1`, and another session's run holds the one slot: a question waits,
    shown as queued; Ctrl-C withdraws it before it reaches the model; asked again, it
    waits again and starts by itself once the slot frees."""
    go = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        asked = last_asked(request)
        if "FIRST" in asked:
            await go.wait()
        return Reply(text=f"ANSWER to {asked}")

    fake_llm.responder = respond
    async with (
        baton_on(tmp_path, fake_llm, limits=LimitsConfig(runs=1)) as baton,
        at_the_terminal(baton, fake_llm, "one") as one,
        at_the_terminal(baton, fake_llm, "two") as two,
    ):
        try:
            await one.ask("FIRST job")
            await until(lambda: len(fake_llm.requests) == 1, PATIENCE_S)
            await two.ask("SECOND job")
            await until(lambda: QUEUED in two.transcript(), PATIENCE_S)
            await two.cancel()  # Ctrl-C
            await until(lambda: two.status() != "", PATIENCE_S)
            assert two.status() == "⊘ Cancelled"
            await two.ask("THIRD job")
            await until(lambda: two.transcript().count(QUEUED) == 2, PATIENCE_S)
            assert len(fake_llm.requests) == 1  # it waits while the slot is taken
        finally:
            go.set()
        await one.wait_idle()
        await two.wait_idle()
        assert [last_asked(r) for r in fake_llm.requests] == ["FIRST job", "THIRD job"]
        shown = two.transcript()
        assert shown.index(QUEUED, shown.index("⊘ Cancelled")) < shown.index("ANSWER to THIRD job")
        assert re.fullmatch(r"✓ Done · 1 turn · .*", two.status())
        assert "ANSWER to FIRST job" in one.transcript() and QUEUED not in one.transcript()


async def test_a_spent_daily_budget_is_refused_at_the_terminal(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(Reply(text="The first answer."))
    limits = LimitsConfig(tokens_per_user_per_day=100)
    async with (
        baton_on(tmp_path, fake_llm, limits=limits) as baton,
        at_the_terminal(baton, fake_llm) as person,
    ):
        await person.ask("first question")  # the budget is not spent yet
        await person.wait_idle()
        await person.ask("second question")
        await person.wait_idle()
    shown = person.transcript()
    assert "The first answer." in shown
    refused = re.compile(
        r"^✗ You have used [\d,]+ of your 100 tokens for today, so I cannot start another "
        r"run\. Your budget resets at 00:00 UTC",
        re.MULTILINE,
    )
    [found] = refused.finditer(shown)
    assert shown.index("The first answer.") < found.start()
    assert len(fake_llm.requests) == 1 and shown.count("── ") == 1  # the refused one never ran
    fake_llm.assert_all_used()


async def test_a_run_a_restart_interrupted_is_shown_and_retry_runs_it_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """A chat that died mid-run (its process is gone) left a run in the session: the next
    chat shows it, and `/retry` runs its question once."""
    async with baton_on(tmp_path, fake_llm) as baton:
        key = SessionKey.terminal("default")
        session = await baton.conversations.store.get_or_create(key)
        thread = thread_of("default")
        await RunStore(baton.database).start(
            run_id="deadrun1",
            owner="chat-that-died",
            session_id=session.id,
            channel_id=TERMINAL_CHANNEL,
            thread_ts=thread,
            user_id=TERMINAL_USER,
        )
        question = Inbound(
            session_key=key.key,
            channel_id=TERMINAL_CHANNEL,
            thread_ts=thread,
            ts="1700000000.000001-dead",
            user_id=TERMINAL_USER,
            text="QUESTION-ONE",
        )
        inbox = ThreadInbox(baton.database)
        assert await inbox.receive(
            question, holder="chat-that-died", state=TAKEN, run_id="deadrun1"
        )
        async with at_the_terminal(baton, fake_llm) as person:
            offer = "✗ Run deadrun1 was interrupted by a restart: /retry runs it again"
            await until(lambda: offer in person.transcript(), PATIENCE_S)
            await person.wait_idle()
            assert fake_llm.requests == []  # offered, not run unasked
            fake_llm.script(Reply(text="ANSWER-ONE"))
            await person.ask("/retry")
            await person.wait_idle()
            await person.ask("/retry")  # a second press runs nothing
            await person.wait_idle()
        stored = await inbox.find(TERMINAL_CHANNEL, question.ts)
        assert stored is not None and stored.state == RETRIED
    shown = person.transcript()
    assert shown.count(offer) == 1
    [request] = fake_llm.requests
    assert last_asked(request) == "QUESTION-ONE"
    assert "ANSWER-ONE" in shown and shown.count("── ") == 1
    assert re.search(r"^── ✓ Done · 1 turn · ", shown, re.MULTILINE)
    nothing = "✗ Nothing to retry: it was retried already, or it was not interrupted."
    assert shown.index("ANSWER-ONE") < shown.index(nothing)
    fake_llm.assert_all_used()


async def test_a_chat_leaves_another_chat_sessions_work_to_that_session(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Every `baton chat` is of kind "chat", but each serves its own session: a chat in
    "default" neither answers "other"'s question a dead chat left unread, nor closes
    "other"'s interrupted run (which would take its /retry away)."""
    fake_llm.script(Reply(text="ANSWER-FOR-OTHER"))
    async with baton_on(tmp_path, fake_llm) as baton:
        other = SessionKey.terminal("other")
        session = await baton.conversations.store.get_or_create(other)
        thread = thread_of("other")
        inbox = ThreadInbox(baton.database)
        unread = Inbound(
            session_key=other.key, channel_id=TERMINAL_CHANNEL, thread_ts=thread,
            ts="1700000000.000001-unread", user_id=TERMINAL_USER, text="Q-OTHER-UNREAD",
        )  # fmt: skip
        assert await inbox.receive(unread, holder="chat-that-died")
        runs = RunStore(baton.database)
        await runs.start(
            run_id="otherrun1", owner="chat-that-died", session_id=session.id,
            channel_id=TERMINAL_CHANNEL, thread_ts=thread, user_id=TERMINAL_USER,
        )  # fmt: skip
        async with at_the_terminal(baton, fake_llm, "default") as person:
            await person.wait_idle()
        assert fake_llm.requests == [], person.transcript()
        assert "ANSWER-FOR-OTHER" not in person.transcript()
        record = await runs.get("otherrun1")
        assert record is not None and record.state == "running"  # still "other"'s to offer
        # The control: "other"'s own chat takes up its question.
        async with at_the_terminal(baton, fake_llm, "other") as owner:
            await until(lambda: "ANSWER-FOR-OTHER" in owner.transcript(), PATIENCE_S)
            await owner.wait_idle()
        record = await runs.get("otherrun1")
        assert record is not None and record.state == "finished"
