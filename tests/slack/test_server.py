"""`python -m bot` in HTTP mode as a real process: health, events, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp

from tests.fakes.openai_api import FakeOpenAI, Reply
from tests.fakes.slack_api import FakeSlackAPI
from tests.ports import free_port
from tests.processes import bot_environment, start_bot, wait_until_healthy
from tests.slack.harness import ALICE, BOT, SIGNING_SECRET, next_ts, sign, until


async def test_http_mode_serves_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.script(Reply(text="Finished despite the shutdown.", delay=1.0))
        env = bot_environment(
            SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.url, PORT=str(port), OPENAI_BASE_URL=llm.url,
            OPENAI_API_KEY="sk-test", BATON_MODEL="fake-model", BATON_WORKSPACE=str(workspace),
            DATABASE_URL=f"sqlite:///{tmp_path / 'baton.db'}",
            BATON_STATE_DIR=str(tmp_path / "state"),
        )  # fmt: skip
        process = await start_bot(tmp_path, env)
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:
                await wait_until_healthy(http, base, process)
                ts = next_ts()
                text = f"<@{BOT}> finish this please"
                slack.add_message("C1", text, ALICE, ts=ts)
                body = json.dumps({
                    "type": "event_callback", "team_id": "T0001", "event_id": "Ev1",
                    "event": {"type": "app_mention", "user": ALICE, "text": text, "ts": ts,
                              "channel": "C1", "event_ts": ts},
                })  # fmt: skip
                headers = {"Content-Type": "application/json", **sign(body)}
                async with http.post(f"{base}/slack/events", data=body, headers=headers) as r:
                    assert r.status == 200
                await until(lambda: len(llm.requests) == 1)
                process.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(process.wait(), 40)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        stderr = (await process.stderr.read()).decode()  # type: ignore[union-attr]
        assert code == 0, stderr
        answers = [m.get("text", "") for m in slack.thread_messages("C1", ts)]
        assert any("Finished despite the shutdown." in a for a in answers), stderr
