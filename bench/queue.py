"""The run queue: more mentions than `limits.runs` allows at once, each from its own person.

Run: `.venv/bin/python -m bench.queue [--mentions N] [--runs N] [--latency S]`.
Prints how long all answers took against the ideal (waves of `runs` runs, each as
long as one model call), and how long a queued run waited after a slot freed
before its model call began (the admission hand-over; target p99 <= 1 s). Its
floor, measured in the same run: the same calls through a bare `openai` client
against the same fake model, `runs` at a time behind an asyncio.Semaphore.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from pathlib import Path

from openai import AsyncOpenAI

from bot.config import LimitsConfig
from bot.slack.rate_budget import RateBudget
from bot.slack.thread_surface import REVEAL_AFTER_S
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
            Path(directory),
            limits=limits,
            rate_budget=RateBudget(),
            reveal_after_s=REVEAL_AFTER_S,
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
            handovers = handover_gaps(starts, ends, runs)
            harness.llm.responder = lambda request: Reply(text="Answer.", delay=latency)
            floor = await bare_handovers(harness.llm.url, mentions, runs, latency)
    ideal = math.ceil(mentions / runs) * latency
    first = sorted(starts)[:runs]
    print(f"{mentions} mentions from {mentions} people, limits.runs {runs}, model {latency} s")
    print(f"all answered after {finished:5.2f} s (ideal {ideal:.2f} s); {queued} queue updates")
    print(
        f"first wave's model calls began {(first[0] - began) * 1000:.0f} to "
        f"{(first[-1] - began) * 1000:.0f} ms after the mentions were sent"
    )
    for name, gaps in (("slot hand-over", handovers), ("floor (bare)  ", floor)):
        if gaps:
            print(
                f"{name}  p50 {statistics.median(gaps):6.1f} ms   "
                f"p99 {percentile(gaps, 0.99):6.1f} ms   max {max(gaps):6.1f} ms"
            )
    if handovers:
        p99 = percentile(handovers, 0.99)
        verdict = "met" if p99 <= 1000 else "NOT met"
        print(f"=== hand-over p99 {p99:.0f} ms (target <= 1000 ms): {verdict}")


def handover_gaps(starts: list[float], ends: list[float], runs: int) -> list[float]:
    """Each model call after the first wave began when an earlier one ended: the gap is
    the hand-over (the slot freed, the next run admitted and started), in ms."""
    gaps = []
    ended = sorted(ends)
    for start in sorted(starts)[runs:]:
        before = [end for end in ended if end <= start]
        if before:
            gaps.append((start - before[-1]) * 1000)
    return gaps


async def bare_handovers(url: str, mentions: int, runs: int, latency: float) -> list[float]:
    """The floor: the same number of model calls, `runs` at a time behind a semaphore,
    through a bare client against the same fake model (answering after `latency`)."""
    client = AsyncOpenAI(base_url=url, api_key="sk-bench")
    gate = asyncio.Semaphore(runs)
    starts: list[float] = []
    ends: list[float] = []

    async def call() -> None:
        async with gate:
            starts.append(time.perf_counter())
            await client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "job"}]
            )
            ends.append(time.perf_counter())

    await asyncio.gather(*(call() for _ in range(mentions)))
    await client.close()
    # The model's own latency is in both; the floor's gap is what the client adds.
    return handover_gaps(starts, ends, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mentions", type=int, default=64)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(measure(args.mentions, args.runs, args.latency))


if __name__ == "__main__":
    main()
