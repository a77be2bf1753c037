"""Ack latency: 50 concurrent mentions in HTTP mode, with a model that takes 2 s.

Run: `.venv/bin/python -m bench.ack_latency [--mentions N] [--latency S]`.
Prints the p50/p99/max time Slack would wait for our HTTP 200, the time until
every answer was posted, and the Slack Web API calls made per run.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from bot.config import LimitsConfig
from bot.slack.rate_budget import RateBudget
from tests.fakes.openai_api import Reply
from tests.slack.harness import SlackHarness, start_harness

# At Slack's real pace the runs take a while to be answered: wait this long at most.
SETTLE_S = 600.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def timed_mention(harness: SlackHarness, n: int) -> float:
    """Seconds until Slack would have our HTTP 200 for one signed mention."""
    started = time.perf_counter()
    await harness.mention(f"question {n}", channel=f"C{n % 5}", user=person(n))
    return time.perf_counter() - started


def person(n: int) -> str:
    # One person each: `limits.runs_per_user` would queue one person's many mentions.
    return f"UPERSON{n}"


async def measure(mentions: int, latency: float) -> None:
    with tempfile.TemporaryDirectory() as directory:
        async for harness in start_harness(Path(directory), rate_budget=RateBudget()):
            harness.llm.responder = lambda request: Reply(text="Answer.", delay=latency)
            for n in range(mentions):
                harness.slack.add_user(person(n), f"person{n}")
            # Warm up Bolt's auth.test and the database before timing anything.
            await harness.mention("warm-up")
            await harness.settle(within=SETTLE_S)
            harness.slack.clear_calls()

            began = time.perf_counter()
            acks = await asyncio.gather(*(timed_mention(harness, n) for n in range(mentions)))
            await harness.settle(within=SETTLE_S)
            finished = time.perf_counter() - began
            calls = Counter(c.method for c in harness.slack.calls)
    ms = [a * 1000 for a in acks]
    print(f"{mentions} concurrent mentions, model latency {latency:.1f} s")
    print(
        f"ack latency  p50 {statistics.median(ms):7.1f} ms   p99 {percentile(ms, 0.99):7.1f} ms"
        f"   max {max(ms):7.1f} ms"
    )
    # The default limits.runs lets that many run at once; the rest queue for a slot.
    waves = math.ceil(mentions / (LimitsConfig().runs or mentions))
    print(
        f"all answers posted after {finished:5.2f} s (ideal {waves * latency:.1f} s: "
        f"{waves} wave{'s' if waves != 1 else ''} under the default limits.runs)"
    )
    total = sum(calls.values())
    print(f"Slack Web API calls per run: {total / mentions:.1f}")
    for method, count in sorted(calls.items()):
        print(f"  {method:32} {count / mentions:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mentions", type=int, default=50)
    parser.add_argument("--latency", type=float, default=2.0)
    args = parser.parse_args()
    asyncio.run(measure(args.mentions, args.latency))


if __name__ == "__main__":
    main()
