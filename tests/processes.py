"""Helpers to check that processes started by tools are really gone."""

from __future__ import annotations

import os
from pathlib import Path


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
