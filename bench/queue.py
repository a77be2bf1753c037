"""The run queue: more mentions than `limits.runs` allows at once, each from its own person.

Run: `.venv/bin/python -m bench.queue [--mentions N] [--runs N] [--latency S]`.
Prints how long all answers took against the ideal (waves of `runs` runs, each as
long as one model call), and how long a queued run waited after a slot freed
before its model call began (the admission hand-over).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from pathlib import Path

from bot.config import LimitsConfig
from bot.slack.rate_budget import RateBudget
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.slack.harness import start_harness

# At Slack's real pace the runs take a while to be answered: wait this long at most.
SETTLE_S = 600.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(mentions: int, runs: int, latency: float) -> None:
    limits = LimitsConfig(runs=runs, runs_per_user=0)
    starts: list[float] = []
    ends: list[float] = []

    async def respond(request: RecordedRequest) -> Reply:
        starts.append(time.perf_counter())
        await asyncio.sleep(latency)
        ends.append(time.perf_counter())
        return Reply(text="Answer.")

    with tempfile.TemporaryDirectory() as directory:
        async for harness in start_harness(
            Path(directory), limits=limits, rate_budget=RateBudget()
        ):
            for n in range(mentions):
                harness.slack.add_user(f"UPERSON{n}", f"person{n}")
            harness.llm.responder = lambda request: Reply(text="warm")
            await harness.mention("warm-up")
            await harness.settle(within=SETTLE_S)
            harness.llm.responder = respond
            began = time.perf_counter()
            await asyncio.gather(
                *(harness.mention(f"job {n}", user=f"UPERSON{n}") for n in range(mentions))
            )
            await harness.settle(within=SETTLE_S)
            finished = time.perf_counter() - began
            queued = sum("Queued" in str(c.params) for c in harness.slack.calls_to("chat.update"))
    # Each model call after the first wave began when an earlier one ended: the gap is
    # the hand-over (the run's end written, the next run admitted and started).
    handovers = []
    ended = sorted(ends)
    for start in sorted(starts)[runs:]:
        before = [end for end in ended if end <= start]
        if before:
            handovers.append((start - before[-1]) * 1000)
    ideal = math.ceil(mentions / runs) * latency
    first = sorted(starts)[:runs]
    print(f"{mentions} mentions from {mentions} people, limits.runs {runs}, model {latency} s")
    print(f"all answered after {finished:5.2f} s (ideal {ideal:.2f} s); {queued} queue updates")
    print(
        f"first wave's model calls began {(first[0] - began) * 1000:.0f} to "
        f"{(first[-1] - began) * 1000:.0f} ms after the mentions were sent"
    )
    if handovers:
        print(
            f"slot hand-over  p50 {statistics.median(handovers):6.1f} ms   "
            f"p99 {percentile(handovers, 0.99):6.1f} ms   max {max(handovers):6.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mentions", type=int, default=64)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(measure(args.mentions, args.runs, args.latency))


if __name__ == "__main__":
    main()
