"""What a run costs of Slack's per-workspace limits, and what people still see.

`chat.update` and `assistant.threads.setStatus` are Tier 3: about 50 calls a minute
for the whole deployment. A run that answers before people wait on it calls neither:
its answer is its one message and says how it ended. A run that works longer shows
a progress message with Cancel and the thread's status, and its progress message's
last write takes Slack's spare capacity when the answer already says the end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.config import LimitsConfig
from bot.slack.blocks import CANCEL_RUN, FEEDBACK_ACTION
from bot.slack.rate_budget import Priority, RateBudget
from tests.fakes.openai_api import Reply, ToolCallSpec
from tests.slack.harness import ALICE, BOB, SlackHarness, start_harness, until

TIER_3 = ("chat.update", "assistant.threads.setStatus", "chat.delete", "reactions.add")


@pytest.fixture
async def patient(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """Runs reveal their progress only after 30 s: every run here is quicker."""
    async for value in start_harness(tmp_path, reveal_after_s=30.0):
        yield value


@pytest.fixture
async def eager(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """Runs reveal their progress after 50 ms: a model that takes a second is "long"."""
    async for value in start_harness(tmp_path, reveal_after_s=0.05):
        yield value


def tier_3_calls(harness: SlackHarness) -> dict[str, int]:
    return {m: n for m in TIER_3 if (n := len(harness.slack.calls_to(m)))}


def bot_messages(harness: SlackHarness, ts: str) -> list[dict]:
    return [m for m in harness.thread("C1", ts)[1:] if m.get("bot_id") or m.get("user") != ALICE]


async def test_a_quick_run_is_one_message_that_says_how_it_ended(patient: SlackHarness) -> None:
    patient.llm.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {"path": "."})]),
        Reply(text="All is well."),
    )
    ts = await patient.mention("look around")
    await patient.settle()
    assert tier_3_calls(patient) == {}
    (answer,) = bot_messages(patient, ts)
    shown = answer.get("text", "") + json.dumps(answer.get("blocks"), ensure_ascii=False)
    assert "All is well." in shown
    assert "✓ Done · 2 turns" in shown  # the final state, in words, beneath the answer
    assert FEEDBACK_ACTION in shown
    assert CANCEL_RUN not in shown  # no progress message was ever posted
    assert patient.slack.assistant_statuses == []


async def test_fifty_quick_runs_cost_no_tier_3_call(patient: SlackHarness) -> None:
    patient.llm.script(*[Reply(text=f"answer {n}") for n in range(50)])
    for n in range(50):
        await patient.mention(f"question {n}", user=ALICE if n % 2 else BOB)
    await patient.settle()
    answered = [m for m in patient.slack.channel_messages("C1") if "answer " in str(m)]
    assert len(answered) == 50
    assert tier_3_calls(patient) == {}


async def test_a_long_run_shows_progress_with_cancel_and_the_status(eager: SlackHarness) -> None:
    eager.llm.script(Reply(text="Took a while.", delay=1.0))
    ts = await eager.mention("think hard")
    await until(lambda: eager.find_button("C1", ts, CANCEL_RUN) is not None)
    await until(lambda: bool(eager.slack.assistant_statuses))
    await eager.settle()
    statuses = [s.status for s in eager.slack.assistant_statuses if s.thread_ts == ts]
    # Set once; the answer, a message posted after it, clears it (no second call).
    assert statuses == ["is working…"]
    assert eager.find_button("C1", ts, CANCEL_RUN) is None  # the end replaced Cancel
    texts = json.dumps([m.get("blocks") for m in eager.thread("C1", ts)], ensure_ascii=False)
    assert texts.count("✓ Done · 1 turn") == 2  # in the progress message and under the answer
    assert len(eager.slack.calls_to("chat.update")) <= 2  # progress lines (spare) and the end


async def test_cancel_is_reachable_while_a_long_run_works(eager: SlackHarness) -> None:
    eager.llm.script(Reply(text="never shown", delay=30.0))
    ts = await eager.mention("work forever")
    await until(lambda: eager.find_button("C1", ts, CANCEL_RUN) is not None)
    # The status follows the progress message: click once both show.
    await until(lambda: any(s.thread_ts == ts for s in eager.slack.assistant_statuses))
    found = eager.find_button("C1", ts, CANCEL_RUN)
    assert found is not None
    assert await eager.click(CANCEL_RUN, found["button"]["value"], user=ALICE) == 200
    await eager.settle()
    progress = eager.slack.get_message("C1", found["message"]["ts"])
    assert progress is not None
    assert f"⊘ Cancelled by <@{ALICE}>" in json.dumps(progress["blocks"], ensure_ascii=False)
    # The status was set while it worked, and nothing Baton posted after it cleared it.
    statuses = [s.status for s in eager.slack.assistant_statuses if s.thread_ts == ts]
    assert statuses == ["is working…", ""]


async def test_a_run_cancelled_before_it_showed_anything_says_so(patient: SlackHarness) -> None:
    patient.llm.script(Reply(text="never shown", delay=30.0))
    ts = await patient.mention("work forever")
    await until(lambda: bool(patient.surface.turns.runs) and bool(patient.llm.requests))
    (run_id,) = patient.surface.turns.runs
    await patient.surface.turns.cancel(run_id, by=BOB)
    await patient.settle()
    (said,) = bot_messages(patient, ts)
    assert f"⊘ Cancelled by <@{BOB}>" in json.dumps(said, ensure_ascii=False)
    assert CANCEL_RUN not in json.dumps(said)
    assert tier_3_calls(patient) == {}


@pytest.fixture
async def one_slot(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """One run at a time for the deployment; progress shows after 50 ms."""
    limits = LimitsConfig(runs=1, runs_per_user=0)
    async for value in start_harness(tmp_path, reveal_after_s=0.05, limits=limits):
        yield value


async def test_a_run_queued_past_the_reveal_shows_its_place(one_slot: SlackHarness) -> None:
    one_slot.llm.script(Reply(text="first", delay=1.0), Reply(text="second"))
    await one_slot.mention("one", user=ALICE)
    second = await one_slot.mention("two", user=BOB)
    await until(lambda: "Queued" in json.dumps(one_slot.thread("C1", second), ensure_ascii=False))
    await one_slot.settle()
    assert "second" in json.dumps(one_slot.thread("C1", second), ensure_ascii=False)
    assert one_slot.find_button("C1", second, CANCEL_RUN) is None


async def test_a_freed_slot_starts_the_next_run_before_the_last_run_is_shown_ended(
    one_slot: SlackHarness,
) -> None:
    """The next queued run's model call comes while the previous run's last Slack write
    still waits: the slot of `limits` is free as soon as the work is over."""
    one_slot.llm.script(Reply(text="first", delay=0.5), Reply(text="second"))
    # Slack answers chat.update slowly: the first run's last progress write waits.
    one_slot.slack.set_latency("chat.update", 2.0)
    first = await one_slot.mention("one", user=ALICE)
    await until(lambda: one_slot.find_button("C1", first, CANCEL_RUN) is not None)
    await one_slot.mention("two", user=BOB)
    await until(lambda: len(one_slot.llm.requests) == 2)
    # The second run's model call came while the first still showed Cancel.
    assert one_slot.find_button("C1", first, CANCEL_RUN) is not None
    one_slot.slack.set_latency("chat.update", 0)
    await one_slot.settle()
    assert one_slot.find_button("C1", first, CANCEL_RUN) is None


async def test_a_progress_post_still_waiting_for_the_channel_is_dropped_when_the_run_ends(
    tmp_path: Path,
) -> None:
    """Answers go first in a busy channel: a run whose progress message is still waiting
    for the channel's next slot when its answer is ready never posts it."""
    async for harness in start_harness(tmp_path, rate_budget=RateBudget(), reveal_after_s=0.05):
        budget = harness.surface.budget
        # Others' answers hold the channel's next few seconds.
        held = [
            asyncio.create_task(budget.acquire("chat.postMessage", "C1", Priority.URGENT))
            for _ in range(4)
        ]
        await asyncio.sleep(0)
        harness.llm.script(Reply(text="Quick enough.", delay=0.3))
        ts = await harness.mention("a question in a busy channel")
        await harness.settle()
        await asyncio.gather(*held)
        posted = [c.params for c in harness.slack.calls_to("chat.postMessage")]
        assert not any(CANCEL_RUN in json.dumps(p) for p in posted), posted
        assert "Quick enough." in json.dumps(harness.thread("C1", ts), ensure_ascii=False)


