"""Ack latency (P1): 50 concurrent mentions against `python -m bot`, beside a floor: a bare
aiohttp endpoint that answers 200, hit by the same client the same way.

Run: `.venv/bin/python -m bench.ack_latency [--mentions N] [--latency S] [--rounds R]
[--keep-alive] [--database-url URL]`. The bot runs on SQLite; and on PostgreSQL too when a server is
named (`--database-url postgresql://…`, or BATON_TEST_POSTGRES_URL), a fresh database
on it for the run, dropped afterwards. `--database-url sqlite` alone skips PostgreSQL.

Each configuration starts one `python -m bot` in HTTP mode (tests/replicas/harness.py:
the fake Slack and the fake model in this process, at Slack's real pace), the floor,
and the client, each a process of its own: the fakes' work for the bot's runs slows
neither the client nor the floor. Both servers are warmed up with one request; then,
per round, the floor and then the bot get `--mentions` app_mention deliveries at the
same instant, from 50 people in 5 channels, built and signed exactly as Slack sends
them, by the same aiohttp client, on new connections (with `--keep-alive`, on as many
connections opened beforehand and kept open). The bot's are answered by a model that
takes `--latency` seconds; the round ends when every one is answered.

Printed per configuration: the ack latency (the HTTP response time of the event POST,
what Slack waits for) of the bot and of the floor, p50, p99 and max over every round,
the bot's p99 as a multiple of the floor's (target: at most 1.5; with `--rounds`, each
round's too, since other work on the machine moves both), the time until every answer
was posted, and the Slack Web API calls made per run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.replicas import fresh_database
from bot.config import LimitsConfig
from bot.slack.server import EVENTS_PATH
from tests.fakes.openai_api import Reply
from tests.replicas.harness import Cluster, Replica, cluster, text_of
from tests.slack.harness import BOT, TEAM, sign

# At Slack's real pace the runs take a while to be answered: wait this long at most.
SETTLE_S = 600.0
TARGET_RATIO = 1.5
REPOSITORY = Path(__file__).resolve().parents[1]
CHANNELS = 5


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def person(n: int) -> str:
    # One person each: `limits.runs_per_user` would queue one person's many mentions.
    return f"UPERSON{n}"


# ------------------------------------------------------------------------ the floor


async def serve_floor(port: int) -> None:
    """The floor: a bare aiohttp endpoint that reads the body and answers 200."""

    async def handle_events(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200)

    async def handle_health(request: web.Request) -> web.Response:
        return web.Response(status=200, text="ok")

    app = web.Application()
    app.add_routes([web.post("/slack/events", handle_events), web.get("/healthz", handle_health)])
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()  # until the bench kills the process


async def start_floor(c: Cluster) -> Replica:
    """The floor's process, on a port of its own, started as a replica is."""
    port = c.environment("floor-port")["PORT"]
    floor = await c.run_module(
        "floor", "bench.ack_latency", "--serve-floor", port, cwd=REPOSITORY, PORT=port
    )
    await c.wait_healthy(floor)
    return floor


# --------------------------------------------------------------------- measuring


@dataclass
class Figures:
    database: str
    mentions: int
    latency: float
    bot_ms: list[float] = field(default_factory=list)
    floor_ms: list[float] = field(default_factory=list)
    answered_s: list[float] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    rounds: list[tuple[float, float]] = field(default_factory=list)  # p99s: Baton, floor

    @property
    def ratio(self) -> float:
        return percentile(self.bot_ms, 0.99) / percentile(self.floor_ms, 0.99)


def answered(c: Cluster, channel: str, ts: str) -> bool:
    return any(m.get("user") == BOT and "Answer." in text_of(m) for m in c.thread(channel, ts)[1:])


def delivery(event: dict[str, object], event_id: str) -> str:
    """The body of an Events API delivery of `event`, as Slack posts it."""
    return json.dumps({
        "token": "legacy", "team_id": TEAM, "api_app_id": "ABATON", "event": event,
        "type": "event_callback", "event_id": event_id, "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM, "user_id": BOT, "is_bot": True}],
    })  # fmt: skip


# ------------------------------------------------------------------------ the client


