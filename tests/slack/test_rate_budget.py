"""The Slack rate budget: priorities, coalesced progress, and the real client under it."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack.blocks import progress_text
from bot.slack.progress import ProgressMessage
from bot.slack.rate_budget import (
    METHOD_LIMITS,
    Limit,
    NoRoom,
    Priority,
    RateBudget,
    call_channel,
    current_priority,
    priority,
)
from bot.slack.surface import CountingWebClient, budgeted_request_client
from bot.store.rate import MemoryRateStore
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlackAPI
from tests.slack.harness import SlackHarness, start_harness

FAST = Limit(per_minute=600, burst=2)  # one call per 0.1 s, two back to back


def fast_budget(**overrides: Any) -> RateBudget:
    limits = {method: FAST for method in METHOD_LIMITS}
    return RateBudget(limits=limits, unknown=FAST, channel_limit=FAST, **overrides)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI(bot_user_id="UBOT") as fake:
        yield fake


def client_for(slack: FakeSlackAPI, budget: RateBudget) -> CountingWebClient:
    return CountingWebClient(token="xoxb-test", base_url=slack.url, budget=budget)


async def test_priority_is_a_context_and_urgent_by_default() -> None:
    assert current_priority() is Priority.URGENT
    with priority(Priority.PROGRESS):
        assert current_priority() is Priority.PROGRESS
        with priority(Priority.STREAM):
            assert current_priority() is Priority.STREAM
        assert current_priority() is Priority.PROGRESS
    assert current_priority() is Priority.URGENT


def test_keys_and_the_channel_of_a_call() -> None:
    budget = RateBudget()
    assert [k for k, _ in budget.limits_for("chat.postMessage", "C1")] == [
        "channel:C1",
        "chat.postMessage",
    ]
    assert [k for k, _ in budget.limits_for("chat.update", "C1")] == ["chat.update"]
    assert budget.limits_for("no.suchMethod", None)[0][1] == Limit(45, 4)  # Tier 3
    assert call_channel({"json": {"channel": "C1"}}) == "C1"
    assert call_channel({"params": {"channel_id": "C2"}}) == "C2"
    assert call_channel({"json": {"text": "x"}}) is None


async def test_urgent_calls_reserve_future_slots_at_the_rate() -> None:
    budget = fast_budget()
    began = time.monotonic()
    for _ in range(6):
        await budget.acquire("chat.update", None)
    # Two at once (the burst), then one per 0.1 s.
    assert 0.35 < time.monotonic() - began < 0.7
    assert budget.stats.waited[Priority.URGENT] == 4


async def test_a_call_with_a_way_out_reserves_nothing_when_its_slot_is_too_far() -> None:
    budget = RateBudget(limits={"chat.startStream": Limit(60, 1)})  # one a second
    await budget.acquire("chat.startStream", "C1", Priority.URGENT, within=0.5)
    # The next slot is a second away: refused at once, and nothing is reserved...
    began = time.monotonic()
    with pytest.raises(NoRoom):
        async with budget.slot("chat.startStream", "C1", Priority.URGENT, within=0.5):
            raise AssertionError("no slot may be given")
    assert time.monotonic() - began < 0.2
    # ...so a call that waits gets the slot right after the first, not a second later.
    began = time.monotonic()
    await budget.acquire("chat.startStream", "C1")
    assert time.monotonic() - began < 1.2


async def test_a_cancelled_call_never_hands_its_slot_to_two_callers() -> None:
    """A caller cancelled while it waits (a dropped stream start) with others already
    planned behind it: its slot stays used, so the next caller does not get a slot
    another caller holds. Before, the arrival time moved back an interval and two
    messages went out together: the 429s of thirty runs in one channel."""
    budget = RateBudget(
        limits={"chat.postMessage": Limit(6000)}, channel_limit=Limit(60)
    )  # one message a second in a channel
    await budget.acquire("chat.postMessage", "C1")  # due now
    cancelled = asyncio.create_task(budget.acquire("chat.postMessage", "C1"))  # +1 s
    behind = asyncio.create_task(budget.acquire("chat.postMessage", "C1"))  # +2 s
    await asyncio.sleep(0.05)
    store = budget.store
    assert isinstance(store, MemoryRateStore)
    planned = store.tats["channel:C1"]
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert store.tats["channel:C1"] == planned  # not given back: `behind` is after it
    nxt = await store.reserve("channel:C1", 1.0, math.inf)
    assert nxt.ahead > 2.5  # after `behind`'s slot (about 3 s away), not on it
    # The last slot planned is given back when its caller goes.
    last = asyncio.create_task(budget.acquire("chat.postMessage", "C1"))
    await asyncio.sleep(0.05)
    before = store.tats["channel:C1"]
    last.cancel()
    behind.cancel()
    await asyncio.gather(last, behind, return_exceptions=True)
    assert store.tats["channel:C1"] == pytest.approx(before - 1.0)


async def test_an_urgent_call_is_not_delayed_by_a_flood_of_progress() -> None:
    budget = fast_budget()
    stop = asyncio.Event()
    progress_calls = 0

    async def flood() -> None:
        nonlocal progress_calls
        while not stop.is_set():
            await budget.acquire("chat.update", "C1", Priority.PROGRESS)
            progress_calls += 1

    flooders = [asyncio.create_task(flood()) for _ in range(20)]
    try:
        await asyncio.sleep(0.5)
        delays = []
        for _ in range(5):
            began = time.monotonic()
            await budget.acquire("chat.update", "C1", Priority.URGENT)
            delays.append(time.monotonic() - began)
            await asyncio.sleep(0.25)
    finally:
        stop.set()
        for task in flooders:
            task.cancel()
        await asyncio.gather(*flooders, return_exceptions=True)
    assert progress_calls >= 3  # the flood did get the spare capacity
    # ... and never stood in an urgent call's way: a slot taken from it would cost it an
    # interval (0.1 s) every time. The median, so that one stall of a loaded machine
    # (a collection) is not taken for it.
    assert sorted(delays)[len(delays) // 2] < 0.05, delays


async def test_progress_is_starved_by_urgent_load_not_refused() -> None:
    budget = fast_budget()
    stop = asyncio.Event()

    async def urgent_load() -> None:
        while not stop.is_set():
            await budget.acquire("chat.update", None, Priority.URGENT)

    load = [asyncio.create_task(urgent_load()) for _ in range(3)]
    waiting = asyncio.create_task(budget.acquire("chat.update", None, Priority.PROGRESS))
    await asyncio.sleep(1.0)
    assert not waiting.done()  # starved: it waits ...
    assert budget.stats.retries[Priority.PROGRESS] > 0
    stop.set()
    await asyncio.gather(*load)
    await asyncio.wait_for(waiting, 2.0)  # ... and gets its slot once there is room


async def test_a_stream_uses_half_the_burst_progress_none() -> None:
    budget = RateBudget(
        limits={"chat.appendStream": Limit(per_minute=60, burst=5)}, unknown=FAST
    )  # 1 s apart, burst tolerance 4 s
    await budget.acquire("chat.appendStream", None, Priority.URGENT)  # 1 s of debt
    progress = asyncio.create_task(budget.acquire("chat.appendStream", None, Priority.PROGRESS))
    await budget.acquire("chat.appendStream", None, Priority.STREAM)  # 1 s <= 2 s
    await budget.acquire("chat.appendStream", None, Priority.STREAM)  # 2 s <= 2 s
    stream = asyncio.create_task(budget.acquire("chat.appendStream", None, Priority.STREAM))
    await asyncio.sleep(0.3)
    assert not stream.done() and not progress.done()  # 3 s of debt: above half the burst
    began = time.monotonic()
    await budget.acquire("chat.appendStream", None, Priority.URGENT)  # no wait: within burst
    assert time.monotonic() - began < 0.5  # a wait for its slot would be a second
    for task in (stream, progress):
        task.cancel()
    await asyncio.gather(stream, progress, return_exceptions=True)


async def test_a_slot_pays_for_the_next_call_of_its_method(slack: FakeSlackAPI) -> None:
    budget = fast_budget()
    client = client_for(slack, budget)
    posted = await client.chat_postMessage(channel="C1", text="hi")
    async with budget.slot("chat.update", "C1", Priority.PROGRESS):
        granted = sum(budget.stats.granted.values())
        await client.chat_update(channel="C1", ts=posted["ts"], text="one")
        assert sum(budget.stats.granted.values()) == granted  # no second acquire
        await client.chat_update(channel="C1", ts=posted["ts"], text="two")
        assert sum(budget.stats.granted.values()) == granted + 1  # only one was paid
    assert budget.stats.prepaid == 1


class Recording(CountingWebClient):
    """Notes, when a chat.update leaves, what it shows and what the run's state is."""

    progress: ProgressMessage | None = None
    sent: list[tuple[str, str]]

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        if api_method == "chat.update" and self.progress is not None:
            # After the budget has granted the slot: inside `slot`, or acquired below.
            response = super().api_call(api_method, **kwargs)
            current = progress_text(list(self.progress.lines), self.progress.status)
            self.sent.append((kwargs["json"]["text"], current))
            return await response
        return await super().api_call(api_method, **kwargs)


