"""When a test hangs: what each asyncio task of its event loop awaits, shown just before
pytest-timeout fails it.

pytest-timeout's own dump shows the main thread waiting in the loop's `select`, which
says nothing of the coroutine that waits forever. So shortly before the timeout, a
timer thread asks the running loop (found in the main thread's frames) to print every
task's stack; the test's captured stderr then holds it.

A pytest plugin, loaded with `-p tests.watchdog` (pyproject's `addopts`).
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

LEAD_S = 10.0  # the tasks are shown this long before the timeout


def running_loop(frame: FrameType | None) -> asyncio.AbstractEventLoop | None:
    """The event loop whose `run_forever` (or a method it calls) is on this stack."""
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, asyncio.AbstractEventLoop) and candidate.is_running():
            return candidate
        frame = frame.f_back
    return None


def describe_tasks(loop: asyncio.AbstractEventLoop) -> str:
    out = io.StringIO()
    tasks = asyncio.all_tasks(loop)
    out.write(f"--- {len(tasks)} asyncio task(s) still pending ---\n")
    for task in tasks:
        task.print_stack(limit=12, file=out)
    return out.getvalue()


def _show_tasks() -> None:
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    loop = running_loop(frame)
    if loop is None:
        print("--- watchdog: no running event loop in the main thread ---", file=sys.stderr)
        return

    def show() -> None:
        print(describe_tasks(loop), file=sys.stderr, flush=True)

    # In the loop's own thread: the tasks are not changed under the walk.
    loop.call_soon_threadsafe(show)


def start(item: pytest.Item) -> threading.Timer | None:
    """A timer that shows the loop's tasks `LEAD_S` before the test's timeout."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        timeout = float(marker.args[0])
    else:
        timeout = float(item.config.getini("timeout") or 0)
    if timeout <= 0:
        return None
    timer = threading.Timer(max(timeout - LEAD_S, timeout * 0.8), _show_tasks)
    timer.daemon = True
    timer.start()
    return timer


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    timer = start(item)
    try:
        return (yield)
    finally:
        if timer is not None:
            timer.cancel()
