"""Sandbox cost: what bubblewrap adds to one `bash` call.

Run: `make bench` or `.venv/bin/python -m bench.sandbox [--calls N]`.
Runs `true` N times through the Bash tool without and with the sandbox (a
workspace laid out like a real one: a git repository, `.baton/`, a database) and
prints the median and p90 wall time per call, and what the sandbox adds.
`--owner UID` (as root) gives the workspace to UID first, so the sandbox runs
commands as that owner (bwrap unprivileged, under a process limit).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bot.sandbox import Sandbox, SandboxPolicy
from bot.tools.shell import Bash, BashArgs
from bot.tools.workspace import Workspace

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--owner", type=int, help="uid to give the workspace to (as root)")
    args = parser.parse_args()
    asyncio.run(measure(args.calls, args.owner))


if __name__ == "__main__":
    main()