async def test_progress_sends_only_the_latest_state(slack: FakeSlackAPI) -> None:
    budget = fast_budget()
    client = Recording(token="xoxb-test", base_url=slack.url, budget=budget)
    client.sent = []
    progress = ProgressMessage(client, channel="C1", thread_ts="1.1", run_id="r1", interval=0.0)
    client.progress = progress
    await progress.start()
    stop = asyncio.Event()

    async def urgent_load() -> None:  # approvals and answers keep chat.update busy
        while not stop.is_set():
            await budget.acquire("chat.update", None, Priority.URGENT)

    load = asyncio.create_task(urgent_load())
    for n in range(40):
        progress.add(f"step {n}")
        await asyncio.sleep(0.02)
    stop.set()
    await load
    await asyncio.sleep(0.5)
    await progress.finish("✓ Done")
    updates = [c for c in slack.calls_to("chat.update") if c.ok]
    running = client.sent[:-1]
    assert progress.changes == 40
    assert len(running) < 20  # coalesced, not one update per step
    for shown, state in running:
        assert shown == state  # built when sent: never a stale state
    assert "step 39" in running[-1][0]  # the latest state did get shown
    assert len(updates) == len(client.sent)
    assert "step 39" in updates[-1].params["text"]


async def test_the_real_client_under_a_per_channel_limit_is_never_refused(
    slack: FakeSlackAPI,
) -> None:
    """Slack allowing 2 messages a second per channel, the budget half that: room for
    a loaded machine's delays between a grant and its request's arrival."""
    slack.rate_limit("chat.postMessage", 2.0, per_channel=True)
    budget = RateBudget(channel_limit=Limit(per_minute=60, burst=1))
    client = client_for(slack, budget)
    await asyncio.gather(
        *(client.chat_postMessage(channel="C1", text=f"answer {n}") for n in range(4)),
        *(client.chat_postMessage(channel="C2", text=f"answer {n}") for n in range(4)),
    )
    posts = slack.calls_to("chat.postMessage")
    assert [c for c in posts if c.status == 429] == []
    assert len(posts) == 8 and all(c.ok for c in posts)
    assert len(slack.channel_messages("C1")) == len(slack.channel_messages("C2")) == 4
    # The channels were paced side by side, not one after another: each pair of posts
    # in the order they reached Slack holds one of each channel.
    channels = [c.params["channel"] for c in posts]
    assert all(set(channels[i : i + 2]) == {"C1", "C2"} for i in range(0, 8, 2)), channels


