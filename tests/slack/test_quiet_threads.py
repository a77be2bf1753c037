"""Quiet threads: people talk to each other in a thread while Baton works, and after.

During a run, replies steer it and get a reaction (no "Got it" messages); a reply that
mentions someone else and not Baton is talk between people. After a run, only a
message that mentions Baton starts another. A DM is one continuing conversation,
until someone asks to start fresh.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.fakes.openai_api import RecordedRequest, Reply
from tests.slack.harness import ALICE, BOB, BOT, SlackHarness, next_ts, until


async def reply_in_thread(harness: SlackHarness, ts: str, text: str, *, user: str = BOB) -> str:
    """A plain thread reply (a `message` event, no app_mention); its ts."""
    reply_ts = next_ts()
    harness.slack.add_message("C1", text, user, ts=reply_ts, thread_ts=ts)
    event = {"type": "message", "channel_type": "channel", "channel": "C1", "user": user,
             "text": text, "ts": reply_ts, "thread_ts": ts, "event_ts": reply_ts,
             "team": "T0001"}  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    return reply_ts


async def dm(harness: SlackHarness, text: str, *, thread_ts: str | None = None) -> str:
    ts = next_ts()
    harness.slack.add_message("D1", text, ALICE, ts=ts, thread_ts=thread_ts)
    event: dict[str, Any] = {"type": "message", "channel_type": "im", "channel": "D1",
                             "user": ALICE, "text": text, "ts": ts, "event_ts": ts,
                             "team": "T0001"}  # fmt: skip
    if thread_ts:
        event["thread_ts"] = thread_ts
    assert (await harness.send_event(event)).status == 200
    return ts


def sent_to_model(harness: SlackHarness) -> str:
    return json.dumps([r.messages for r in harness.llm.requests])


async def test_talk_between_people_during_a_run_is_not_steering(harness: SlackHarness) -> None:
    first_call = asyncio.Event()
    go_on = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        first_call.set()
        await go_on.wait()
        return Reply(text="Reviewed.")

    harness.llm.responder = respond
    ts = await harness.mention("review the change")
    await asyncio.wait_for(first_call.wait(), 10)
    aside = await reply_in_thread(harness, ts, f"<@{ALICE}> lunch after this?")
    await harness.surface.turns.idle(runs=False)  # whatever it started is over
    go_on.set()
    await harness.settle()
    assert ("C1", aside) not in harness.slack.reactions
    assert "lunch after this" not in sent_to_model(harness)
    assert len(harness.llm.requests) == 1


async def test_after_a_run_only_a_mention_starts_another(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Done with the review."))
    ts = await harness.mention("review the change")
    await harness.settle()
    await reply_in_thread(harness, ts, "nice, thanks!")
    await harness.settle()
    assert len(harness.llm.requests) == 1
    harness.llm.script(Reply(text="Here is more."))
    await harness.mention("and the tests?", thread_ts=ts)
    await harness.settle()
    assert len(harness.llm.requests) == 2


async def test_during_an_agent_run_only_what_asks_baton_waits_for_it(
    harness: SlackHarness,
) -> None:
    started = asyncio.Event()
    go_on = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        if str(request.messages[0]["content"]).startswith("You are Baton"):
            return Reply(text="About the tests: they pass.")
        started.set()
        await go_on.wait()
        return Reply(text="explore: found 3 files.")

    harness.llm.responder = respond
    ts = await harness.mention("@explore how many files are there?")
    await asyncio.wait_for(started.wait(), 10)
    chatter = await reply_in_thread(harness, ts, "cool, curious what it finds")
    asked = await reply_in_thread(harness, ts, f"<@{BOT}> and do the tests pass?")
    await until(lambda: harness.slack.reactions.get(("C1", asked)) == ["eyes"])
    go_on.set()
    await harness.settle()
    assert ("C1", chatter) not in harness.slack.reactions
    main = harness.main_requests()
    assert len(main) == 1  # the question that asked Baton, answered after the agent
    assert "do the tests pass" in json.dumps(main[0].messages)
    assert "curious what it finds" not in sent_to_model(harness)


async def test_a_dm_is_one_conversation_until_someone_starts_fresh(
    harness: SlackHarness,
) -> None:
    harness.llm.script(Reply(text="Noted: the deploy is on Friday."))
    await dm(harness, "remember: the deploy is on Friday")
    await harness.settle()
    harness.llm.script(Reply(text="On Friday."))
    await dm(harness, "when is the deploy?")  # a new top-level message
    await harness.settle()
    assert "the deploy is on Friday" in json.dumps(harness.llm.requests[-1].messages)

    fresh = await dm(harness, "new")
    await harness.settle()
    assert len(harness.llm.requests) == 2  # starting fresh calls no model
    assert "Starting fresh" in json.dumps(harness.slack.thread_messages("D1", fresh))
    harness.llm.script(Reply(text="I don't know yet."))
    await dm(harness, "when is the deploy?")
    await harness.settle()
    assert "the deploy is on Friday" not in json.dumps(harness.llm.requests[-1].messages)