async def serve_client(keep_alive: bool) -> None:
    """The client, a process of its own (so neither the fakes' work nor the bench's
    bookkeeping delays what it reads): one burst per line of stdin, JSON `{"url": …,
    "bodies": […]}`; it signs each body as Slack does, posts them all at once, and
    answers a line `{"ms": […], "statuses": […]}`. Each burst opens new connections,
    unless `keep_alive`: then one session keeps its connections from burst to burst
    (`{"url": …, "warm": N}` opens N of them first with GET requests)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    kept = aiohttp.ClientSession(connector=aiohttp.TCPConnector(keepalive_timeout=3600))

    async def post(http: aiohttp.ClientSession, url: str, body: str) -> tuple[float, int]:
        headers = {"Content-Type": "application/json", **sign(body)}
        started = time.perf_counter()
        async with http.post(url, data=body, headers=headers) as response:
            await response.read()
        return (time.perf_counter() - started) * 1000, response.status

    async def get(http: aiohttp.ClientSession, url: str) -> tuple[float, int]:
        async with http.get(url) as response:
            await response.read()
        return 0.0, response.status

    try:
        while line := await reader.readline():
            burst = json.loads(line)
            async with contextlib.AsyncExitStack() as stack:
                http = (
                    kept if keep_alive else await stack.enter_async_context(aiohttp.ClientSession())
                )
                if "warm" in burst:
                    calls = [get(http, burst["url"]) for _ in range(burst["warm"])]
                else:
                    calls = [post(http, burst["url"], body) for body in burst["bodies"]]
                results = await asyncio.gather(*calls)
            answer = {"ms": [ms for ms, _ in results], "statuses": [s for _, s in results]}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        await kept.close()


@dataclass
class Client:
    process: asyncio.subprocess.Process

    @classmethod
    async def start(cls, *, keep_alive: bool) -> Client:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.ack_latency",
            "--serve-client", "kept" if keep_alive else "new", cwd=REPOSITORY,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process)

    async def ask(self, request: dict[str, object]) -> tuple[list[float], list[int]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        await self.process.stdin.drain()
        answer = json.loads(await self.process.stdout.readline())
        return answer["ms"], answer["statuses"]

    async def burst(self, url: str, bodies: list[str]) -> tuple[list[float], list[int]]:
        return await self.ask({"url": url, "bodies": bodies})

    async def open_connections(self, url: str, count: int) -> None:
        _, statuses = await self.ask({"url": url, "warm": count})
        assert set(statuses) == {200}, statuses

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


async def burst(
    c: Cluster, client: Client, target: Replica, mentions: int, label: str
) -> tuple[list[float], list[tuple[str, str]]]:
    """`mentions` signed deliveries at once; their latencies (ms), and (channel, ts) each."""
    events = [
        c.mention_event(f"{label} {n}", channel=f"C{n % CHANNELS}", user=person(n))
        for n in range(mentions)
    ]
    bodies = [delivery(event, f"Ev{label.replace(' ', '')}x{n}") for n, event in enumerate(events)]
    latencies, statuses = await client.burst(f"{target.url}{EVENTS_PATH}", bodies)
    refused = [s for s in statuses if s != 200]
    if refused:
        raise AssertionError(f"{len(refused)} deliveries refused ({refused[:3]})\n{c.logs()}")
    return latencies, [(str(e["channel"]), str(e["ts"])) for e in events]


async def measure(
    database: str, url: str, *, mentions: int, latency: float, rounds: int, keep_alive: bool
) -> Figures:
    figures = Figures(database=database, mentions=mentions, latency=latency)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        async with (
            cluster(root, database_url=url or f"sqlite:///{root / 'baton.db'}") as c,
            contextlib.AsyncExitStack() as stack,
        ):
            # The workspace's people exist before Baton starts (it reads them at start).
            for n in range(mentions):
                c.slack.add_user(person(n), f"person{n}")
            [bot] = await c.start(1)
            floor = await start_floor(c)
            client = await Client.start(keep_alive=keep_alive)
            stack.push_async_callback(client.close)
            c.llm.responder = lambda request: Reply(text="Answer.", delay=latency)
            # Warm up Bolt's auth.test, the database, and the client's first connections.
            _, [(_, warm)] = await burst(c, client, bot, 1, "warm-up")
            await c.until(lambda: answered(c, "C0", warm), within=120, what="the warm-up")
            await burst(c, client, floor, 1, "warm-up floor")
            if keep_alive:
                for target in (floor, bot):
                    await client.open_connections(f"{target.url}/healthz", mentions)
            for round_ in range(rounds):
                c.slack.clear_calls()
                floor_ms, _ = await burst(c, client, floor, mentions, f"floor {round_}")
                began = time.perf_counter()
                bot_ms, threads = await burst(c, client, bot, mentions, f"question {round_}")
                await c.until(
                    lambda threads=threads: all(answered(c, ch, ts) for ch, ts in threads),
                    within=SETTLE_S, what="every answer",
                )  # fmt: skip
                figures.answered_s.append(time.perf_counter() - began)
                figures.rounds.append((percentile(bot_ms, 0.99), percentile(floor_ms, 0.99)))
                figures.floor_ms += floor_ms
                figures.bot_ms += bot_ms
                figures.calls += Counter(call.method for call in c.slack.calls)
    return figures


def report(figures: Figures, *, rounds: int) -> None:
    def line(name: str, ms: list[float]) -> str:
        return (
            f"  {name:6} ack p50 {statistics.median(ms):7.1f} ms   "
            f"p99 {percentile(ms, 0.99):7.1f} ms   max {max(ms):7.1f} ms"
        )

    print(f"--- {figures.database}")
    print(line("Baton", figures.bot_ms))
    print(line("floor", figures.floor_ms))
    met = "met" if figures.ratio <= TARGET_RATIO else "NOT met"
    print(f"  p99 ratio {figures.ratio:.2f}x the floor (target <= {TARGET_RATIO:g}x): {met}")
    if rounds > 1:
        each = [bot / floor for bot, floor in figures.rounds]
        print(
            "  per round, p99 Baton / floor: "
            + ", ".join(f"{bot:.0f}/{floor:.0f} ms" for bot, floor in figures.rounds)
            + f"; median ratio {statistics.median(each):.2f}x"
        )
    # The default limits.runs lets that many run at once; the rest queue for a slot.
    waves = math.ceil(figures.mentions / (LimitsConfig().runs or figures.mentions))
    answered = ", ".join(f"{s:.2f} s" for s in figures.answered_s)
    print(
        f"  all answers posted after {answered} (ideal {waves * figures.latency:.1f} s: "
        f"{waves} wave{'s' if waves != 1 else ''} under the default limits.runs)"
    )
    runs = figures.mentions * rounds
    print(f"  Slack Web API calls per run: {sum(figures.calls.values()) / runs:.1f}")
    for method, count in sorted(figures.calls.items()):
        print(f"    {method:32} {count / runs:5.2f}")


async def run(args: argparse.Namespace) -> None:
    databases = [("SQLite", "")]
    if args.database_url and args.database_url != "sqlite":
        databases.append(("PostgreSQL", args.database_url))
    for name, server in databases:
        async with contextlib.AsyncExitStack() as stack:
            url = await stack.enter_async_context(fresh_database(server)) if server else ""
            figures = await measure(
                name, url, mentions=args.mentions, latency=args.latency, rounds=args.rounds,
                keep_alive=args.keep_alive,
            )  # fmt: skip
        report(figures, rounds=args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mentions", type=int, default=50)
    parser.add_argument("--latency", type=float, default=2.0, help="the model's answer time")
    parser.add_argument("--rounds", type=int, default=1, help="bursts per configuration")
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="send every burst on connections the client keeps open (default: new ones)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BATON_TEST_POSTGRES_URL"),
        help="a PostgreSQL server URL whose user may create databases, measured after "
        "SQLite (default: BATON_TEST_POSTGRES_URL); `sqlite` for SQLite alone",
    )
    parser.add_argument("--serve-floor", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-client", choices=["new", "kept"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        asyncio.run(serve_floor(args.serve_floor))
        return
    if args.serve_client:
        asyncio.run(serve_client(keep_alive=args.serve_client == "kept"))
        return
    print(
        f"{args.mentions} concurrent mentions, model latency {args.latency:.1f} s, "
        f"{args.rounds} round{'s' if args.rounds != 1 else ''}, "
        f"{'connections kept open' if args.keep_alive else 'new connections'}; "
        f"{os.cpu_count()} CPUs"
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
