"""Memory: the RSS of a `python -m bot` replica idle, and with 200 threads at once.

Run: `.venv/bin/python -m bench.memory [--threads N] [--latency S] [--channels N]
[--people N] [--settle S]`.

Baton runs as a real process in HTTP mode (tests/replicas/harness.py) on a SQLite
file, against the fake Slack and the fake model, with `limits.runs: 0`,
`model_calls.max_concurrent` at `--threads` and a stall timeout past `--latency`, so
that every thread may run at once.
It starts once on the new database, which it migrates, and is stopped; the replica
measured is the next start, on the migrated database, as every start of a deployment
but its first finds it (migrating imports Alembic, about 10 MB a replica keeps: the
first start's RSS is printed too). That replica answers one mention; a few seconds
later its RSS is read from /proc/<pid>/status (VmRSS, and VmHWM: the most it ever
held): **idle**. Then `--threads` mentions arrive at once, each starting a thread of
its own (in `--channels` channels, by `--people` people), with a model that answers
after `--latency` seconds. RSS is sampled four times a second: **under load** is the
RSS when the most runs were waiting on the model at once (their number is printed);
then the most sampled, and the RSS once every thread is answered (Baton's answers go
at Slack's real pace, so this takes minutes; `--settle` caps the wait).

The floor, measured the same way in the same run: a minimal Bolt AsyncApp on the same
aiohttp server, one listener posting one message per mention (bench/bolt_floor.py),
idle after one answer and after the same mentions.

Targets: Baton idle ≤ 150 MB, with 200 threads at once ≤ 200 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.replicas import answer, answered
from tests.replicas.harness import Cluster, Replica, cluster
from tests.slack.harness import ALICE

# Where `python -m bench.bolt_floor` is found.
REPOSITORY = Path(__file__).resolve().parents[1]
IDLE_TARGET_MB = 150.0
LOAD_TARGET_MB = 200.0
# After the first answer: what the answer started (Slack writes, the session's rows) is
# done, and nothing else is expected to happen.
IDLE_AFTER_S = 3.0
SAMPLE_EVERY_S = 0.25
# The model's answer to the first mention, before the idle figure.
FIRST_LATENCY_S = 0.5


@dataclass
class Memory:
    """RSS figures of one process, in MB (2**20 bytes)."""

    idle: float = 0.0
    idle_peak: float = 0.0  # VmHWM at idle: the most start-up and the first answer took
    under_load: float | None = None  # when the most runs waited on the model (Baton only)
    waiting: int = 0  # how many runs waited on the model then
    most: float = 0.0  # the most sampled while the threads ran
    after: float = 0.0  # once every thread is answered (or `--settle` ran out)
    peak: float = 0.0  # VmHWM at the end
    answered: int = 0
    load_s: float = 0.0  # first mention to last answer


def status_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of `pid`, in MB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) / 1024
    return found


def person(n: int) -> str:
    return ALICE if n == 0 else f"UPERSON{n}"


async def launch(c: Cluster, name: str, module: str, cwd: Path, **extra: str) -> Replica:
    """`python -m module` in `cwd`, with the environment a replica gets; once healthy."""
    replica = await c.run_module(name, module, cwd=cwd, **extra)
    await c.wait_healthy(replica)
    return replica


async def measure(
    c: Cluster, replica: Replica, *, threads: int, channels: int, people: int, latency: float,
    settle: float, uses_model: bool,
) -> Memory:  # fmt: skip
    pid = replica.process.pid
    figures = Memory()
    c.llm.responder = answer(FIRST_LATENCY_S)
    first = await c.mention(replica, "question -1", channel="C0", user=ALICE)
    await c.until(lambda: answered(c, "C0", first, -1), within=120, what="the first answer")
    await asyncio.sleep(IDLE_AFTER_S)
    idle = status_mb(pid)
    figures.idle, figures.idle_peak = idle["VmRSS"], idle["VmHWM"]

    c.llm.responder = answer(latency)
    sampling = True

    async def sample() -> None:
        while sampling:
            rss, waiting = status_mb(pid)["VmRSS"], c.llm.in_flight
            figures.most = max(figures.most, rss)
            if uses_model and waiting > figures.waiting:
                figures.waiting, figures.under_load = waiting, rss
            await asyncio.sleep(SAMPLE_EVERY_S)

    sampler = asyncio.create_task(sample())
    events = [
        c.mention_event(f"question {n}", channel=f"C{n % channels}", user=person(n % people))
        for n in range(threads)
    ]
    began = time.monotonic()
    statuses = await asyncio.gather(*(c.send_event(replica, event) for event in events))
    if refused := sum(1 for status in statuses if status != 200):
        print(f"  ({refused} mentions were not acked 200)")
    pending = {n: (str(e["channel"]), str(e["ts"])) for n, e in enumerate(events)}
    deadline = time.monotonic() + settle
    while pending and time.monotonic() < deadline:
        for n, (channel, ts) in list(pending.items()):
            if answered(c, channel, ts, n):
                del pending[n]
        await asyncio.sleep(0.2)
    figures.load_s = time.monotonic() - began
    figures.answered = threads - len(pending)
    sampling = False
    await sampler
    end = status_mb(pid)
    figures.after, figures.peak = end["VmRSS"], end["VmHWM"]
    figures.most = max(figures.most, figures.after)
    return figures


def baton_config(root: Path, threads: int) -> Path:
    """Every thread may run at once: no run limits, a model call each, and a model that
    may think as long as `--latency` says without being taken for stalled."""
    path = root / "baton.yaml"
    path.write_text(
        "limits: {runs: 0, runs_per_user: 0}\n"
        f"model_calls: {{max_concurrent: {max(threads, 1)}, stall_timeout_s: 600}}\n"
    )
    return path


def report(name: str, m: Memory, *, threads: int, floor: Memory | None = None) -> None:
    def beside(value: float, floor_value: float | None) -> str:
        if floor_value is None:
            return f"{value:7.1f} MB"
        return f"{value:7.1f} MB   (floor {floor_value:6.1f} MB, +{value - floor_value:5.1f})"

    print(f"--- {name}")
    print(f"idle after one answer   VmRSS {beside(m.idle, floor and floor.idle)}")
    print(f"                        VmHWM {beside(m.idle_peak, floor and floor.idle_peak)}")
    if m.under_load is not None:
        print(
            f"under load              VmRSS {m.under_load:7.1f} MB   "
            f"({m.waiting} runs waiting on the model at once)"
        )
    print(f"{threads} threads, most seen  VmRSS {beside(m.most, floor and floor.most)}")
    print(f"all answered            VmRSS {beside(m.after, floor and floor.after)}")
    print(f"                        VmHWM {beside(m.peak, floor and floor.peak)}")
    print(f"answered {m.answered}/{threads} in {m.load_s:.1f} s")


def verdict(value: float, target: float) -> str:
    return f"{value:.1f} MB (target ≤ {target:.0f}: {'met' if value <= target else 'NOT met'})"


async def run(args: argparse.Namespace) -> None:
    load = {
        "threads": args.threads, "channels": args.channels, "people": args.people,
        "latency": args.latency, "settle": args.settle,
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        async with cluster(root, database_url=f"sqlite:///{root / 'baton.db'}") as c:
            for n in range(1, args.people):
                c.slack.add_user(person(n), f"person{n}")
            floor_process = await launch(c, "floor", "bench.bolt_floor", REPOSITORY)
            floor = await measure(c, floor_process, **load, uses_model=False)
            floor_process.process.kill()
            config = str(baton_config(root, args.threads))
            migrating = await launch(c, "first", "bot", root, BATON_CONFIG=config)
            first_start = status_mb(migrating.process.pid)["VmRSS"]
            c.terminate(migrating)
            await c.exit_code(migrating)
            replica = await launch(c, "baton", "bot", root, BATON_CONFIG=config)
            baton = await measure(c, replica, **load, uses_model=True)
    report("floor: a minimal Bolt AsyncApp", floor, threads=args.threads)
    report("Baton (python -m bot)", baton, threads=args.threads, floor=floor)
    print(f"(its first start, migrating the new database, held {first_start:.1f} MB once ready)")
    under_load = max(baton.most, baton.under_load or 0.0)
    print(
        f"=== idle {verdict(baton.idle, IDLE_TARGET_MB)}; {args.threads} threads "
        f"{verdict(under_load, LOAD_TARGET_MB)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=200, help="mentions sent at once")
    parser.add_argument(
        "--latency", type=float, default=60.0, help="the model's answer time under load (s): "
        "long enough that the runs wait on it together",
    )  # fmt: skip
    parser.add_argument("--channels", type=int, default=20, help="channels the threads are in")
    parser.add_argument("--people", type=int, default=20, help="people who mention")
    parser.add_argument(
        "--settle", type=float, default=900.0, help="seconds to wait for every answer at most"
    )
    args = parser.parse_args()
    print(
        f"{args.threads} threads at once in {args.channels} channels by {args.people} people, "
        f"model answers in {args.latency:g} s"
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
