"""Slack rate budget: 30 concurrent runs in one channel, Slack's limits enforced.

Run: `.venv/bin/python -m bench.slack_budget [--runs N] [--latency S] [--speed X]`.
The real Bolt app answers N mentions posted at once in one channel; the fake Slack
enforces Slack's documented tiers and about one message a second per channel
(`enforce_slack_limits`; without it, the fake's `rate_limit` holds chat.postMessage to
one a second per channel). Each run lists a directory, then answers. Prints the wall
time, when the answers landed, the Slack calls by method, the 429s (the budget should
leave none), progress updates sent against states coalesced, and what the budget did.
`--speed` runs Slack's clock and the budget's table that many times as fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from bot.slack import progress
from bot.slack.rate_budget import Priority, RateBudget
from bot.slack.thread_surface import REVEAL_AFTER_S
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import SlackHarness, start_harness

CHANNEL = "CBUSY"
# Past this (divided by --speed), the answers still missing are reported as lost.
DEADLINE_S = 400.0


def enforce_limits(harness: SlackHarness, speed: float) -> str:
    slack = harness.slack
    if speed != 1.0:
        began = time.monotonic()
        # The fake measures its buckets with its injected clock: run it `speed` times as fast.
        slack._clock = lambda: began + (time.monotonic() - began) * speed
        harness.surface.use_rate_budget(RateBudget.scaled(speed))
    if hasattr(slack, "enforce_slack_limits"):
        slack.enforce_slack_limits()
        return "Slack's documented tiers and ~1 message/s per channel (enforce_slack_limits)"
    slack.rate_limit("chat.postMessage", speed, per_channel=True)
    return "chat.postMessage 1/s per channel (rate_limit; the tier mode is not in this fake)"


def answer(request: RecordedRequest, latency: float) -> Reply:
    asked = next(str(m["content"]) for m in reversed(request.messages) if m.get("role") == "user")
    tag = asked.rsplit(" ", 1)[-1]
    if not any(m.get("role") == "tool" for m in request.messages):
        return Reply(tool_calls=[ToolCallSpec("list_dir", {}, id=f"c-{tag}")], delay=latency / 2)
    return Reply(text=f"Answer to {tag}.", delay=latency / 2)


def rate_limited(harness: SlackHarness) -> list[object]:
    slack = harness.slack
    if hasattr(slack, "rate_limited_calls"):
        return list(slack.rate_limited_calls())
    return [c for c in slack.calls if c.status == 429]


async def measure(runs: int, latency: float, speed: float) -> None:
    with tempfile.TemporaryDirectory() as directory:
        async for harness in start_harness(
            Path(directory), rate_budget=RateBudget(), reveal_after_s=REVEAL_AFTER_S
        ):
            harness.llm.responder = lambda request: answer(request, latency)
            for n in range(runs):
                harness.slack.add_user(f"UPERSON{n}", f"person{n}")
            # Warm up Bolt, the database and the bot's identity before timing anything.
            await harness.mention("warm-up q-warm", channel="CWARM")
            await harness.settle()
            limits = enforce_limits(harness, speed)
            harness.slack.clear_calls()
            progress.totals.clear()
            budget = harness.surface.budget

            began = time.perf_counter()
            threads = await asyncio.gather(
                *(
                    harness.mention(f"question q{n}", channel=CHANNEL, user=f"UPERSON{n}")
                    for n in range(runs)
                )
            )
            landed: dict[int, float] = {}
            deadline = began + DEADLINE_S / speed
            while len(landed) < runs and time.perf_counter() < deadline:
                for n, ts in enumerate(threads):
                    if n not in landed and f"Answer to q{n}." in json.dumps(
                        harness.thread(CHANNEL, ts)
                    ):
                        landed[n] = time.perf_counter() - began
                await asyncio.sleep(0.05)
            while any(not t.done() for t in harness.surface.turns._tasks):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            finished = time.perf_counter() - began
            calls = Counter(c.method for c in harness.slack.calls)
            refused = rate_limited(harness)
            stats = budget.stats
    times = sorted(landed.values()) or [float("nan")]
    print(f"{runs} concurrent runs in one channel, model latency {latency:.1f} s, speed {speed:g}x")
    print(f"Slack enforcing: {limits}")
    print(
        f"answers landed: {len(times)}/{runs}   first {times[0]:6.2f} s   "
        f"median {statistics.median(times):6.2f} s   last {times[-1]:6.2f} s"
    )
    print(f"wall time (every run finished) {finished:6.2f} s")
    print(f"HTTP 429 answers from Slack: {len(refused)}")
    changes, updates = progress.totals["changes"], progress.totals["updates"]
    print(
        f"progress: {changes} states, {updates} updates sent while running "
        f"({changes - updates} coalesced), {progress.totals['finals']} final writes"
    )
    print(f"Slack Web API calls: {sum(calls.values())}")
    for method, count in sorted(calls.items()):
        print(f"  {method:32} {count:5d}")
    print("budget by priority: granted / slept (seconds) / asked again")
    for level in Priority:
        print(
            f"  {level.name:9} {stats.granted[level]:5d} / {stats.waited[level]:4d} "
            f"({stats.wait_s[level]:7.1f} s) / {stats.retries[level]:5d}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--speed", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(measure(args.runs, args.latency, args.speed))


if __name__ == "__main__":
    main()