async def test_bolts_per_request_client_goes_through_the_budget(slack: FakeSlackAPI) -> None:
    budget = fast_budget()
    app_client = client_for(slack, budget)
    context = AsyncBoltContext()
    # What Bolt's `_init_context` builds for each request: a plain copy of the app's.
    context["client"] = AsyncWebClient(
        token="xoxb-test", base_url=slack.url, retry_handlers=app_client.retry_handlers
    )
    seen: list[AsyncWebClient] = []

    async def listener() -> None:
        seen.append(context.client)
        await context.client.chat_postMessage(channel="C1", text="from a listener")

    await budgeted_request_client(app_client)(context, listener)
    [client] = seen
    assert isinstance(client, CountingWebClient) and client.budget is budget
    assert client.token == "xoxb-test" and client.retry_handlers == app_client.retry_handlers
    assert budget.stats.granted[Priority.URGENT] == 1
    assert [c.ok for c in slack.calls_to("chat.postMessage")] == [True]


async def test_without_a_budget_the_client_is_not_paced(slack: FakeSlackAPI) -> None:
    client = CountingWebClient(token="xoxb-test", base_url=slack.url)
    with contextlib.nullcontext():
        await asyncio.gather(*(client.chat_postMessage(channel="C1", text="x") for _ in range(5)))
    assert len(slack.calls_to("chat.postMessage")) == 5


