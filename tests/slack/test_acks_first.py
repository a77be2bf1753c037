"""Acks first: work of messages taken in a burst starts once the burst is answered."""

from __future__ import annotations

import asyncio
import re

import pytest

from bot.slack.acks_first import AcksFirst
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.slack.harness import ALICE, BOT, TEAM, SlackHarness, next_ts, until


async def test_with_no_delivery_being_answered_a_start_goes_at_once() -> None:
    started: list[str] = []
    starts = AcksFirst(started.append)
    starts.defer("a")
    assert started == ["a"]


async def test_starts_wait_for_the_last_answer_then_go_in_order() -> None:
    started: list[str] = []
    starts = AcksFirst(started.append, max_defer_s=3600)
    with starts.answering():
        with starts.answering():
            starts.defer("first")
        assert started == [] and starts.pending == 1  # another is still being answered
        starts.defer("second")
        assert started == []
    assert started == ["first", "second"]
    assert starts.pending == 0 and starts.in_flight == 0


async def test_a_steady_stream_of_deliveries_does_not_starve_the_starts() -> None:
    started = asyncio.Event()
    starts = AcksFirst(lambda item: started.set(), max_defer_s=0.01)
    with starts.answering():  # never answered while the start waits
        starts.defer("held")
        await asyncio.wait_for(started.wait(), 5)
        assert starts.in_flight == 1


async def test_an_answer_that_fails_still_lets_the_starts_go() -> None:
    started: list[str] = []
    starts = AcksFirst(started.append, max_defer_s=3600)
    with pytest.raises(RuntimeError), starts.answering():
        starts.defer("stored before the failure")
        raise RuntimeError("the response could not be written")
    assert started == ["stored before the failure"]


async def test_a_start_that_fails_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started: list[str] = []

    def start(item: str) -> None:
        if item == "bad":
            raise ValueError("no")
        started.append(item)

    starts = AcksFirst(start, max_defer_s=3600)
    with starts.answering():
        for item in ("one", "bad", "two"):
            starts.defer(item)
    assert started == ["one", "two"]
    assert "could not start the work of a message" in caplog.text


def mention(text: str, ts: str, channel: str) -> dict[str, object]:
    return {
        "type": "app_mention", "user": ALICE, "text": f"<@{BOT}> {text}", "ts": ts,
        "channel": channel, "event_ts": ts, "team": TEAM,
    }  # fmt: skip


async def test_a_burst_of_mentions_is_acked_and_every_one_answered_in_its_thread(
    harness: SlackHarness,
) -> None:
    def respond(request: RecordedRequest) -> Reply:
        asked = re.findall(r"question (Q\d+)", str(request.messages[-1]["content"]))
        return Reply(text=f"ANSWER to {asked[-1]}.")

    harness.llm.responder = respond
    sent = []
    for n in range(12):
        channel = f"C{n % 3 + 1}"
        ts = next_ts()
        harness.slack.add_message(channel, f"<@{BOT}> question Q{n}", ALICE, ts=ts)
        sent.append((channel, ts, f"Q{n}"))
    responses = await asyncio.gather(
        *(harness.send_event(mention(f"question {q}", ts, c)) for c, ts, q in sent)
    )
    assert [r.status for r in responses] == [200] * len(sent)
    await until(
        lambda: all(f"ANSWER to {q}." in " ".join(harness.bot_texts(c, ts)) for c, ts, q in sent)
    )
    await harness.settle()
    assert harness.server.starts.pending == 0
    for channel, ts, question in sent:
        answers = " ".join(harness.bot_texts(channel, ts))
        assert f"ANSWER to {question}." in answers
        assert all(f"ANSWER to Q{n}." not in answers for n in range(12) if f"Q{n}" != question)
