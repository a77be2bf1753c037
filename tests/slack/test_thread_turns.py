"""One turn per thread, questions kept from the moment Slack delivers them, and Retry.

What another replica does is done here through the database as that replica would:
its rows (a run it owns, a message it took, a lease it holds) under an instance id
that is alive or gone. Real multi-process proofs are in tests/replicas/.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from bot.slack.blocks import RETRY_RUN
from bot.store import SessionKey
from bot.store.runs import FINISHED
from bot.store.thread_inbox import DONE, INTERRUPTED, OFFERED, PENDING, RETRIED, TAKEN, Inbound
from tests.databases import fresh_postgres
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.slack.harness import (
    ALICE,
    BOB,
    BOT,
    TEAM,
    SlackHarness,
    next_ts,
    start_harness,
    until,
)

GONE = "replica-that-died"


def thread_key(thread_ts: str, channel: str = "C1") -> SessionKey:
    return SessionKey.slack_thread(team_id=TEAM, channel_id=channel, thread_ts=thread_ts)


def mention_event(text: str, *, ts: str, thread_ts: str | None = None) -> dict[str, Any]:
    event = {
        "type": "app_mention", "user": ALICE, "text": f"<@{BOT}> {text}", "ts": ts,
        "channel": "C1", "event_ts": ts, "team": TEAM,
    }  # fmt: skip
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def user_texts(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m["role"] == "user"]


async def interrupted_run(harness: SlackHarness, question: str, *, progress: bool) -> str:
    """A run that a replica now gone was running: its run row, the question it took, and
    (with `progress`) its progress message. Returns the run id."""
    ts = next_ts()
    harness.slack.add_message("C1", f"<@{BOT}> {question}", ALICE, ts=ts)
    key = thread_key(ts)
    threads = harness.surface.turns
    session = await harness.baton.conversations.store.get_or_create(key)
    run_id = f"dead{ts.replace('.', '')[-8:]}"
    await threads.run_store.start(
        run_id=run_id, owner=GONE, session_id=session.id, channel_id="C1", thread_ts=ts,
        user_id=ALICE,
    )  # fmt: skip
    await threads.inbox.receive(
        Inbound(
            session_key=key.key,
            channel_id="C1",
            thread_ts=ts,
            ts=ts,
            user_id=ALICE,
            text=f"<@{BOT}> {question}",
            team_id=TEAM,
        ),
        holder=GONE,
        state=TAKEN,
        run_id=run_id,
    )
    if progress:
        posted = await harness.surface.client.chat_postMessage(
            channel="C1", thread_ts=ts, text="Working…"
        )
        await threads.run_store.set_progress(run_id, posted["ts"])
    return run_id


async def test_a_message_is_stored_before_slack_is_answered(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="ANSWER"))
    ts = await harness.mention("what is stored?")
    stored = await harness.surface.turns.inbox.find("C1", ts)
    assert stored is not None and stored.text == f"<@{BOT}> what is stored?"
    await until(lambda: "ANSWER" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    done = await harness.surface.turns.inbox.find("C1", ts)
    assert done is not None and done.state == DONE


async def test_a_database_error_at_intake_is_not_acked_and_the_retry_is_answered(
    harness: SlackHarness,
) -> None:
    """Slack is answered 500 (so it sends the event again) rather than told a message
    was taken that nothing stored; the retry, once the database is back, is answered."""
    ts = next_ts()
    harness.slack.add_message("C1", f"<@{BOT}> are you there?", ALICE, ts=ts)
    event = mention_event("are you there?", ts=ts)
    async with harness.baton.database.sessions() as db:
        await db.exec(text("ALTER TABLE thread_messages RENAME TO thread_messages_away"))  # type: ignore[call-overload]
        await db.commit()
    response = await harness.send_event(event, event_id="EvDbDown")
    assert response.status == 500
    await harness.surface.turns.idle()  # nothing was started
    assert not harness.llm.requests
    async with harness.baton.database.sessions() as db:
        await db.exec(text("ALTER TABLE thread_messages_away RENAME TO thread_messages"))  # type: ignore[call-overload]
        await db.commit()
    harness.llm.script(Reply(text="YES, HERE"))
    response = await harness.send_event(event, event_id="EvDbDown", retry=1)
    assert response.status == 200
    await until(lambda: "YES, HERE" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    assert len(harness.main_requests()) == 1


async def test_a_dead_replicas_run_is_reported_with_retry_and_retry_runs_the_question(
    harness: SlackHarness,
) -> None:
    run_id = await interrupted_run(harness, "QUESTION-ONE", progress=True)
    record = await harness.surface.turns.run_store.get(run_id)
    assert record is not None
    await harness.surface.tidy(prune=False)
    thread = harness.thread("C1", record.thread_ts)
    button = harness.find_button("C1", record.thread_ts, RETRY_RUN)
    assert button is not None and button["button"]["value"] == run_id
    assert "Interrupted by a restart" in json.dumps(thread, ensure_ascii=False)
    # Anyone who may start runs may press it: Bob runs Alice's question.
    harness.llm.script(Reply(text="ANSWER-ONE"))
    assert await harness.click(RETRY_RUN, run_id, user=BOB) == 200
    await until(lambda: "ANSWER-ONE" in " ".join(harness.bot_texts("C1", record.thread_ts)))
    await harness.settle()
    [request] = harness.main_requests()
    asked = [t for t in user_texts(request) if "QUESTION-ONE" in t]
    assert len(asked) == 1 and f"<@{ALICE}>" in asked[0]
    # A second press (or a press on another replica) runs nothing again.
    assert await harness.click(RETRY_RUN, run_id, user=ALICE) == 200
    await until(lambda: any("Nothing to retry" in e["text"] for e in harness.slack.ephemerals))
    await harness.settle()
    assert len(harness.main_requests()) == 1
    states = {m.state for m in await harness.surface.turns.inbox.of_run(
        run_id, states=[RETRIED, INTERRUPTED, OFFERED])}  # fmt: skip
    assert states == {RETRIED}


async def test_a_run_that_died_before_its_progress_message_gets_a_retry_post(
    harness: SlackHarness,
) -> None:
    run_id = await interrupted_run(harness, "QUESTION-TWO", progress=False)
    record = await harness.surface.turns.run_store.get(run_id)
    assert record is not None
    await harness.surface.tidy(prune=False)
    button = harness.find_button("C1", record.thread_ts, RETRY_RUN)
    assert button is not None and button["button"]["value"] == run_id
    # Closing the run again (another replica's sweep, the next tick) posts nothing more.
    before = len(harness.thread("C1", record.thread_ts))
    await harness.surface.tidy(prune=False)
    assert len(harness.thread("C1", record.thread_ts)) == before


async def test_a_redelivered_interrupted_message_offers_retry_once(harness: SlackHarness) -> None:
    run_id = await interrupted_run(harness, "QUESTION-THREE", progress=True)
    record = await harness.surface.turns.run_store.get(run_id)
    assert record is not None
    await harness.surface.tidy(prune=False)
    before = len(harness.thread("C1", record.thread_ts))
    event = mention_event("QUESTION-THREE", ts=record.thread_ts)
    for retry in (1, 2):
        response = await harness.send_event(event, event_id="EvAgain", retry=retry)
        assert response.status == 200
    await until(lambda: len(harness.thread("C1", record.thread_ts)) == before + 1)
    await harness.settle()
    thread = harness.thread("C1", record.thread_ts)
    assert len(thread) == before + 1  # one offer, not one per redelivery
    assert RETRY_RUN in json.dumps(thread[-1])
    assert not harness.llm.requests  # offered, not re-run unasked


async def test_retry_is_refused_in_another_channel_and_for_unknown_runs(
    harness: SlackHarness,
) -> None:
    run_id = await interrupted_run(harness, "QUESTION-FOUR", progress=True)
    await harness.surface.tidy(prune=False)
    # The button's value carried into another channel retries nothing.
    assert await harness.click(RETRY_RUN, run_id, user=BOB, channel="C2") == 200
    assert await harness.click(RETRY_RUN, "no-such-run", user=BOB) == 200
    assert await harness.click(RETRY_RUN, "'; DROP TABLE runs; --", user=BOB) == 200
    await until(lambda: len(harness.slack.ephemerals) >= 3)
    await harness.settle()
    assert not harness.llm.requests
    assert all("no such run" in e["text"] for e in harness.slack.ephemerals)
    assert await harness.surface.turns.run_store.get(run_id) is not None


async def test_a_dead_receivers_unread_message_is_answered(harness: SlackHarness) -> None:
    """Stored (Slack was answered) by a replica that died before looking at it."""
    ts = next_ts()
    harness.slack.add_message("C1", f"<@{BOT}> ORPHANED QUESTION", ALICE, ts=ts)
    await harness.surface.turns.inbox.receive(
        Inbound(
            session_key=thread_key(ts).key,
            channel_id="C1",
            thread_ts=ts,
            ts=ts,
            user_id=ALICE,
            text=f"<@{BOT}> ORPHANED QUESTION",
            team_id=TEAM,
        ),
        holder=GONE,
    )
    harness.llm.script(Reply(text="ANSWERED AFTER ALL"))
    await harness.surface.tidy(prune=False)
    await until(lambda: "ANSWERED AFTER ALL" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    assert len(harness.main_requests()) == 1


async def test_questions_waiting_on_a_dead_lease_run_in_slacks_order(
    harness: SlackHarness,
) -> None:
    """A replica died holding a thread's lease with two questions queued behind its
    turn (stored out of order): they run here, oldest ts first, one turn at a time."""
    root = next_ts()
    harness.slack.add_message("C1", "a thread", ALICE, ts=root)
    key = thread_key(root)
    inbox = harness.surface.turns.inbox
    first, second = next_ts(), next_ts()
    assert await inbox.lease(key.key, owner=GONE, run_id="deadrun", alive=[GONE])
    for ts, label in ((second, "SECOND"), (first, "FIRST")):
        await inbox.receive(
            Inbound(
                session_key=key.key,
                channel_id="C1",
                thread_ts=root,
                ts=ts,
                user_id=ALICE,
                text=f"<@{BOT}> {label}",
                team_id=TEAM,
            ),
            holder=GONE,
            state=PENDING,
        )
    harness.llm.script(Reply(text="ANSWER-FIRST"), Reply(text="ANSWER-SECOND"))
    await harness.surface.tidy(prune=False)
    await until(lambda: "ANSWER-SECOND" in " ".join(harness.bot_texts("C1", root)))
    await harness.settle()
    one, two = harness.main_requests()
    assert "FIRST" in user_texts(one)[-1] and "SECOND" not in " ".join(user_texts(one))
    history = [t for t in user_texts(two) if "FIRST" in t or "SECOND" in t]
    assert len(history) == 2 and "FIRST" in history[0] and "SECOND" in history[1]
    assert any(m.get("content") == "ANSWER-FIRST" for m in two.messages)


async def test_a_reply_stored_by_another_replica_steers_the_running_turn(
    harness: SlackHarness,
) -> None:
    """The message reached another replica, which stored it and signalled: the turn
    running here reads it before its next model call, and acknowledges it."""
    gate = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        if len(harness.llm.requests) == 1:
            await gate.wait()
            return Reply(tool_calls=[])  # no tools: falls through to the inbox check
        return Reply(text="SAW THE REPLY")

    harness.llm.responder = respond
    root = await harness.mention("start working")
    await until(lambda: len(harness.llm.requests) == 1)
    key = thread_key(root)
    reply_ts = next_ts()
    harness.slack.add_message("C1", "REPLY-VIA-B", BOB, ts=reply_ts, thread_ts=root)
    await harness.surface.turns.inbox.receive(
        Inbound(
            session_key=key.key,
            channel_id="C1",
            thread_ts=root,
            ts=reply_ts,
            user_id=BOB,
            text="REPLY-VIA-B",
            team_id=TEAM,
            addressed=False,
        ),
        holder="replica-b",
        state=PENDING,
    )
    await harness.baton.signals.notify("steer", key.key)
    await until(lambda: "eyes" in harness.slack.reactions.get(("C1", reply_ts), []))
    gate.set()
    await until(lambda: "SAW THE REPLY" in " ".join(harness.bot_texts("C1", root)))
    await harness.settle()
    assert "REPLY-VIA-B" in " ".join(user_texts(harness.llm.requests[-1]))
    stored = await harness.surface.turns.inbox.find("C1", reply_ts)
    assert stored is not None and stored.state == DONE


async def test_talk_in_a_thread_another_replica_runs_is_stored_for_it(
    harness: SlackHarness,
) -> None:
    """Talk (no mention) in a thread whose turn a live replica runs is for that turn;
    in a thread nobody runs, or whose holder is gone, it is nobody's business."""
    root = next_ts()
    harness.slack.add_message("C1", "a thread", ALICE, ts=root)
    key = thread_key(root)
    threads = harness.surface.turns
    reply = {"type": "message", "user": BOB, "text": "beside the run", "channel": "C1",
             "thread_ts": root, "team": TEAM}  # fmt: skip
    # Nobody runs the thread: ignored.
    ts1 = next_ts()
    assert await harness.surface.listeners.intake({**reply, "ts": ts1}, team_id=TEAM) is None
    # A replica that is gone holds its lease: still ignored.
    assert await threads.inbox.lease(key.key, owner=GONE, run_id="r-dead", alive=[GONE])
    ts2 = next_ts()
    assert await harness.surface.listeners.intake({**reply, "ts": ts2}, team_id=TEAM) is None
    # This replica (alive) holds it: stored for the run.
    await threads.inbox.release(key.key, "r-dead")
    me = harness.baton.instances.id
    assert await threads.inbox.lease(key.key, owner=me, run_id="r-live", alive=[me])
    ts3 = next_ts()
    stored = await harness.surface.listeners.intake({**reply, "ts": ts3}, team_id=TEAM)
    assert stored is not None and not stored.addressed
    # …but not talk addressed to someone else.
    ts4 = next_ts()
    assert (
        await harness.surface.listeners.intake(
            {**reply, "ts": ts4, "text": "<@UCAROL> what do you think?"}, team_id=TEAM
        )
        is None
    )


