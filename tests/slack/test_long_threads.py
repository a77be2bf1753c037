"""Long threads and bad provider days, as people in Slack see them.

Rate limits show as waiting in the progress message, folded history as a short note
in the thread, and cut or filtered answers end in words, not "✓ Done".
"""

from __future__ import annotations

import json
from pathlib import Path

from bot import metrics
from bot.engine.loop import CUT_NOTE, FILTERED_NOTE
from bot.sessions.compaction import SUMMARY_PROMPT
from tests.fakes.openai_api import ErrorBurst, ErrorReply, RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import SlackHarness, start_harness


def progress_texts(harness: SlackHarness) -> list[str]:
    return [str(c.params.get("text", "")) for c in harness.slack.calls_to("chat.update")]


async def test_a_rate_limited_model_shows_waiting_and_the_run_goes_on(
    harness: SlackHarness,
) -> None:
    # Long enough for the progress message (updated at most once a second) to show it.
    rate_limited = ErrorReply(status=429, message="Rate limit reached", retry_after=1.5)
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")]),
        ErrorBurst(error=rate_limited, count=1),
        Reply(text="All files listed."),
    )
    ts = await harness.mention("list the files")
    await harness.settle()
    assert any("Waiting for the model (rate limited, retry 1" in t for t in progress_texts(harness))
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "All files listed." in thread and "✓ Done" in thread
    # The tool step before the burst ran once: one list_dir result in the last request.
    last = harness.llm.requests[-1].messages
    assert sum(1 for m in last if m["role"] == "tool") == 1


async def test_a_cut_answer_ends_in_words(harness: SlackHarness) -> None:
    cut_before = metrics.sample("baton_runs_total", {"outcome": "cut"})
    harness.llm.script(*(Reply(text=f"part {n} ", finish_reason="length") for n in range(3)))
    ts = await harness.mention("write a long report")
    await harness.settle()
    assert metrics.sample("baton_runs_total", {"outcome": "cut"}) == cut_before + 1
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "part 0 part 1 part 2" in thread and CUT_NOTE in thread
    assert "✗ Answer cut at the model's output limit" in thread
    assert "✓ Done" not in thread


async def test_a_filtered_answer_is_said_plainly(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Partial", finish_reason="content_filter"))
    ts = await harness.mention("something the filter dislikes")
    await harness.settle()
    thread = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert FILTERED_NOTE in thread
    assert "✗ Stopped by the provider's content filter" in thread


async def test_folded_history_is_a_short_note_in_the_thread(tmp_path: Path) -> None:
    window = 16_000
    # Long answers cannot be trimmed like tool outputs: the thread outgrows the window.
    answer = " ".join(f"finding-{i}: step {i * 7919:x} verified" for i in range(500))
    async for harness in start_harness(tmp_path, context_window=window):
        harness.llm.context_window = window

        def respond(request: RecordedRequest) -> Reply:
            if request.messages[0]["content"] == SUMMARY_PROMPT:
                return Reply(text="Earlier: the deploys were reviewed; every step verified.")
            return Reply(text=f"Review done. {answer}")

        harness.llm.responder = respond
        ts = await harness.mention("review deploy 0")
        await harness.settle()
        for n in range(1, 12):
            await harness.mention(f"review deploy {n}", thread_ts=ts)
            await harness.settle()
        texts = harness.bot_texts("C1", ts)
        notes = [t for t in texts if t.startswith("🗜")]
        assert notes and notes[0].startswith("🗜 To fit the model's context window, I compacted"), (
            notes
        )
        assert all(r.prompt_tokens <= window for r in harness.llm.requests)
        assert sum(t.startswith("Review done.") for t in texts) == 12  # every turn answered
