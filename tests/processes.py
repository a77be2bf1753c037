"""Helpers to check that processes started by tools are really gone."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import aiohttp


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie waiting to be reaped counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def running_with(*marks: str) -> list[int]:
    """Processes (other than this one) whose command line contains any of `marks`.

    A sandboxed command lives in its own PID namespace, so the pid it sees of itself
    (`$$`) means nothing outside; a mark in its arguments finds it from here.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(mark in cmdline for mark in marks) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


async def wait_until_healthy(
    http: aiohttp.ClientSession, base: str, process: asyncio.subprocess.Process, within: float = 30
) -> None:
    """Wait for a started bot to answer `GET /healthz`; fail with its stderr if it died."""
    deadline = time.monotonic() + within
    while True:
        try:
            async with http.get(f"{base}/healthz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        assert time.monotonic() < deadline, "the bot did not start"
        if process.returncode is not None:
            stderr = await process.stderr.read() if process.stderr else b""
            raise AssertionError(f"the bot exited: {stderr.decode(errors='replace')}")
        await asyncio.sleep(0.1)


def bot_environment(**values: str) -> dict[str, str]:
    """This process's environment without Slack's, OpenAI's, OpenTelemetry's and Baton's
    variables, plus `values`.

    What a `python -m bot` started by a test sees: nothing of the developer's own
    tokens or configuration leaks in.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLACK_", "OPENAI_", "BATON_", "OTEL_")) and name != "DATABASE_URL"
    }
    env.update(values)
    return env


async def start_bot(cwd: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    """`python -m bot` as a real process, its output captured."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