async def test_a_reply_handed_to_a_run_as_it_ends_is_the_threads_next_turn(
    harness: SlackHarness,
) -> None:
    """A reply is taken for the running turn, and reading it (its file) takes longer than
    the turn has left: the turn's end waits for it, and it becomes the next turn instead
    of being marked done unread."""
    answer = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        said = user_texts(request)[-1]
        if "first question" in said and "while you were working" not in said:
            await answer.wait()
            return Reply(text="first answer")
        return Reply(text="second answer")

    harness.llm.responder = respond
    ts = await harness.mention("first question")
    await until(lambda: len(harness.llm.requests) == 1)
    notes = harness.slack.add_file("notes.txt", b"The reply's attachment.\n", user=BOB)
    harness.slack.download_gate = asyncio.Event()
    reply_ts = next_ts()
    text = f"<@{BOT}> and the attachment?"
    harness.slack.add_message("C1", text, BOB, ts=reply_ts, thread_ts=ts)
    event = {"type": "app_mention", "user": BOB, "text": text, "ts": reply_ts}
    event |= {"thread_ts": ts, "channel": "C1", "event_ts": reply_ts, "team": TEAM}
    response = await harness.send_event(event | {"files": [notes]})
    assert response.status == 200
    # The reply is taken for the running turn, and its file is being read.
    await until(lambda: harness.slack.downloads_waiting == 1)
    (run_id,) = harness.surface.turns.runs
    answer.set()
    # The turn ends (its record is closed first) while the reply is still being read.
    async with asyncio.timeout(30):
        while (record := await harness.surface.turns.run_store.get(run_id)) is None or (  # noqa: ASYNC110
            record.state != FINISHED
        ):
            await asyncio.sleep(0.01)
    harness.slack.download_gate.set()
    await until(lambda: "second answer" in json.dumps(harness.thread("C1", ts)))
    await harness.settle()
    second = harness.llm.requests[-1]
    assert any("The reply's attachment." in text for text in user_texts(second))
    stored = await harness.surface.turns.inbox.find("C1", reply_ts)
    assert stored is not None and stored.state == DONE


