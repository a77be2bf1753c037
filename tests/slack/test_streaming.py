"""Answers streamed into the thread as the model writes them, with steps as a timeline.

Against the fake Slack (which speaks chat.startStream / appendStream / stopStream,
expires streams and refuses what Slack refuses) and the fake model (which streams
its answer in chunks, slowly when asked): the first words show before the model is
done, the thread ends with the whole answer exactly once whatever happened to the
stream, and tool steps are tasks of the timeline.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bot.slack.blocks import FEEDBACK_ACTION
from bot.slack.rate_budget import METHOD_LIMITS, Limit, RateBudget
from bot.slack.streaming import STREAM_TEXT_LIMIT
from tests.fakes.openai_api import ErrorReply, Reply, ToolCallSpec
from tests.slack.harness import ALICE, TEAM, SlackHarness, start_harness, until

ANSWER = " ".join(f"word{n}" for n in range(400))


def streams(harness: SlackHarness, channel: str = "C1") -> list[str]:
    """The ts of every streamed message in `channel`, oldest first."""
    return [
        m["ts"]
        for m in harness.slack.channel_messages(channel)
        if harness.slack.stream_state(channel, m["ts"]) is not None
    ]


def visible(harness: SlackHarness, ts: str, channel: str = "C1") -> str:
    """What people see in a thread: each message's blocks, or its text when it has none
    (the text of a message with blocks is only its notification fallback)."""
    seen = []
    for message in harness.thread(channel, ts):
        blocks = json.dumps(message.get("blocks") or "", ensure_ascii=False)
        streamed = harness.slack.stream_state(channel, message["ts"]) == "stopped"
        if streamed and "edited" not in message:
            seen.append(f"{message.get('text', '')}\n{blocks}")  # streamed text, then buttons
        else:
            seen.append(blocks if message.get("blocks") else message.get("text", ""))
    return "\n".join(seen)


def shown(harness: SlackHarness, ts: str) -> str:
    """What the stream message shows now."""
    message = harness.slack.get_message("C1", ts)
    assert message is not None
    return str(message.get("text", ""))


async def test_first_words_show_while_the_model_is_still_writing(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text=ANSWER, chunk_delay=0.01))
    ts = await harness.mention("tell me everything")
    await until(lambda: bool(streams(harness)) and "word0" in shown(harness, streams(harness)[0]))
    # The model has not finished: the end of the answer is not there yet.
    assert "word399" not in shown(harness, streams(harness)[0])
    await harness.settle()
    (stream_ts,) = streams(harness)
    assert harness.slack.stream_state("C1", stream_ts) == "stopped"
    # The whole answer, once, in the streamed message; no other copy in the thread.
    assert shown(harness, stream_ts) == ANSWER
    everything = visible(harness, ts)
    assert everything.count("word399") == 1
    assert len(harness.slack.stream_log("C1", stream_ts)) > 2  # it came in pieces
    start = harness.slack.calls_to("chat.startStream")[0].params
    assert start["recipient_user_id"] == ALICE and start["recipient_team_id"] == TEAM


async def test_the_answer_carries_feedback_buttons(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Short answer."))
    await harness.mention("a question")
    await harness.settle()
    stop = harness.slack.calls_to("chat.stopStream")[-1].params
    assert FEEDBACK_ACTION in json.dumps(stop.get("blocks"))
    (stream_ts,) = streams(harness)
    assert FEEDBACK_ACTION in json.dumps(harness.slack.get_message("C1", stream_ts))


async def test_tool_steps_are_tasks_of_the_timeline(harness: SlackHarness) -> None:
    (harness.baton.workspace.root / "notes.md").write_text("hello")
    harness.llm.script(
        Reply(text="Let me look.", tool_calls=[ToolCallSpec("read_file", {"path": "notes.md"})]),
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "../../etc/passwd"}, id="bad")]),
        Reply(text="The notes say hello."),
    )
    await harness.mention("what do the notes say?")
    await harness.settle()
    (stream_ts,) = streams(harness)
    tasks = harness.slack.stream_tasks("C1", stream_ts)
    assert [t["status"] for t in tasks] == ["complete", "error"]
    assert "read_file" in tasks[0]["title"] and "notes.md" in tasks[0]["title"]
    assert tasks[1]["output"]  # why it failed
    # The text around the steps reads as paragraphs, each said once.
    assert shown(harness, stream_ts) == "Let me look.\n\nThe notes say hello."


async def test_an_expired_stream_falls_back_with_the_whole_text_once(
    harness: SlackHarness,
) -> None:
    harness.llm.script(Reply(text=ANSWER, chunk_delay=0.01))
    ts = await harness.mention("tell me everything")
    await until(lambda: bool(streams(harness)) and "word20 " in shown(harness, streams(harness)[0]))
    (stream_ts,) = streams(harness)
    harness.slack.expire_stream("C1", stream_ts)
    await harness.settle()
    assert harness.slack.stream_state("C1", stream_ts) == "expired"
    message = harness.slack.get_message("C1", stream_ts)
    assert message is not None
    # The same message now holds the whole answer (as a markdown block), once.
    body = json.dumps(message.get("blocks"))
    assert body.count("word0 ") == 1 and "word399" in body
    assert visible(harness, ts).count("word399") == 1
    assert any(c.params.get("ts") == stream_ts for c in harness.slack.calls_to("chat.update"))


async def test_without_streams_the_message_is_updated_in_place(harness: SlackHarness) -> None:
    harness.slack.fail_next("chat.startStream", error="not_allowed_token_type", times=5)
    harness.llm.script(Reply(text=ANSWER, chunk_delay=0.01))
    ts = await harness.mention("tell me everything")
    await harness.settle()
    assert not streams(harness)
    thread = visible(harness, ts)
    assert thread.count("word399") == 1 and thread.count("word0 ") == 1
    assert FEEDBACK_ACTION in thread


async def test_a_retried_model_call_does_not_repeat_what_it_had_written(
    harness: SlackHarness,
) -> None:
    text = "First the draft, then the final words of the answer."
    harness.llm.script(Reply(text=text, drop_after=4, chunk_delay=0.05), Reply(text=text))
    ts = await harness.mention("answer me")
    await harness.settle()
    thread = visible(harness, ts)
    assert thread.count("final words") == 1
    assert thread.count("First the") == 1


async def test_a_long_answer_is_split_as_before_without_repeats(harness: SlackHarness) -> None:
    paragraphs = [f"Paragraph {n}: " + ("lorem ipsum " * 80).strip() for n in range(30)]
    long_answer = "\n\n".join(paragraphs)
    assert len(long_answer) > STREAM_TEXT_LIMIT
    harness.llm.script(Reply(text=long_answer))
    ts = await harness.mention("write a lot")
    await harness.settle()
    thread = visible(harness, ts)
    for n in range(30):
        assert thread.count(f"Paragraph {n}:") == 1, n


async def test_an_agent_run_streams_under_its_header(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Explored: nothing odd."))
    await harness.mention("@explore look around")
    await harness.settle()
    (stream_ts,) = streams(harness)
    text = shown(harness, stream_ts)
    assert text.startswith("*explore* · `") and text.endswith("Explored: nothing odd.")
    assert text.count("Explored") == 1


async def test_the_thread_status_is_set_in_a_channel_thread(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Done thinking.", delay=0.3))
    ts = await harness.mention("think")
    await harness.settle()
    statuses = [s.status for s in harness.slack.assistant_statuses if s.thread_ts == ts]
    # Set while it works; the answer, posted after it, clears it without another call.
    assert statuses == ["is working…"]


async def test_a_cancelled_run_keeps_what_was_streamed(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text=ANSWER, chunk_delay=0.02))
    await harness.mention("tell me everything")
    await until(lambda: bool(streams(harness)) and "word10 " in shown(harness, streams(harness)[0]))
    (run_id,) = harness.surface.turns.runs
    await harness.surface.turns.cancel(run_id, by=ALICE)
    await harness.settle()
    (stream_ts,) = streams(harness)
    assert harness.slack.stream_state("C1", stream_ts) == "stopped"
    assert shown(harness, stream_ts).startswith("word0 word1")


async def test_a_failed_model_call_leaves_no_open_stream(harness: SlackHarness) -> None:
    harness.llm.script(
        Reply(text="Half an ans", drop_after=3),
        *[ErrorReply(status=400, message="bad request") for _ in range(3)],
    )
    ts = await harness.mention("answer")
    await harness.settle()
    for stream_ts in streams(harness):
        assert harness.slack.stream_state("C1", stream_ts) != "streaming"
    assert "bad request" in visible(harness, ts)


@pytest.mark.parametrize("channel", ["D1"])
async def test_a_dm_streams_without_recipient_trouble(tmp_path: Path, channel: str) -> None:
    async for harness in start_harness(tmp_path):
        harness.llm.script(Reply(text="Hello in a DM."))
        ts = "1700000999.000100"
        harness.slack.add_message(channel, "hi", ALICE, ts=ts)
        await harness.send_event(
            {"type": "message", "channel_type": "im", "user": ALICE, "text": "hi", "ts": ts,
             "channel": channel, "event_ts": ts, "team": TEAM}
        )  # fmt: skip
        await harness.settle()
        await asyncio.sleep(0)
        (stream_ts,) = streams(harness, channel)
        message = harness.slack.get_message(channel, stream_ts)
        assert message is not None and message.get("text") == "Hello in a DM."


async def test_appends_that_wait_on_the_budget_never_hold_the_answer_back(
    tmp_path: Path,
) -> None:
    # No room for appends at all: the answer must still end whole, once, at once.
    starved = RateBudget(limits={**METHOD_LIMITS, "chat.appendStream": Limit(0.001, 1)})
    async for harness in start_harness(tmp_path, rate_budget=starved):
        # Writing takes ~4 s: well past the stream's start, which waits for the channel's
        # next slot (about a second after the progress message, later on a loaded
        # machine). An answer done before it is posted whole, with no stream at all.
        harness.llm.script(Reply(text=ANSWER, chunk_delay=0.01))
        ts = await harness.mention("tell me everything")
        await harness.settle()
        (stream_ts,) = streams(harness)
        assert harness.slack.stream_state("C1", stream_ts) == "stopped"
        assert shown(harness, stream_ts) == ANSWER
        assert visible(harness, ts).count("word399") == 1
        assert len(harness.slack.calls_to("chat.appendStream")) <= 1


async def test_when_slack_is_busy_the_answer_comes_whole_in_one_message(tmp_path: Path) -> None:
    # No stream can start (its Tier 2 budget is spent): no live updates either, which
    # would only add to a busy Slack; the answer is posted once it is done.
    busy = RateBudget(limits={**METHOD_LIMITS, "chat.startStream": Limit(0.001, 1)})
    await busy.acquire("chat.startStream", None)
    async for harness in start_harness(tmp_path, rate_budget=busy):
        harness.llm.script(Reply(text=ANSWER, chunk_delay=0.002))
        ts = await harness.mention("tell me everything")
        await harness.settle()
        assert not streams(harness)
        answers = [
            c for c in harness.slack.calls_to("chat.postMessage") if "word0" in str(c.params)
        ]
        assert len(answers) == 1
        assert not any("word0" in str(c.params) for c in harness.slack.calls_to("chat.update"))
        assert visible(harness, ts).count("word399") == 1
        assert FEEDBACK_ACTION in visible(harness, ts)
