"""Runs are in the database: another replica can cancel them, and a restart closes them."""

from __future__ import annotations

import asyncio
import json

from tests.fakes.openai_api import RecordedRequest, Reply
from tests.slack.harness import ALICE, BOT, SlackHarness, until


async def test_a_cancel_taken_by_another_replica_stops_the_run(harness: SlackHarness) -> None:
    started = asyncio.Event()

    async def hang(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="never")

    harness.llm.responder = hang
    ts = await harness.mention("long job")
    await asyncio.wait_for(started.wait(), 10)
    [run_id] = list(harness.surface.threads.runs)
    # Replica B got the click; all it can do is write the request.
    assert await harness.surface.threads.run_store.request_cancel(run_id, by=ALICE)
    await until(lambda: not harness.surface.threads.runs)
    await harness.settle()
    progress = harness.find_button("C1", ts, "baton_cancel_run")
    assert progress is None  # the Cancel button is gone
    rendered = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert f"Cancelled by <@{ALICE}>" in rendered


async def test_a_restart_closes_the_progress_of_runs_it_interrupted(
    harness: SlackHarness,
) -> None:
    from bot.store import SessionKey

    session = await harness.baton.conversations.store.get_or_create(
        SessionKey.slack_thread(team_id="T0001", channel_id="C1", thread_ts="5.5")
    )
    progress_ts = harness.slack.add_message("C1", "Working…", BOT, thread_ts="5.5", bot_id="BBOT")
    await harness.surface.threads.run_store.start(
        run_id="deadbeef", owner="a-process-that-died", session_id=session.id,
        channel_id="C1", thread_ts="5.5", user_id=ALICE,
    )  # fmt: skip
    await harness.surface.threads.run_store.set_progress("deadbeef", progress_ts)
    await harness.surface.tidy()  # what every start-up (and the periodic sweep) does
    message = harness.slack.get_message("C1", progress_ts)
    assert message is not None
    assert "Interrupted by a restart" in json.dumps(message["blocks"], ensure_ascii=False)
    record = await harness.surface.threads.run_store.get("deadbeef")
    assert record is not None and record.state == "finished"
