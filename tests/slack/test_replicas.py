"""Runs are in the database: another replica can cancel them, and a restart closes them."""

from __future__ import annotations

import asyncio
import json

from sqlalchemy import delete
from sqlmodel import col

from bot.store.models import InstanceRow
from bot.store.runs import RunStore
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
    [run_id] = list(harness.surface.turns.runs)
    # Replica B got the click; all it can do is write the request.
    assert await harness.surface.turns.run_store.request_cancel(run_id, by=ALICE)
    await until(lambda: not harness.surface.turns.runs)
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
    await harness.surface.turns.run_store.start(
        run_id="deadbeef", owner="a-process-that-died", session_id=session.id,
        channel_id="C1", thread_ts="5.5", user_id=ALICE,
    )  # fmt: skip
    await harness.surface.turns.run_store.set_progress("deadbeef", progress_ts)
    await harness.surface.tidy()  # what every start-up (and the periodic sweep) does
    message = harness.slack.get_message("C1", progress_ts)
    assert message is not None
    assert "Interrupted by a restart" in json.dumps(message["blocks"], ensure_ascii=False)
    record = await harness.surface.turns.run_store.get("deadbeef")
    assert record is not None and record.state == "finished"


async def test_a_run_closed_by_others_while_this_process_stalled_stops_here(
    harness: SlackHarness,
) -> None:
    """Taken for dead (its heartbeat row gone, its run closed by another replica), the
    process learns it on its next heartbeat and stops the run: it never runs twice."""
    release = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        await release.wait()
        return Reply(text="too late")

    harness.llm.responder = respond
    ts = await harness.mention("a long question")
    await until(lambda: len(harness.llm.requests) == 1)
    (run_id,) = harness.surface.turns.runs
    # What another replica does to a dead one's work: drop its row, close its run.
    async with harness.baton.database.sessions() as session:
        await session.exec(
            delete(InstanceRow).where(col(InstanceRow.id) == harness.baton.instances.id)
        )
        await session.commit()
    await RunStore(harness.baton.database).finish(run_id)
    assert await harness.baton.instances.beat() is False  # it was lost: re-registered
    await until(lambda: not harness.surface.turns.runs)
    release.set()
    await harness.settle()
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "Interrupted by a restart" in thread
    assert "Cancelled" not in thread and "too late" not in thread
