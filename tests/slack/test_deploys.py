"""Deploys: on SIGTERM Baton takes no new work (events get 503, so Slack sends them
elsewhere), lets runs and background tasks finish within the grace period, and ends
what is left as interrupted by a restart, never as cancelled."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot import metrics
from bot.app import build_baton
from bot.config import DEFAULT_SHUTDOWN_GRACE_S, LimitsConfig, load_settings
from bot.errors import ConfigError
from bot.slack.server import slack_parts
from bot.slack.surface import SlackSurface
from bot.subagents.tracker import RESTART_REASON
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.fakes.slack_api import FakeSlackAPI
from tests.processes import wait_until_healthy
from tests.slack.harness import (
    ALICE,
    BOT,
    TEAM,
    SlackHarness,
    next_ts,
    sign,
    start_harness,
    until,
)
from tests.slack.test_operable import environment, start_bot

INTERRUPTED = "Interrupted by a restart"


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith("You are Baton")


def task_call(prompt: str, *, background: bool) -> Reply:
    return Reply(
        tool_calls=[
            ToolCallSpec(
                "task",
                {"subagent_type": "explore", "prompt": prompt, "background": background,
                 "description": "Look around"},
                id="t1",
            )
        ]
    )  # fmt: skip


def mention_event(harness: SlackHarness, text: str) -> dict[str, Any]:
    ts = next_ts()
    harness.slack.add_message("C1", f"<@{BOT}> {text}", ALICE, ts=ts)
    return {
        "type": "app_mention", "user": ALICE, "text": f"<@{BOT}> {text}", "ts": ts,
        "channel": "C1", "event_ts": ts, "team": TEAM,
    }  # fmt: skip


def interrupted_runs() -> float:
    return metrics.sample("baton_runs_total", {"outcome": "interrupted"})


async def hang_forever(request: RecordedRequest) -> Reply:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_an_event_while_draining_gets_503_and_starts_nothing(harness: SlackHarness) -> None:
    harness.surface.turns.accepting = False  # SIGTERM
    event = mention_event(harness, "a question during the deploy")
    response = await harness.send_event(event, event_id="EvDrain")
    assert response.status == 503
    assert response.headers["Retry-After"]
    async with harness.http.get(f"{harness.url}/healthz") as health:
        assert health.status == 503
        assert (await health.json())["shutting_down"] is True
    # A request Slack did not sign is refused as always, not told to come back.
    body = json.dumps({"type": "event_callback", "event": event})
    async with harness.http.post(
        f"{harness.url}/slack/events", data=body,
        headers={"Content-Type": "application/json", **sign(body, secret="wrong")},
    ) as unsigned:  # fmt: skip
        assert unsigned.status == 401
    # Commands and clicks are still answered (they concern work already going on).
    assert await harness.command("") == 200
    await asyncio.sleep(0.3)
    assert harness.llm.requests == []
    assert harness.bot_texts("C1", event["ts"]) == []
    assert not harness.surface.turns.runs

    # Nothing was claimed: Slack's retry, at a replica that takes work, starts the run.
    harness.surface.turns.accepting = True
    harness.llm.script(Reply(text="Answered by the next replica."))
    assert (await harness.send_event(event, event_id="EvDrain", retry=1)).status == 200
    await until(
        lambda: "Answered by the next replica." in json.dumps(harness.thread("C1", event["ts"]))
    )


async def test_a_run_that_finishes_within_the_grace_lands_its_answer(
    harness: SlackHarness,
) -> None:
    harness.llm.script(Reply(text="Finished while Baton was stopping.", delay=0.5))
    ts = await harness.mention("finish this")
    await until(lambda: len(harness.llm.requests) == 1)
    started = time.monotonic()
    await harness.surface.stop(10)
    assert time.monotonic() - started < 5  # it waits for the run, not for the whole grace
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "Finished while Baton was stopping." in thread
    assert "✓ Done" in thread and INTERRUPTED not in thread and "Cancelled" not in thread


async def test_a_run_still_going_after_the_grace_ends_interrupted_not_cancelled(
    harness: SlackHarness,
) -> None:
    harness.llm.responder = hang_forever
    before = interrupted_runs()
    ts = await harness.mention("this will take forever")
    await until(lambda: len(harness.llm.requests) == 1)
    await until(lambda: "Cancel" in json.dumps(harness.thread("C1", ts)))
    started = time.monotonic()
    await harness.surface.stop(0.5)
    assert time.monotonic() - started < 5
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert f"✗ {INTERRUPTED}: Retry runs it again" in thread
    assert "baton_retry_run" in thread
    assert "Cancelled" not in thread
    assert interrupted_runs() == before + 1
    assert not harness.surface.turns.runs
    # The run's record is closed: no other replica will take it for an orphan.
    assert await harness.surface.turns.run_store.orphans(alive=set()) == []


async def test_a_foreground_child_cut_by_shutdown_is_interrupted_not_cancelled(
    harness: SlackHarness,
) -> None:
    async def respond(request: RecordedRequest) -> Reply:
        if is_main(request):
            return task_call("look at everything", background=False)
        return await hang_forever(request)

    harness.llm.responder = respond
    await harness.mention("delegate and wait")
    await until(lambda: harness.baton.tracker.is_running_here("task-explore-1"))
    await harness.surface.stop(0.5)
    detail = await harness.baton.tracker.get("task-explore-1")
    assert detail is not None
    assert detail.task.state == "failed" and detail.task.error == RESTART_REASON


async def test_a_background_task_finishes_within_the_grace(harness: SlackHarness) -> None:
    release = asyncio.Event()
    main = [task_call("count the TODOs", background=True), Reply(text="Started it.")]

    async def respond(request: RecordedRequest) -> Reply:
        if is_main(request):
            return main.pop(0)
        await release.wait()
        return Reply(text="There are 3 TODOs.")

    harness.llm.responder = respond
    ts = await harness.mention("count TODOs in the background")
    await until(lambda: "Started it." in json.dumps(harness.thread("C1", ts)))
    assert harness.baton.tracker.is_running_here("task-explore-1")
    asyncio.get_running_loop().call_later(0.5, release.set)
    await harness.surface.stop(10)
    detail = await harness.baton.tracker.get("task-explore-1")
    assert detail is not None and detail.task.state == "completed"
    await until(lambda: "There are 3 TODOs" in json.dumps(harness.thread("C1", ts)))


async def test_a_background_task_still_going_after_the_grace_ends_interrupted(
    harness: SlackHarness,
) -> None:
    main = [task_call("count the TODOs", background=True), Reply(text="Started it.")]

    async def respond(request: RecordedRequest) -> Reply:
        if is_main(request):
            return main.pop(0)
        return await hang_forever(request)

    harness.llm.responder = respond
    ts = await harness.mention("count TODOs in the background")
    await until(lambda: "Started it." in json.dumps(harness.thread("C1", ts)))
    started = time.monotonic()
    await harness.surface.stop(0.5)
    assert time.monotonic() - started < 5
    assert not harness.baton.tracker.is_running_here("task-explore-1")
    detail = await harness.baton.tracker.get("task-explore-1")
    assert detail is not None
    assert detail.task.state == "failed" and detail.task.error == RESTART_REASON
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "interrupted by a restart" in thread  # the thread is told, as after a crash
    assert "ancelled" not in thread


async def test_an_approval_click_during_the_grace_lets_the_run_finish(
    harness: SlackHarness,
) -> None:
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "touch drained.txt"}, id="c")]),
        Reply(text="Done with the command."),
    )
    ts = await harness.mention("please run it")
    await until(lambda: harness.find_button("C1", ts, "baton_approve") is not None)
    found = harness.find_button("C1", ts, "baton_approve")
    assert found is not None
    stopping = asyncio.create_task(harness.surface.stop(10))
    await until(lambda: not harness.surface.turns.accepting)
    status = await harness.click(
        "baton_approve", found["button"]["value"], user=ALICE, message_ts=found["message"]["ts"]
    )
    assert status == 200
    await asyncio.wait_for(stopping, 8)
    assert (harness.baton.workspace.root / "drained.txt").exists()
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "Done with the command." in thread and INTERRUPTED not in thread


async def test_sigterm_drains_answers_503_and_exits_0(tmp_path: Path) -> None:
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.responder = hang_forever
        env = environment(tmp_path, slack, llm.url, BATON_SHUTDOWN_GRACE_S="2")
        base = f"http://127.0.0.1:{env['PORT']}"
        process = await start_bot(tmp_path, env)
        try:
            async with aiohttp.ClientSession() as http:
                await wait_until_healthy(http, base, process)

                async def post_mention(ts: str) -> int:
                    text = f"<@{BOT}> a long job"
                    slack.add_message("C1", text, ALICE, ts=ts)
                    body = json.dumps({
                        "type": "event_callback", "team_id": TEAM, "event_id": f"Ev{ts}",
                        "event": {"type": "app_mention", "user": ALICE, "text": text,
                                  "ts": ts, "channel": "C1", "event_ts": ts},
                    })  # fmt: skip
                    headers = {"Content-Type": "application/json", **sign(body)}
                    async with http.post(f"{base}/slack/events", data=body, headers=headers) as r:
                        return r.status

                ts = next_ts()
                assert await post_mention(ts) == 200
                await until(lambda: len(llm.requests) == 1)
                process.send_signal(signal.SIGTERM)
                stopped_at = time.monotonic()
                async with asyncio.timeout(5):
                    while True:  # until the signal is handled
                        async with http.get(f"{base}/healthz") as health:
                            if health.status == 503:
                                assert (await health.json())["shutting_down"] is True
                                break
                        await asyncio.sleep(0.05)
                refused = await post_mention(next_ts())
            code = await asyncio.wait_for(process.wait(), 20)
            took = time.monotonic() - stopped_at
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        stderr = (await process.stderr.read()).decode()  # type: ignore[union-attr]
    assert code == 0, stderr
    assert 1.5 < took < 10, stderr
    assert refused == 503
    assert len(llm.requests) == 1  # the events refused while draining started nothing
    thread = json.dumps(slack.thread_messages("C1", ts), ensure_ascii=False)
    assert f"✗ {INTERRUPTED}: Retry runs it again" in thread, stderr
    assert "Cancelled" not in thread


def test_the_grace_period_comes_from_baton_yaml_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BATON_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("BATON_SHUTDOWN_GRACE_S", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("BATON_WORKSPACE", str(workspace))
    assert load_settings(cwd=tmp_path).shutdown_grace_s == DEFAULT_SHUTDOWN_GRACE_S
    (tmp_path / "baton.yaml").write_text("shutdown_grace_s: 12\n")
    assert load_settings(cwd=tmp_path).shutdown_grace_s == 12
    monkeypatch.setenv("BATON_SHUTDOWN_GRACE_S", "3.5")
    assert load_settings(cwd=tmp_path).shutdown_grace_s == 3.5
    monkeypatch.setenv("BATON_SHUTDOWN_GRACE_S", "0")
    with pytest.raises(ConfigError, match="BATON_SHUTDOWN_GRACE_S"):
        load_settings(cwd=tmp_path)
    monkeypatch.delenv("BATON_SHUTDOWN_GRACE_S")
    (tmp_path / "baton.yaml").write_text("shutdown_grace_s: -1\n")
    with pytest.raises(ConfigError, match="shutdown_grace_s"):
        load_settings(cwd=tmp_path)


@pytest.fixture
async def capped(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """One run per person at a time: a second mention of Alice's waits in the queue."""
    async for value in start_harness(tmp_path, limits=LimitsConfig(runs_per_user=1)):
        yield value


