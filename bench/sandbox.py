"""Sandbox cost: what bubblewrap adds to one `bash` call, and what judging one costs.

Run: `make bench` or `.venv/bin/python -m bench.sandbox [--calls N]`.
Runs `true` N times through the Bash tool without and with the sandbox (a
workspace laid out like a real one: a git repository, `.baton/`, a database) and
prints the median and p90 wall time per call, and what the sandbox adds.
`--owner UID` (as root) gives the workspace to UID first, so the sandbox runs
commands as that owner (bwrap unprivileged, under a process limit).

Then the permission check (the hook, on its worker thread, as the engine calls it):
p50 and p99 for a typical command beside the floor of one bare tree-sitter parse of
it; the time until an 80 KB pipeline of 40,000 parts gets its question, and the
largest command judged in full (256 parts), each beside a bare thread hop; and
the bot's ack latency for mentions while those are judged over and over, beside the
same acks with nothing judged.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bot.engine.hooks import ToolInvocation
from bot.permissions.bash_tree import parse_tree
from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.sandbox import Sandbox, SandboxPolicy
from bot.tools.shell import Bash, BashArgs
from bot.tools.workspace import Workspace
from tests.fakes.openai_api import Reply
from tests.slack.harness import SlackHarness, start_harness

TARGET_MS = 50.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def make_workspace(root: Path) -> Workspace:
    (root / ".baton" / "agents").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    database = root / "baton.db"
    sqlite3.connect(database).close()
    return Workspace(root, private_files=[database])


async def timed_calls(bash: Bash, calls: int) -> list[float]:
    """Milliseconds per call of `true`, after one untimed warm-up call."""
    args = BashArgs(command="true")
    await bash.run(args)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        out = await bash.run(args)
        times.append((time.perf_counter() - started) * 1000)
        if out != "exit code 0 (no output)":
            raise SystemExit(f"unexpected output: {out!r}")
    return times


def give(root: Path, uid: int) -> None:
    """The workspace to `uid` (its parent readable by all, for the owner's bwrap)."""
    root.parent.chmod(0o755)
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)