@pytest.fixture
async def pg_harness(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """The harness on a fresh PostgreSQL database, whatever BATON_TEST_DATABASE says."""
    async with fresh_postgres() as url:
        async for harness in start_harness(tmp_path, database_url=url):
            yield harness


async def test_on_postgresql_an_ack_does_not_queue_behind_runs_for_a_connection(
    pg_harness: SlackHarness,
) -> None:
    """In a burst the runs the acks start can hold every pooled connection; the message
    is still stored, and Slack answered, on the intake writer's own connection."""
    harness = pg_harness
    engine = harness.baton.database.engine
    assert harness.baton.database.intake_engine is not engine
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    held = [await engine.connect() for _ in range(pool.size() + pool._max_overflow)]
    ts = next_ts()
    try:
        harness.slack.add_message("C1", f"<@{BOT}> still there?", ALICE, ts=ts)
        harness.llm.script(Reply(text="STILL HERE"))
        # Without a connection of its own the ack would wait for the pool's timeout
        # (30 s), then answer 500.
        async with asyncio.timeout(10):
            response = await harness.send_event(mention_event("still there?", ts=ts))
        assert response.status == 200
    finally:
        # The run it started waits for a connection like any other work, then goes on.
        for connection in held:
            await connection.close()
    await harness.settle()
    assert "STILL HERE" in " ".join(harness.bot_texts("C1", ts))
    done = await harness.surface.turns.inbox.find("C1", ts)
    assert done is not None and done.state == DONE
