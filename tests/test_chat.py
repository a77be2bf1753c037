"""`python -m bot` and `baton chat`, run as real processes against the fake model server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.openai_api import ErrorReply, FakeOpenAI, Reply, ToolCallSpec
from tests.processes import bot_environment

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
