"""Replicas (P10): 200 mentions over 10 s against one and two `python -m bot` replicas,
beside a floor: a minimal Bolt app that posts one message per mention.

Run: `.venv/bin/python -m bench.replicas [--mentions N] [--over S] [--latency S]
[--database-url URL]`. Needs a PostgreSQL server where the user may create databases
(BATON_TEST_POSTGRES_URL or --database-url); each configuration gets a fresh database,
dropped afterwards. Without one it says so and exits 0.

The replicas are real processes in HTTP mode (tests/replicas/harness.py), sharing the
database, one fake Slack and one fake model that answers after `--latency` seconds.
Mentions go round-robin to the replicas, one thread and one person each, spread evenly
over `--over` seconds. Printed per configuration: how many were answered, the ack
latency (the HTTP response time of the event POST, what Slack waits for), the time
until the last answer, the throughput, and the Slack Web API calls made. Baton paces
its Slack calls at Slack's real limits, shared by every replica through the database,
and the fake Slack enforces Slack's documented tiers and its one message a second per
channel (HTTP 429 past them): "Slack pacing needs" is the least time those calls take at
Baton's budget, the likely bound when it is near the time taken.

The floor (`bench/bolt_floor.py`, a process of its own) gets the same mentions against
the same kind of fake, with no model: what Slack's pace alone allows. Targets: every
mention answered, no 429, and the last answer within 2x the floor's last answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bot.slack.rate_budget import METHOD_LIMITS, UNKNOWN_METHOD
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.replicas.harness import Cluster, Replica, cluster, text_of
from tests.slack.harness import BOT

QUESTION = re.compile(r"question (-?\d+)")
# At Slack's real pace the last answers come a while after the last mention.
SETTLE_S = 600.0
REPOSITORY = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0
TIER_3 = frozenset(name for name, limit in METHOD_LIMITS.items() if limit.per_minute == 45)


@dataclass
class Figures:
    replicas: int  # 0: the floor
    sent: int
    answered: int
    acks_ms: list[float]
    refused: int
    last_answer_s: float
    calls: Counter[str]
    max_in_flight: int
    rate_limited: int

    @property
    def throughput(self) -> float:
        return self.answered / self.last_answer_s if self.last_answer_s else 0.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@contextlib.asynccontextmanager
async def fresh_database(server: str) -> AsyncIterator[str]:
    """A new PostgreSQL database on `server`, dropped afterwards."""
    name = f"baton_bench_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(
        make_url(server).set(drivername="postgresql+asyncpg"), isolation_level="AUTOCOMMIT"
    )
    async with admin.connect() as connection:
        await connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as connection:
            await connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


def answer(latency: float) -> Callable[[RecordedRequest], Reply]:
    """The fake model: "Answer to N." after `latency` seconds."""

    def respond(request: RecordedRequest) -> Reply:
        asked = QUESTION.findall(text_of(request.messages[-1].get("content")))
        return Reply(text=f"Answer to {asked[-1] if asked else '?'}.", delay=latency)

    return respond


def answered(c: Cluster, channel: str, ts: str, n: int) -> bool:
    needle = f"Answer to {n}."
    return any(m.get("user") == BOT and needle in text_of(m) for m in c.thread(channel, ts)[1:])


async def start_floor(c: Cluster) -> Replica:
    """The floor's process, on the cluster's fakes, as a replica is."""
    floor = await c.run_module("floor", "bench.bolt_floor", cwd=REPOSITORY)
    await c.wait_healthy(floor)
    return floor


async def measure(
    server: str, *, replicas: int, mentions: int, over: float, latency: float, channels: int,
    people: int,
) -> Figures:  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        async with fresh_database(server) as url, cluster(Path(directory), database_url=url) as c:
            # The workspace's people exist before Baton starts (it reads them at start).
            for n in range(people):
                c.slack.add_user(f"UPERSON{n}", f"person{n}")
            started = await c.start(replicas) if replicas else [await start_floor(c)]
            c.llm.responder = answer(latency)
            # Warm up each replica (Bolt, database pools) before timing anything.
            warm = [await c.mention(r, f"question {-1 - i}") for i, r in enumerate(started)]
            await c.until(
                lambda: all(answered(c, "C1", ts, -1 - i) for i, ts in enumerate(warm)),
                within=120, what="the warm-up answers",
            )  # fmt: skip
            await asyncio.sleep(2)
            c.slack.clear_calls()
            c.llm.max_in_flight = 0
            c.slack.enforce_slack_limits()  # from full buckets

            acks: list[float] = []
            statuses: list[int] = []
            pending: dict[int, tuple[str, str]] = {}
            began = time.monotonic()

            async def send(n: int) -> None:
                await asyncio.sleep(max(0.0, began + n * over / mentions - time.monotonic()))
                channel = f"C{n % channels}"
                event = c.mention_event(
                    f"question {n}", channel=channel, user=f"UPERSON{n % people}"
                )
                pending[n] = (channel, event["ts"])
                sent = time.perf_counter()
                status = await c.send_event(started[n % len(started)], event)
                acks.append((time.perf_counter() - sent) * 1000)
                statuses.append(status)

            sending = asyncio.gather(*(send(n) for n in range(mentions)))
            last = began
            done = 0
            told = began
            while time.monotonic() - began < SETTLE_S:
                if time.monotonic() - told >= 30:
                    told = time.monotonic()
                    print(f"  ... {done}/{mentions} answered after {told - began:.0f} s")
                for n, (channel, ts) in list(pending.items()):
                    if answered(c, channel, ts, n):
                        del pending[n]
                        done += 1
                        last = time.monotonic()
                if done == mentions:
                    break
                await asyncio.sleep(0.2)
            await sending
            return Figures(
                replicas=replicas, sent=mentions, answered=done, acks_ms=acks,
                refused=sum(1 for s in statuses if s != 200), last_answer_s=last - began,
                calls=Counter(call.method for call in c.slack.calls if not call.rate_limited),
                max_in_flight=c.llm.max_in_flight,
                rate_limited=len(c.slack.rate_limited_calls()),
            )  # fmt: skip


def pacing_bound(calls: Counter[str]) -> tuple[float, str]:
    """The least time Baton's budget needs for these calls, and the method that sets it."""
    worst, method = 0.0, "-"
    for name, count in calls.items():
        limit = METHOD_LIMITS.get(name, UNKNOWN_METHOD)
        needed = max(0, count - limit.burst) * 60 / limit.per_minute
        if needed > worst:
            worst, method = needed, name
    return worst, method


