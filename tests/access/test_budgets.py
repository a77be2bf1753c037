"""Token budgets over the real engine, sub-agents and database, the model faked over HTTP.

Each test runs on SQLite and, when BATON_TEST_POSTGRES_URL is set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from bot.access.budgets import DailyBudgets, RunBudget, Spend, UsageToday, describe_usage
from bot.app import Baton
from bot.config import LimitsConfig, PriceConfig
from bot.describe import BUDGET_ERROR
from bot.engine import Done
from bot.store import UsageStore
from bot.store.models import UsageRow
from tests.databases import fresh_database
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec, Usage
from tests.subagents.harness import THREAD, Router, make_baton, run_turn, wait_finished

EXPLORE = "Your job is to investigate"
GENERAL = "Understand the task first"
# 20:47:30 UTC: the day resets in 3 h 12 min.
EVENING = datetime(2026, 11, 30, 20, 47, 30, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def baton(tmp_path: Path, fake_llm: FakeOpenAI, database_url: str) -> AsyncIterator[Baton]:
    app = await make_baton(tmp_path, fake_llm, database_url=database_url)
    yield app
    await app.close()


def used(prompt: int, completion: int) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def task(agent: str, prompt: str, *, background: bool = False, id: str) -> ToolCallSpec:
    return ToolCallSpec(
        "task", {"subagent_type": agent, "prompt": prompt, "background": background}, id=id
    )


def run_budget(baton: Baton, *, limit: int = 0, user: str = "U1", channel: str = "C1") -> RunBudget:
    return RunBudget(
        usage=UsageStore(baton.database),
        limit=limit,
        run_id=f"run-{uuid.uuid4().hex[:8]}",
        user_id=user,
        channel_id=channel,
        clock=lambda: EVENING,
    )


async def rows_of(baton: Baton, run_id: str) -> list[tuple[str | None, int]]:
    async with baton.database.sessions() as session:
        rows = (await session.exec(select(UsageRow).where(UsageRow.run_id == run_id))).all()
    pairs = [(r.task_id, r.prompt_tokens + r.completion_tokens) for r in rows]
    return sorted(pairs, key=lambda pair: (pair[0] or "", pair[1]))


def handoff_costs(fake: FakeOpenAI) -> list[int]:
    """What each handoff request the fake declined cost, in the order they came."""
    return [request.prompt_tokens + 1 for request in fake.handoff_requests]


def done_of(events: list) -> Done:
    assert isinstance(events[-1], Done), events[-1]
    return events[-1]


async def test_the_main_agent_and_every_child_charge_one_run_and_one_day(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    release = asyncio.Event()

    async def slow_background(request: RecordedRequest) -> Reply:
        await release.wait()
        return Reply(text="Background result.", usage=used(700, 70))

    router = Router(fake_llm)
    router.main += [
        Reply(
            tool_calls=[
                task("explore", "look in src", id="F"),
                task("general-purpose", "summarise docs", background=True, id="B"),
            ],
            usage=used(1_000, 100),
        ),
        Reply(text="Both under way.", usage=used(1_000, 100)),
    ]
    router.children[EXPLORE] = [Reply(text="Foreground result.", usage=used(500, 50))]
    router.children[GENERAL] = [slow_background]
    budget = run_budget(baton)
    store = UsageStore(baton.database)

    events = await run_turn(baton, "go", meter=budget, user_id="U1")
    assert done_of(events).final_text == "Both under way."
    # Each child that ends without submit_result is asked for it once: a model call,
    # charged like any other (the fake declines it, spending its prompt and one token).
    [explore_asked] = handoff_costs(fake_llm)
    # The turn is over; the background child has not spent anything yet.
    assert budget.spent.total_tokens == 1_100 + 550 + explore_asked + 1_100
    release.set()
    finished = await wait_finished(baton, "task-general-purpose-1")
    assert finished.state == "completed"

    # ...and then charges the same run, person and channel as the rest.
    _, general_asked = handoff_costs(fake_llm)
    total = 1_100 + 550 + explore_asked + 1_100 + 770 + general_asked
    assert budget.spent.total_tokens == total
    assert await rows_of(baton, budget.run_id) == sorted(
        [
            (None, 1_100),
            (None, 1_100),
            ("task-explore-1", 550),
            ("task-explore-1", explore_asked),
            ("task-general-purpose-1", 770),
            ("task-general-purpose-1", general_asked),
        ],
        key=lambda pair: (pair[0] or "", pair[1]),
    )
    day = EVENING.date()
    assert (await store.run_total(budget.run_id)).total_tokens == total
    assert (await store.user_day("U1", day)).total_tokens == total
    assert (await store.channel_day("C1", day)).total_tokens == total
    assert (await store.user_day("U1", day + timedelta(days=1))).total_tokens == 0
    assert (await store.user_day("U2", day)).total_tokens == 0


async def test_a_run_at_its_budget_stops_every_agent_with_the_partial_work(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    router = Router(fake_llm)
    router.main += [
        Reply(
            text="Delegating.",
            tool_calls=[task("explore", "look everywhere", id="F")],
            usage=used(400, 100),
        ),
        Reply(text="never asked for"),
    ]
    router.children[EXPLORE] = [
        Reply(
            text="Found the config.",
            tool_calls=[ToolCallSpec("list_dir", {}, id="c1")],
            usage=used(500, 100),
        ),
        Reply(text="never asked for"),
    ]
    budget = run_budget(baton, limit=1_000)

    events = await run_turn(baton, "go", meter=budget, user_id="U1")

    done = done_of(events)
    assert done.stop_reason == "budget"
    note = (
        "[Stopped: this run reached its token budget (1,100 of 1,000 tokens). "
        "The work above is partial.]"
    )
    assert done.final_text == f"Delegating.\n\n{note}"
    assert len(fake_llm.requests) == 2  # one call each; neither asked again
    child = await wait_finished(baton, "task-explore-1")
    assert child.state == "failed"
    assert child.error == BUDGET_ERROR == "stopped: the run's token budget is spent"
    assert child.result == f"Found the config.\n\n{note}"
    detail = await baton.tracker.get("task-explore-1")
    assert detail is not None
    assert any("✗ Stopped at the run's token budget" in line for line in detail.log)
    history = await baton.conversations.history(THREAD)
    assert history[-1].content == note


async def test_the_run_that_crosses_a_daily_budget_finishes_and_the_next_is_refused(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    store = UsageStore(baton.database)
    budgets = DailyBudgets(store, LimitsConfig(tokens_per_user_per_day=1_000), {})
    assert await budgets.refusal(user_id="U1", channel_id="C1", now=EVENING) is None

    fake_llm.script(Reply(text="The whole answer.", usage=used(1_100, 100)))
    events = await run_turn(baton, "go", meter=run_budget(baton), user_id="U1")
    done = done_of(events)
    assert (done.stop_reason, done.final_text) == ("completed", "The whole answer.")

    refusal = await budgets.refusal(user_id="U1", channel_id="C1", now=EVENING)
    assert refusal is not None
    assert refusal.reason == "user_budget"
    assert refusal.text == (
        "You have used 1,200 of your 1,000 tokens for today, so I cannot start another run. "
        "Your budget resets at 00:00 UTC (in 3 h 12 min). To go on sooner, ask the operator "
        "to raise `limits.tokens_per_user_per_day`."
    )
    # Someone else in the same channel is not held back by U1's budget.
    assert await budgets.refusal(user_id="U2", channel_id="C1", now=EVENING) is None
    # The next UTC day starts afresh.
    tomorrow = datetime(2026, 12, 1, 0, 0, 5, tzinfo=UTC)
    assert await budgets.refusal(user_id="U1", channel_id="C1", now=tomorrow) is None


async def test_a_channel_budget_refuses_everyone_in_that_channel(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    store = UsageStore(baton.database)
    budgets = DailyBudgets(store, LimitsConfig(tokens_per_channel_per_day=2_000), {})
    fake_llm.script(
        Reply(text="One.", usage=used(900, 100)), Reply(text="Two.", usage=used(900, 150))
    )
    await run_turn(baton, "one", meter=run_budget(baton, user="U1"), user_id="U1")
    assert await budgets.refusal(user_id="U2", channel_id="C1", now=EVENING) is None
    await run_turn(baton, "two", meter=run_budget(baton, user="U2"), user_id="U2")

    late = EVENING.replace(hour=23, minute=59, second=40)
    refusal = await budgets.refusal(user_id="U3", channel_id="C1", now=late)
    assert refusal is not None
    assert refusal.reason == "channel_budget"
    assert refusal.text == (
        "This channel has used 2,050 of its 2,000 tokens for today, so I cannot start another "
        "run here. The budget resets at 00:00 UTC (in less than a minute). To go on sooner, "
        "ask the operator to raise `limits.tokens_per_channel_per_day`."
    )
    assert await budgets.refusal(user_id="U3", channel_id="C2", now=late) is None
    assert await budgets.refusal(user_id="U3", channel_id=None, now=late) is None


async def test_todays_usage_with_cost_for_priced_models(baton: Baton) -> None:
    store = UsageStore(baton.database)
    day = EVENING.date()
    for user, channel, model, prompt, completion in [
        ("U1", "C1", "fake-model", 10_000, 2_000),
        ("U1", "C1", "fake-model", 1_000, 400),
        ("U2", "C1", "mystery-model", 20_000, 1_000),
        ("U1", "C1", "fake-model", 999_999, 0),  # yesterday: not counted
    ]:
        await store.record(
            day=day if prompt != 999_999 else date(2026, 11, 29),
            user_id=user,
            channel_id=channel,
            run_id="r1",
            task_id=None,
            model=model,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
    limits = LimitsConfig(tokens_per_user_per_day=50_000)
    priced = DailyBudgets(store, limits, {"fake-model": PriceConfig(input=2.0, output=8.0)})

    today = await priced.today(user_id="U1", channel_id="C1", now=EVENING)
    # 11,000 prompt x $2/M + 2,400 completion x $8/M = $0.022 + $0.0192
    assert today.user == Spend(tokens=13_400, limit=50_000, cost=pytest.approx(0.0412))
    assert today.channel == Spend(
        tokens=34_400, limit=0, cost=pytest.approx(0.0412), unpriced=("mystery-model",)
    )
    assert describe_usage(today) == (
        "Today: you 13,400 of 50,000 tokens · $0.04 · this channel 34,400 tokens · $0.04 "
        "· cost unknown for mystery-model"
    )

    unpriced = DailyBudgets(store, limits, {})
    plain = await unpriced.today(user_id="U1", channel_id="C1", now=EVENING)
    assert describe_usage(plain) == (
        "Today: you 13,400 of 50,000 tokens · this channel 34,400 tokens"
    )
    only_channel = await unpriced.today(user_id=None, channel_id="C2", now=EVENING)
    assert only_channel == UsageToday(
        day=day, user=None, channel=Spend(tokens=0, limit=0, cost=None)
    )
    assert describe_usage(only_channel) == "Today: this channel 0 tokens"
