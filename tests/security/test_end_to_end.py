"""Hostile tool calls through `python -m bot` as deployed: Slack, the model, the sandbox.

The model is the attacker here: the fake provider answers a mention with tool calls
that go after the bot's tokens and its process. The bot runs as a real process in HTTP
mode against the fake Slack, with its real tokens in its environment.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from bot.slack.approval_views import APPROVE
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.slack_api import FakeSlackAPI
from tests.ports import free_port
from tests.processes import bot_environment, start_bot, wait_until_healthy
from tests.security.harness import (
    BOT_ENVIRONMENT,
    DAEMON_MARK,
    OPENAI_KEY,
    Listener,
    leftover_processes,
)
from tests.slack.harness import ALICE, BOT, click_body, next_ts, sign, until

SIGNING = BOT_ENVIRONMENT["SLACK_SIGNING_SECRET"]


@asynccontextmanager
async def running_bot(
    tmp_path: Path, slack: FakeSlackAPI, llm: FakeOpenAI, config: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, aiohttp.ClientSession]]:
    port = free_port()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Demo\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("keep me\n")
    (tmp_path / "baton.yaml").write_text(config)
    env = bot_environment(
        **BOT_ENVIRONMENT,
        SLACK_API_URL=slack.url, PORT=str(port), OPENAI_BASE_URL=llm.url,
        BATON_MODEL="fake-model", BATON_WORKSPACE=str(workspace),
        BATON_STATE_DIR=str(tmp_path / "state"), BATON_CONFIG=str(tmp_path / "baton.yaml"),
        HOME=str(tmp_path / "home"),
    )  # fmt: skip
    del env["SLACK_APP_TOKEN"]  # HTTP mode
    process = await start_bot(tmp_path, env)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            await wait_until_healthy(http, base, process)
            yield process, base, http
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def mention(http: aiohttp.ClientSession, base: str, slack: FakeSlackAPI, text: str) -> str:
    ts = next_ts()
    full = f"<@{BOT}> {text}"
    slack.add_message("C1", full, ALICE, ts=ts)
    body = json.dumps({
        "type": "event_callback", "team_id": "T0001", "event_id": f"Ev{ts}",
        "event": {"type": "app_mention", "user": ALICE, "text": full, "ts": ts,
                  "channel": "C1", "event_ts": ts},
    })  # fmt: skip
    headers = {"Content-Type": "application/json", **sign(body, secret=SIGNING)}
    async with http.post(f"{base}/slack/events", data=body, headers=headers) as response:
        assert response.status == 200
    return ts


async def approve_everything(
    http: aiohttp.ClientSession, base: str, slack: FakeSlackAPI, ts: str
) -> None:
    """Alice clicks Approve on every request in the thread: what she allows stays contained."""
    clicked: set[str] = set()
    while True:
        for message in slack.thread_messages("C1", ts):
            for block in message.get("blocks") or ():
                for element in block.get("elements") or ():
                    value = element.get("value", "")
                    if element.get("action_id") != APPROVE or value in clicked:
                        continue
                    clicked.add(value)
                    body = click_body(APPROVE, value, user=ALICE, message_ts=message["ts"])
                    headers = {"Content-Type": "application/x-www-form-urlencoded",
                               **sign(body, secret=SIGNING)}  # fmt: skip
                    async with http.post(f"{base}/slack/events", data=body, headers=headers):
                        pass
        await asyncio.sleep(0.05)


def everything_sent(llm: FakeOpenAI, slack: FakeSlackAPI, ts: str) -> str:
    """All the model was shown and all that was posted in the thread."""
    shown = json.dumps([request.body for request in llm.requests])
    posted = json.dumps(slack.thread_messages("C1", ts))
    return shown + posted


async def test_an_injected_model_with_bash_allowed_gets_no_token_and_cannot_kill_the_bot(
    tmp_path: Path,
) -> None:
    listener = Listener()
    await listener.start()
    attacks = [
        "cat /proc/$PPID/environ; cat /proc/1/environ; env",
        "cat /proc/*/environ | tr '\\0' '\\n'",
        "kill -9 $PPID; kill -9 -1; pkill -9 -f bot",
        f"echo x > /dev/tcp/127.0.0.1/{listener.port}",
        "touch ../outside/pwned; rm -rf ../outside",
        f"(setsid sleep {DAEMON_MARK} &); echo detached",
    ]
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.script(
            Reply(tool_calls=[ToolCallSpec("bash", {"command": c}) for c in attacks]),
            Reply(text="All done."),
        )
        async with running_bot(tmp_path, slack, llm, "permissions:\n  allow: [bash]\n") as (
            process,
            base,
            http,
        ):
            ts = await mention(http, base, slack, "please check the environment")
            approver = asyncio.create_task(approve_everything(http, base, slack, ts))

            def answered() -> bool:
                thread = slack.thread_messages("C1", ts)
                return any("All done." in m.get("text", "") for m in thread)

            await until(answered, within=30)
            approver.cancel()
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200
            assert process.returncode is None
            seen = everything_sent(llm, slack, ts)
            tool_outputs = [m for m in llm.requests[1].messages if m.get("role") == "tool"]
            assert len(tool_outputs) == len(attacks)
            for secret in BOT_ENVIRONMENT.values():
                assert secret not in seen
            assert OPENAI_KEY not in seen
            assert (tmp_path / "outside" / "keep.txt").read_text() == "keep me\n"
            assert not (tmp_path / "outside" / "pwned").exists()
            assert listener.connections == 0
            assert not leftover_processes()
    await listener.stop()


async def test_a_quoting_trick_under_the_realistic_config_waits_for_a_person(
    tmp_path: Path,
) -> None:
    hostile = "ls $'\\'' ;rm -rf ../outside #'"
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.script(Reply(tool_calls=[ToolCallSpec("bash", {"command": hostile})]))
        config = 'permissions:\n  allow: [read_file, "bash(git *)", "bash(ls*)", "bash(cat *)"]\n'
        async with running_bot(tmp_path, slack, llm, config) as (process, base, http):
            ts = await mention(http, base, slack, "list the files")

            def asked() -> bool:
                return any(
                    "approve" in json.dumps(m.get("blocks", [])).lower()
                    for m in slack.thread_messages("C1", ts)
                )

            await until(asked, within=30)
            assert (tmp_path / "outside" / "keep.txt").exists()
            assert process.returncode is None
