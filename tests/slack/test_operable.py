"""Operating Baton: /healthz, /metrics, start-up failures, logs; real processes where it matters."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import aiohttp

from bot.app import build_baton
from bot.slack.server import HealthCheck, HttpServer, slack_parts
from bot.slack.surface import SlackSurface
from bot.store import Database
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.socket_mode import FakeSocketMode
from tests.ports import free_port
from tests.processes import bot_environment, wait_until_healthy
from tests.slack.harness import ALICE, BOT, SIGNING_SECRET, next_ts, until


async def start_bot(cwd: Path, env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


def environment(tmp_path: Path, slack: FakeSlackAPI, llm_url: str, **extra: str) -> dict[str, str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return bot_environment(**{
        "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.url, "PORT": str(free_port()), "OPENAI_BASE_URL": llm_url,
        "OPENAI_API_KEY": "sk-test", "BATON_MODEL": "fake-model",
        "BATON_WORKSPACE": str(workspace), "DATABASE_URL": f"sqlite:///{tmp_path / 'baton.db'}",
        "BATON_STATE_DIR": str(tmp_path / "state"), **extra,
    })  # fmt: skip


async def exits_with(process: asyncio.subprocess.Process) -> tuple[int, str]:
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode or 0, stderr.decode(errors="replace")


def assert_one_clear_line(stderr: str, *needles: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("baton: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], stderr


# ------------------------------------------------------------------ start-up failures


async def test_a_token_slack_refuses_stops_the_start_with_one_line(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT, revoked_tokens=["xoxb-test"]) as slack:
        process = await start_bot(tmp_path, environment(tmp_path, slack, "http://127.0.0.1:9"))
        code, stderr = await exits_with(process)
    assert code == 2, stderr
    assert_one_clear_line(stderr, "SLACK_BOT_TOKEN", "invalid_auth")


async def test_an_unreachable_database_stops_the_start_with_one_line(tmp_path: Path) -> None:
    closed = free_port()
    async with FakeSlackAPI(bot_user_id=BOT) as slack:
        env = environment(
            tmp_path, slack, "http://127.0.0.1:9",
            DATABASE_URL=f"postgresql://baton:s3cret-pw@127.0.0.1:{closed}/baton",
        )  # fmt: skip
        code, stderr = await exits_with(await start_bot(tmp_path, env))
    assert code == 2, stderr
    assert_one_clear_line(stderr, "database", "DATABASE_URL")
    assert "s3cret-pw" not in stderr


async def test_a_bad_config_stops_the_start_with_one_line(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack:
        env = environment(tmp_path, slack, "http://127.0.0.1:9", PORT="not-a-port")
        code, stderr = await exits_with(await start_bot(tmp_path, env))
    assert code == 2, stderr
    assert "Traceback" not in stderr and stderr.startswith("baton: "), stderr
    assert "PORT" in stderr


async def test_an_unknown_log_level_is_one_line(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack:
        env = environment(tmp_path, slack, "http://127.0.0.1:9", LOG_LEVEL="chatty")
        code, stderr = await exits_with(await start_bot(tmp_path, env))
    assert code == 2, stderr
    assert_one_clear_line(stderr, "LOG_LEVEL")


# ------------------------------------------------------------------ Socket Mode, as a process


async def test_socket_mode_serves_health_and_metrics_on_port_and_logs_json(
    tmp_path: Path,
) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        (tmp_path / "ws").mkdir()
        (tmp_path / "ws" / "notes.txt").write_text("hello\n")
        async with FakeSocketMode(slack) as sockets:
            env = environment(tmp_path, slack, llm.url, SLACK_APP_TOKEN="xapp-test")
            del env["SLACK_SIGNING_SECRET"]
            process = await start_bot(tmp_path, env, "--log-format", "json")
            base = f"http://127.0.0.1:{env['PORT']}"
            try:
                async with aiohttp.ClientSession() as http:
                    await wait_until_healthy(http, base, process)
                    await sockets.wait_connected()
                    async with http.get(f"{base}/healthz") as response:
                        health = await response.json()
                    assert health["ok"] is True
                    assert (health["slack"], health["database"]) == ("ok", "ok")
                    # Events come over the socket only: nothing may post them to PORT.
                    async with http.post(f"{base}/slack/events", data="{}") as response:
                        assert response.status in (404, 405)

                    llm.script(
                        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "notes.txt"})]),
                        Reply(text="The notes say hello."),
                    )
                    ts = next_ts()
                    text = f"<@{BOT}> what do the notes say?"
                    slack.add_message("C1", text, ALICE, ts=ts)
                    envelope = await sockets.send("events_api", {
                        "type": "event_callback", "team_id": "T0001", "event_id": "EvOps",
                        "event_time": int(time.time()),
                        "event": {"type": "app_mention", "user": ALICE, "text": text, "ts": ts,
                                  "channel": "C1", "event_ts": ts},
                    })  # fmt: skip
                    await sockets.wait_ack(envelope)
                    await until(
                        lambda: any("The notes say hello." in str(m)
                                    for m in slack.thread_messages("C1", ts)),
                        within=30,
                    )  # fmt: skip
                    async with http.get(f"{base}/metrics") as response:
                        assert response.status == 200
                        assert response.content_type == "text/plain"
                        exposed = await response.text()
                process.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(process.wait(), 40)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        stderr = (await process.stderr.read()).decode()  # type: ignore[union-attr]
    assert code == 0, stderr

    assert "# TYPE baton_runs_total counter" in exposed or "# TYPE baton_runs counter" in exposed
    assert 'baton_tool_calls_total{outcome="ok",tool="read_file"} 1.0' in exposed, exposed
    assert value(exposed, 'baton_llm_tokens_total{kind="prompt"}') > 0
    assert value(exposed, 'baton_llm_tokens_total{kind="completion"}') > 0
    assert value(exposed, "baton_llm_call_seconds_count") == 2
    # A quick run's one message is its answer, streamed.
    assert value(exposed, 'baton_slack_api_calls_total{method="chat.startStream"}') >= 1
    assert value(exposed, 'baton_slack_api_calls_total{method="auth.test"}') >= 1
    assert "baton_runs_waiting 0.0" in exposed
    # The start-up heap is frozen before the first event (bot/heap.py): libraries, app.
    assert value(exposed, "baton_gc_frozen_objects") > 50_000

    records = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert records, "nothing was logged"
    assert all({"time", "level", "logger", "message"} <= record.keys() for record in records)
    assert any("Socket Mode" in record["message"] for record in records)
    warnings = [r for r in records if r["level"] == "WARNING" and r["logger"].startswith("slack")]
    assert warnings == [], warnings


def value(exposed: str, sample: str) -> float:
    for line in exposed.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} is not exposed:\n{exposed}")


async def test_http_mode_starts_without_bolt_warnings(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        env = environment(tmp_path, slack, llm.url)
        process = await start_bot(tmp_path, env)
        try:
            async with aiohttp.ClientSession() as http:
                await wait_until_healthy(http, f"http://127.0.0.1:{env['PORT']}", process)
            process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 40)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        stderr = (await process.stderr.read()).decode()  # type: ignore[union-attr]
    assert code == 0, stderr
    assert " WARNING " not in stderr, stderr
    assert "Baton listens on port" in stderr


# ------------------------------------------------------------------ /healthz, in process


async def test_healthz_names_slack_once_the_token_is_revoked(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        settings = make_settings(
            tmp_path, llm.url, slack_bot_token="xoxb-test",
            slack_signing_secret=SIGNING_SECRET, slack_api_url=slack.url,
        )  # fmt: skip
        baton = await build_baton(settings)
        surface = SlackSurface(slack_parts(baton))
        health = HealthCheck(
            engine=baton.database.engine, client=surface.client,
            accepting=lambda: surface.turns.accepting, slack_ttl_s=0.2,
        )  # fmt: skip
        server = HttpServer(surface, host="127.0.0.1", port=0, health=health)
        port = await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                url = f"http://127.0.0.1:{port}/healthz"
                async with http.get(url) as response:
                    assert response.status == 200, await response.text()
                slack.revoke_token("xoxb-test")
                # Within the TTL the cached answer stands.
                async with http.get(url) as response:
                    assert response.status == 200
                await asyncio.sleep(0.3)
                async with http.get(url) as response:
                    assert response.status == 503
                    report = await response.json()
                assert report["ok"] is False
                assert report["slack"] == "invalid_auth"
                assert report["database"] == "ok"

                surface.turns.accepting = False
                slack.revoked_tokens.clear()
                await asyncio.sleep(0.3)
                async with http.get(url) as response:
                    assert response.status == 503
                    report = await response.json()
                assert report["slack"] == "ok" and report["shutting_down"] is True
        finally:
            await server.stop()
            await baton.close()
        # A prober polling every second costs Slack one auth.test per TTL, not per probe.
        assert len(slack.calls_to("auth.test")) <= 4


async def test_healthz_names_the_database_when_it_is_unreachable(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        settings = make_settings(
            tmp_path, llm.url, slack_bot_token="xoxb-test",
            slack_signing_secret=SIGNING_SECRET, slack_api_url=slack.url,
        )  # fmt: skip
        baton = await build_baton(settings)
        surface = SlackSurface(slack_parts(baton))
        gone = Database(f"postgresql://baton:pw@127.0.0.1:{free_port()}/baton")
        health = HealthCheck(engine=gone.engine, client=surface.client, accepting=lambda: True)
        server = HttpServer(surface, host="127.0.0.1", port=0, health=health)
        port = await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                    assert response.status == 503
                    report = await response.json()
        finally:
            await server.stop()
            await gone.close()
            await baton.close()
    assert report["ok"] is False
    assert report["slack"] == "ok"
    assert report["database"].startswith("unreachable")
    assert "pw" not in json.dumps(report)
