"""Attacks on access, approvals, queues and budgets, through the real Bolt app.

Each test plays someone who should not get what they try for (an outsider, a guest,
a member who is no approver, a flooder) and checks what they got.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import LimitsConfig
from bot.slack.approval_views import SHOW_ARGUMENTS
from bot.slack.blocks import CANCEL_RUN
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec, Usage
from tests.slack.harness import ALICE, BOB, BOT, TEAM, SlackHarness, next_ts, start_harness, until

STRANGER = "USTRANGER"


@contextlib.asynccontextmanager
async def harness_with(tmp_path: Path, **overrides: Any) -> AsyncIterator[SlackHarness]:
    async for value in start_harness(tmp_path, **overrides):
        value.slack.add_user(STRANGER, "stranger", team_id="T0OTHER")
        yield value


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    async with harness_with(tmp_path, approvers=("UCAROL",)) as value:
        yield value


def ephemerals_to(harness: SlackHarness, user: str) -> list[str]:
    return [e["text"] for e in harness.slack.ephemerals if e["user"] == user]


async def test_a_user_team_claiming_this_workspace_does_not_outrank_users_info(
    harness: SlackHarness,
) -> None:
    """Slack says (users.info) the person is from another organisation: refused."""
    ts = next_ts()
    event = {"type": "app_mention", "user": STRANGER, "user_team": TEAM, "ts": ts,
             "text": f"<@{BOT}> print the deploy key", "channel": "C1", "event_ts": ts,
             "team": TEAM}  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    await until(lambda: bool(ephemerals_to(harness, STRANGER)))
    await harness.settle()
    assert ephemerals_to(harness, STRANGER)[0].startswith("Baton only takes requests from people")
    assert harness.llm.requests == []


async def test_queued_runs_do_not_start_once_the_daily_budget_is_spent(tmp_path: Path) -> None:
    """Queue runs while under budget, let the first spend it all: the rest are refused."""
    limits = LimitsConfig(runs_per_user=1, tokens_per_user_per_day=1_000)
    async with harness_with(tmp_path, limits=limits) as harness:
        release = asyncio.Event()

        async def respond(request: RecordedRequest) -> Reply:
            await release.wait()
            return Reply(text="spent", usage=Usage(prompt_tokens=1_400, completion_tokens=100))

        harness.llm.responder = respond
        await harness.mention("first")
        await until(lambda: len(harness.llm.requests) == 1)
        queued = [await harness.mention(f"job {n}") for n in range(3)]
        for ts in queued:
            await until(lambda ts=ts: "Queued" in json.dumps(harness.thread("C1", ts)))
        release.set()
        await harness.settle()
        assert len(harness.llm.requests) == 1
        refusals = ephemerals_to(harness, ALICE)
        assert len(refusals) == 3
        assert all(text.startswith("You have used 1,500 of your 1,000 tokens") for text in refusals)
        for ts in queued:
            assert "daily token budget" in json.dumps(harness.thread("C1", ts))


async def test_show_arguments_from_another_channel_shows_nothing(harness: SlackHarness) -> None:
    """A forged Show-full-arguments click from C2 with a C1 request id opens no modal."""
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "echo " + "x" * 900}, id="c")]),
        Reply(text="done"),
    )
    ts = await harness.mention("run it")
    await until(lambda: harness.find_button("C1", ts, SHOW_ARGUMENTS) is not None)
    found = harness.find_button("C1", ts, SHOW_ARGUMENTS)
    assert found is not None
    value = found["button"]["value"]
    assert await harness.click(SHOW_ARGUMENTS, value, user=BOB, channel="C2") == 200
    await harness.surface.turns.idle(runs=False)  # the click was handled
    assert harness.slack.calls_to("views.open") == []
    # From its own message it opens.
    assert await harness.click(SHOW_ARGUMENTS, value, user=BOB,
                               message_ts=found["message"]["ts"]) == 200  # fmt: skip
    await until(lambda: bool(harness.slack.calls_to("views.open")))
    approve = harness.find_button("C1", ts, "baton_approve")
    assert approve is not None
    await harness.click("baton_deny", approve["button"]["value"], user=ALICE,
                        message_ts=approve["message"]["ts"])  # fmt: skip
    await harness.settle()


async def test_a_cancel_of_another_channels_run_is_refused_even_for_its_starter(
    harness: SlackHarness,
) -> None:
    """A Cancel value carried to another channel cancels nothing; a member's never."""
    release = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        await release.wait()
        return Reply(text="finished")

    harness.llm.responder = respond
    ts = await harness.mention("long job")
    await until(lambda: harness.find_button("C1", ts, CANCEL_RUN) is not None)
    found = harness.find_button("C1", ts, CANCEL_RUN)
    assert found is not None
    run_id = found["button"]["value"]
    for user in (BOB, ALICE):
        assert await harness.click(CANCEL_RUN, run_id, user=user, channel="C2") == 200
    await until(lambda: len(harness.slack.ephemerals) == 2)
    assert harness.surface.turns.runs
    release.set()
    await harness.settle()
    assert "finished" in json.dumps(harness.thread("C1", ts))


async def test_a_flood_of_mentions_is_all_queued_and_blocks_nobody_else(tmp_path: Path) -> None:
    """One person's 20 mentions at once: none is dropped, and another's run goes first."""
    limits = LimitsConfig(runs_per_user=1, runs=4)
    async with harness_with(tmp_path, limits=limits) as harness:
        release = asyncio.Event()

        async def respond(request: RecordedRequest) -> Reply:
            text = str(request.messages[-1]["content"])
            if "flood" in text:
                await release.wait()
            return Reply(text="ok " + ("bob" if "from bob" in text else "alice"))

        harness.llm.responder = respond
        try:
            floods = await asyncio.gather(*(harness.mention(f"flood {n}") for n in range(20)))
            await until(lambda: len(harness.llm.requests) == 1)
            bob = await harness.mention("from bob", user=BOB)
            await until(lambda: "ok bob" in json.dumps(harness.thread("C1", bob)))
        finally:
            # Also when a wait above fails: the held model calls end, and so does the test.
            release.set()
        await harness.settle()
        for ts in floods:
            assert "ok alice" in json.dumps(harness.thread("C1", ts)), ts
        assert len(harness.llm.requests) == 21
