"""A hung test fails after the timeout and names what its tasks awaited; the run goes on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

HUNG_TESTS = """
import asyncio


async def wait_for_a_reply_that_never_comes(event: asyncio.Event) -> None:
    await event.wait()


async def test_hangs() -> None:
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_for_a_reply_that_never_comes(event))
    await waiter


def test_after_the_hang() -> None:
    assert True
"""


def test_a_hung_test_fails_and_shows_what_its_tasks_await(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(HUNG_TESTS)
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
            "-p", "tests.watchdog", "-o", "asyncio_mode=auto", "-o", "timeout=3",
            "-rA", str(tmp_path),
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 failed, 1 passed" in out, out  # the run went on after the hang
    assert "Timeout (>3.0s)" in out, out
    # The coroutine that waits forever is named, with the line it waits on.
    assert "asyncio task(s) still pending" in out, out
    assert "wait_for_a_reply_that_never_comes" in out, out
    assert "await event.wait()" in out, out