async def test_a_run_still_queued_at_shutdown_is_handed_to_the_next_process(
    capped: SlackHarness,
) -> None:
    """Queued behind the caps, it had done nothing: it does not wait out the grace, nor
    end interrupted. Its question waits again, and the next process (a replica, or this
    service restarted) answers it, without anyone asking twice."""
    harness = capped
    release = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        if "FIRST JOB" in json.dumps(request.messages):
            await release.wait()
            return Reply(text="FIRST ANSWER")
        return Reply(text="SECOND ANSWER")

    harness.llm.responder = respond
    first = await harness.mention("FIRST JOB")
    await until(lambda: len(harness.llm.requests) == 1)
    second = await harness.mention("SECOND JOB")
    await until(lambda: "Queued" in json.dumps(
        [c.params for c in harness.slack.calls_to("chat.update")]
        + harness.thread("C1", second)))  # fmt: skip
    stopping = asyncio.create_task(harness.surface.stop(10))
    await until(lambda: "Not started here" in json.dumps(
        [c.params for c in harness.slack.calls_to("chat.update")], ensure_ascii=False,
    ))  # fmt: skip
    assert not stopping.done()  # the first run still finishes within the grace
    release.set()
    await stopping
    assert "FIRST ANSWER" in json.dumps(harness.thread("C1", first))
    assert len(harness.llm.requests) == 1  # the second never reached the model here
    # The next process on the same database takes the waiting question.
    nxt = await build_baton(harness.baton.settings)
    surface = SlackSurface(slack_parts(nxt), approval_poll_s=0.05)
    await surface.start()
    try:
        await until(lambda: "SECOND ANSWER" in json.dumps(harness.thread("C1", second)))
        asked = [r for r in harness.llm.requests if "SECOND JOB" in json.dumps(r.messages)]
        assert len(asked) == 1
        thread = json.dumps(harness.thread("C1", second), ensure_ascii=False)
        assert "Cancelled" not in thread and "Interrupted" not in thread
    finally:
        await surface.stop(5)
        await nxt.close()