async def measure(calls: int, owner: int | None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        workspace = make_workspace(Path(directory) / "ws")
        if owner is not None:
            give(workspace.root, owner)
        policy = SandboxPolicy.for_workspace(workspace.root, databases=workspace.private_files)
        sandbox = await Sandbox.probe(policy)
        if not sandbox.available:
            raise SystemExit(f"no sandbox on this machine: {sandbox.reason}")
        plain = await timed_calls(Bash(workspace), calls)
        boxed = await timed_calls(Bash(workspace, sandbox=sandbox, policy=policy), calls)
    print(f"{calls} calls of `true` through the Bash tool ({sandbox.reason})")
    print(f"{'':14}{'median':>10}{'p90':>10}")
    for name, times in (("unsandboxed", plain), ("sandboxed", boxed)):
        median, p90 = statistics.median(times), percentile(times, 0.9)
        print(f"{name:14}{median:8.1f} ms{p90:7.1f} ms")
    added = statistics.median(boxed) - statistics.median(plain)
    verdict = "within" if added < TARGET_MS else "OVER"
    print(
        f"sandbox adds  {added:8.1f} ms per call (median; target < {TARGET_MS:.0f} ms: {verdict})"
    )


TYPICAL = "git log --oneline -5 | head -3 && rg -n 'def main' src --glob '*.py' 2>/dev/null"
HUGE = "|".join(["x"] * 40_000)
_FRESH = itertools.count()


def largest() -> str:
    """The most Baton judges in full: 256 parts, each with a substitution; new words each
    time, so no cache of an earlier call's words helps."""
    k = next(_FRESH)
    return " && ".join(f'grep -n "$(echo pattern-{k}-{n})" src/f-{k}-{n}.py' for n in range(256))


RULES = PermissionRules.parse(
    allow=["bash(git *)", "bash(rg *)", "bash(head *)", "bash(grep *)"], deny=["bash(rm *)"]
)


def invocation(workspace: Workspace, command: str) -> ToolInvocation:
    bash = Bash(workspace)
    return ToolInvocation(call_id="b", tool=bash, arguments=BashArgs(command=command),
                          raw_arguments="{}")  # fmt: skip


async def judged_ms(
    hook: PermissionHook, make: Callable[[], ToolInvocation], times: int
) -> list[float]:
    found = []
    for _ in range(times):
        call = make()
        started = time.perf_counter()
        await hook(call)
        found.append((time.perf_counter() - started) * 1000)
    return found


async def hop_ms(times: int) -> list[float]:
    found = []
    for _ in range(times):
        started = time.perf_counter()
        await asyncio.to_thread(lambda: None)
        found.append((time.perf_counter() - started) * 1000)
    return found


def parse_ms(command: str, times: int) -> list[float]:
    found = []
    for _ in range(times):
        started = time.perf_counter()
        parse_tree(command)
        found.append((time.perf_counter() - started) * 1000)
    return found


def row(name: str, times: list[float]) -> str:
    return f"{name:44}{statistics.median(times):9.2f} ms{percentile(times, 0.99):9.2f} ms"


async def measure_judging(calls: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        workspace = make_workspace(Path(directory) / "ws")
        hook = PermissionHook(RULES, workspace)
        for command in (TYPICAL, HUGE, largest()):
            await hook(invocation(workspace, command))  # warm up
        decision = await hook(invocation(workspace, HUGE))
        print(f"\npermission check ({calls} calls each)        {'p50':>9}{'p99':>12}")
        print(row("typical command, judged", await judged_ms(
            hook, lambda: invocation(workspace, TYPICAL), calls)))  # fmt: skip
        print(row("  floor: one bare tree-sitter parse", parse_ms(TYPICAL, calls)))
        print(row("80 KB pipeline, until its question", await judged_ms(
            hook, lambda: invocation(workspace, HUGE), calls)))  # fmt: skip
        print(row("256 parts (new words each time), judged in full", await judged_ms(
            hook, lambda: invocation(workspace, largest()), max(5, calls // 5))))  # fmt: skip
        print(row("  floor: a bare hop to a worker thread", await hop_ms(calls)))
        print(f"  (the 80 KB pipeline: {decision.action}, {decision.reason[:70]}...)")
    await measure_acks(calls)


async def measure_acks(mentions: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        async for harness in start_harness(Path(directory)):
            harness.llm.responder = lambda request: Reply(text="Answer.")
            await harness.mention("warm-up")
            await harness.settle(within=60)
            quiet = await acks(harness, mentions)
            await harness.settle(within=60)
            hook = PermissionHook(RULES, harness.baton.workspace)
            huge = await acks_while(harness, mentions, hook, HUGE)
            full = await acks_while(harness, mentions, hook, None)
    print(f"\nack latency, {mentions} mentions one after another {'p50':>3}{'p99':>12}")
    print(row("  floor: nothing being judged", quiet))
    print(row("while 2 tasks judge the 80 KB pipeline", huge))
    print(row("while 2 tasks judge 256-part commands", full))


async def acks_while(
    harness: SlackHarness, mentions: int, hook: PermissionHook, command: str | None
) -> list[float]:
    """Ack latencies while two tasks keep the judge busy with `command` (None: largest())."""
    workspace = harness.baton.workspace
    judges = [asyncio.create_task(judge_until(hook, workspace, command)) for _ in range(2)]
    try:
        return await acks(harness, mentions)
    finally:
        for judge in judges:
            judge.cancel()
        await asyncio.gather(*judges, return_exceptions=True)
        await harness.settle(within=60)


async def judge_until(hook: PermissionHook, workspace: Workspace, command: str | None) -> None:
    """Judge `command` (or a new largest one each time) until cancelled."""
    while True:
        await hook(invocation(workspace, command or largest()))


async def acks(harness: SlackHarness, mentions: int) -> list[float]:
    """Milliseconds until Slack would have our HTTP 200, per mention, one after another."""
    found = []
    for n in range(mentions):
        started = time.perf_counter()
        await harness.mention(f"question {n}")
        found.append((time.perf_counter() - started) * 1000)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--owner", type=int, help="uid to give the workspace to (as root)")
    args = parser.parse_args()
    asyncio.run(measure(args.calls, args.owner))
    asyncio.run(measure_judging(args.calls))


if __name__ == "__main__":
    main()