# ------------------------------------------------- many runs in one channel, end to end

# Slack's limits and the budget's table, both 2.5 times as fast. Not faster: the event
# loop's stalls (a full collection late in the suite, a loaded CI machine) do not get
# faster with it, and calls due during a stall go out together. At 2.5 times, a stall
# of up to ~0.9 s bunches at most the three messages Slack's channel burst takes; at
# 5 times a 0.5 s stall drew a 429 in CI.
SPEED = 2.5


async def test_thirty_concurrent_runs_in_one_channel_all_land_whole_and_once(
    tmp_path: Path,
) -> None:
    """The real Bolt app, 30 mentions at once in one channel, Slack enforcing its limits.

    Every answer lands, once. How many 429s the pacing draws is a figure, not a test:
    `python -m bench.slack_budget` measures it (none on a quiet machine); here, under
    parallel test workers, a stalled event loop can deliver two paced posts together,
    and the answer must still land, retried, exactly once.

    With `enforce_slack_limits` (Slack's documented tiers and about a message a second
    per channel), on a fake clock SPEED times as fast; in a fake without it, its
    `rate_limit` holds chat.postMessage to one a second per channel, SPEED times as
    fast. The budget's table is scaled as much; nothing else is changed. Every run
    posts a progress message, updates it, finishes it and answers.
    """
    runs = 30
    async for harness in start_harness(tmp_path):
        harness.surface.use_rate_budget(RateBudget.scaled(SPEED))
        slack = harness.slack
        if hasattr(slack, "enforce_slack_limits"):
            slack._clock = faster_clock(SPEED)
            slack.enforce_slack_limits()
        else:
            slack.rate_limit("chat.postMessage", 1.0 * SPEED, per_channel=True)

        def answer(request: RecordedRequest) -> Reply:
            asked = str(request.messages[-1]["content"])
            return Reply(text=f"Answer to {asked.rsplit(' ', 1)[-1]}.", delay=0.2)

        harness.llm.responder = answer
        for n in range(runs):
            harness.slack.add_user(f"UPERSON{n}", f"person{n}")
        threads = await asyncio.gather(
            *(
                harness.mention(f"question q{n}", channel="C1", user=f"UPERSON{n}")
                for n in range(runs)
            )
        )
        await until_settled(harness, within=60.0)
        for n, ts in enumerate(threads):
            answers = [m for m in harness.thread("C1", ts) if f"Answer to q{n}." in m["text"]]
            assert len(answers) == 1, (n, answers)


def faster_clock(speed: float) -> Callable[[], float]:
    """A monotonic clock running `speed` times as fast (the fake measures limits with it)."""
    began = time.monotonic()
    return lambda: began + (time.monotonic() - began) * speed


async def until_settled(harness: SlackHarness, within: float) -> None:
    """`harness.settle`, with the time paced runs need."""

    def running() -> bool:
        return any(not t.done() for t in harness.surface.turns._tasks)

    async with asyncio.timeout(within):
        while running():  # noqa: ASYNC110 (state in the surface, no event to wait on)
            await asyncio.sleep(0.05)
        await harness.baton.tracker.wait_for_children()
        while running():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
