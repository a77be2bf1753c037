"""Whom a sandboxed command runs as, and how many processes it may start.

When Baton runs as root (a container) and the workspace belongs to somebody else (a
host directory mounted into the container, a checkout owned by uid 1000), commands
run as the workspace's owner: bwrap is started with that uid and gid and no
supplementary groups, makes its own user namespace, and the command can write the
owner's files, makes files the owner owns, and is a repository's owner to git. Root
would be more than a command needs (exempt from the process limit, able to read
root's files in /etc, sharing root's keyring) and, its capabilities dropped, less
than it needs in a workspace of another owner ("Permission denied").

`run_as` is the one place that decides it; the runner probes that mode first.
"""

from __future__ import annotations

import os
import pwd
import resource
from pathlib import Path

# Processes (threads count too: the kernel counts tasks) one call may start beyond
# those its owner already has: generous enough for `make -j`, test runners and a JVM
# or two, far below what a fork bomb needs to hurt the machine. Scaled with the CPUs,
# since parallel builds are.
PROCESS_HEADROOM_MIN = 4096
PROCESS_HEADROOM_PER_CPU = 256


def run_as(workspace: Path) -> tuple[int, int] | None:
    """The uid and gid to run sandboxed commands as, or None to run them as Baton does.

    Only when Baton is root (effective uid 0) and the workspace's root directory
    belongs to another uid: then that uid, and the directory's group. A directory
    whose group is root (gid 0) gets the owner's primary group from the password
    database instead (or a group numbered like the uid, when the owner has no entry):
    root's group is a privilege the owner need not have.
    """
    if os.geteuid() != 0:
        return None
    try:
        info = os.stat(workspace)
    except OSError:
        return None
    if info.st_uid == 0:
        return None
    gid = info.st_gid
    if gid == 0:
        try:
            gid = pwd.getpwuid(info.st_uid).pw_gid
        except KeyError:
            gid = info.st_uid
        gid = gid or info.st_uid
    return info.st_uid, gid


def process_headroom(cpus: int | None = None) -> int:
    """How many processes one call may start beyond its owner's: see `PROCESS_HEADROOM_MIN`."""
    cpus = cpus or os.cpu_count() or 1
    return max(PROCESS_HEADROOM_MIN, PROCESS_HEADROOM_PER_CPU * cpus)


def tasks_of(uid: int) -> int:
    """About how many tasks (processes and their threads) `uid` runs now.

    Counted from /proc by each process's owner (its effective uid; the kernel counts
    the real one, which differs only for setuid programs).
    """
    count = 0
    try:
        entries = os.scandir("/proc")
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue  # gone meanwhile
    return count


def process_limit(uid: int, headroom: int) -> int:
    """RLIMIT_NPROC for a call run as `uid`: its tasks now plus `headroom`.

    Relative to what the owner already runs, because a kernel older than 5.14 counts
    all of the owner's tasks against it (newer ones count each user namespace, so
    each call, apart; the owner's other tasks then only make the limit more generous).
    Never above the hard limit Baton's processes inherit, which no sandboxed
    process may raise.
    """
    limit = tasks_of(uid) + headroom
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    return limit if hard == resource.RLIM_INFINITY else min(limit, hard)