async def test_a_slot_is_free_while_the_runs_answer_waits_for_its_channel(
    tmp_path: Path,
) -> None:
    """`limits.runs` counts work, not a wait for Slack: a run whose answer waits for a
    busy channel lets the next queued run (in a quiet channel) start its model call."""
    limits = LimitsConfig(runs=1, runs_per_user=0)
    async for harness in start_harness(
        tmp_path, rate_budget=RateBudget(), reveal_after_s=30.0, limits=limits
    ):
        budget = harness.surface.budget
        held = [
            asyncio.create_task(budget.acquire("chat.postMessage", "C1", Priority.URGENT))
            for _ in range(5)
        ]
        await asyncio.sleep(0)
        # Each run's own answer, whichever of the two takes the one slot first.
        harness.llm.responder = lambda request: Reply(
            text="FIRST-ANSWER" if "busy channel" in json.dumps(request.messages) else "SECOND"
        )
        first = await harness.mention("first, in a busy channel", user=ALICE)
        await harness.mention("second, elsewhere", user=BOB, channel="C2")
        await until(lambda h=harness: len(h.llm.requests) == 2, within=8)  # type: ignore[misc]
        # The second run's model was asked while the first's answer still waited.
        assert "FIRST-ANSWER" not in json.dumps(harness.thread("C1", first))
        await asyncio.gather(*held)
        await harness.settle()
        assert "FIRST-ANSWER" in json.dumps(harness.thread("C1", first))