def report(figures: Figures, *, latency: float) -> None:
    acks = figures.acks_ms
    if figures.replicas:
        print(f"--- {figures.replicas} replica{'s' if figures.replicas > 1 else ''}")
    else:
        print("--- floor: a minimal Bolt app, one message per mention, no model")
    print(f"answered        {figures.answered}/{figures.sent}   (refused acks: {figures.refused})")
    tier_3 = sum(n for name, n in figures.calls.items() if name in TIER_3)
    print(f"HTTP 429        {figures.rate_limited}   Tier-3 calls: {tier_3} "
          f"({tier_3 / max(1, figures.answered):.2f} a run)")  # fmt: skip
    print(
        f"ack latency     p50 {statistics.median(acks):7.1f} ms   "
        f"p99 {percentile(acks, 0.99):7.1f} ms   max {max(acks):7.1f} ms"
    )
    print(f"last answer     {figures.last_answer_s:6.1f} s after the first mention")
    print(f"throughput      {figures.throughput:6.2f} answers/s")
    if figures.replicas:
        print(f"model calls     at most {figures.max_in_flight} at once ({latency:.1f} s each)")
    bound, method = pacing_bound(figures.calls)
    print(f"Slack pacing needs at least {bound:5.1f} s (set by {method})")
    print("Slack Web API calls until the last answer:")
    for name, count in sorted(figures.calls.items()):
        limit = METHOD_LIMITS.get(name, UNKNOWN_METHOD)
        print(f"  {name:32} {count:5d} calls   budget {limit.per_minute:g}/min")


async def run(args: argparse.Namespace, server: str) -> None:
    results = []
    for replicas in (0, 1, 2)[: args.configs]:
        figures = await measure(
            server, replicas=replicas, mentions=args.mentions, over=args.over,
            latency=args.latency, channels=args.channels, people=args.people,
        )  # fmt: skip
        report(figures, latency=args.latency)
        results.append(figures)
    if len(results) < 3:
        return
    floor, one, two = results
    for figures in (one, two):
        ratio = figures.last_answer_s / floor.last_answer_s
        met = (
            figures.answered == figures.sent and figures.rate_limited == 0
            and ratio <= TARGET_RATIO
        )  # fmt: skip
        print(
            f"=== {figures.replicas} replica{'s' if figures.replicas > 1 else ''}: last answer "
            f"{figures.last_answer_s:.1f} s = {ratio:.2f}x the floor's {floor.last_answer_s:.1f} s "
            f"(target <= {TARGET_RATIO:g}x, all answered, no 429): {'met' if met else 'NOT met'}"
        )
    ratio = two.throughput / one.throughput if one.throughput else float("nan")
    print(f"=== throughput 2 replicas / 1 replica: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mentions", type=int, default=200)
    parser.add_argument("--over", type=float, default=10.0, help="seconds to send them over")
    parser.add_argument("--latency", type=float, default=0.5, help="the model's answer time")
    parser.add_argument("--channels", type=int, default=20, help="channels the threads are in")
    parser.add_argument(
        "--configs", type=int, default=3, help="run the floor, 1 and 2 replicas (or the first N)"
    )
    parser.add_argument(
        "--people", type=int, default=200, help="people who mention (default: one each)"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BATON_TEST_POSTGRES_URL"),
        help="a PostgreSQL server URL whose user may create databases "
        "(default: BATON_TEST_POSTGRES_URL)",
    )
    args = parser.parse_args()
    if not args.database_url:
        print(
            "bench.replicas needs PostgreSQL: set BATON_TEST_POSTGRES_URL or pass "
            "--database-url postgresql://user:password@host/postgres. Nothing was measured."
        )
        return
    print(
        f"{args.mentions} mentions over {args.over:g} s, one thread each in "
        f"{args.channels} channels, by {args.people} people; model answers in "
        f"{args.latency:g} s; "
        f"{os.cpu_count()} CPUs"
    )
    asyncio.run(run(args, args.database_url))


if __name__ == "__main__":
    main()
