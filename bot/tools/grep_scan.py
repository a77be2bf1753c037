"""The work behind grep: walk over descriptors, open each file once, match with RE2.

Runs in a worker thread. RE2 matches in time linear in the line, so no pattern can
freeze the bot, and google-re2 releases the GIL while it matches, so the event loop
keeps serving Slack while a search runs. A deadline (and a stop flag the tool sets
when it is cancelled) still bounds a search over a huge tree; the caller reports
what was found by then.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import re2

from bot.errors import ToolError, WorkspaceError
from bot.tools.cutoff import Cutoff
from bot.tools.safe_open import Walk, identity, reopen
from bot.tools.workspace import Guard, Workspace

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "__pycache__"})
MAX_GREP_FILE_BYTES = 5_000_000
MAX_GREP_LINE_CHARS = 500
# Lines matched between two looks at the clock and the stop flag.
LINES_PER_CHECK = 2_000

SecretCheck = Callable[[str], bool]
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


def compile_pattern(pattern: str, *, ignore_case: bool) -> Any:
    """Compile with RE2; syntax it does not have (backreferences, lookaround) is a ToolError."""
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise ToolError(
            f"invalid regular expression {pattern!r} for RE2 ({exc}); grep uses RE2 syntax, "
            "which has no backreferences or lookaround (see "
            "https://github.com/google/re2/wiki/Syntax)"
        ) from exc


@dataclass(slots=True, kw_only=True)
class GrepResult:
    """What a search found, and what it left out and why."""

    lines: list[str] = field(default_factory=list)
    total: int = 0
    secret: list[str] = field(default_factory=list)
    hard_linked: list[str] = field(default_factory=list)
    stopped: bool = False


@dataclass(slots=True, kw_only=True)
class _Search:
    workspace: Workspace
    guard: Guard
    regex: Any
    include: str | None
    limit: int
    is_secret: SecretCheck | None
    cutoff: Cutoff
    result: GrepResult = field(default_factory=GrepResult)

    def should_stop(self) -> bool:
        self.result.stopped = self.cutoff.reached()
        return self.result.stopped

    def file(self, fd: int, listed: str, real: str) -> None:
        """Search one opened file; `listed` is how it is shown, `real` what it really is."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or identity(st) in self.guard.private_ids:
            return
        if self.is_secret is not None and self.is_secret(real):
            # Secrets (.env, keys) are read only through read_file, which asks a person.
            self.result.secret.append(listed)
            return
        if st.st_nlink > 1:
            # Maybe a file from outside; read_file asks a person before reading it.
            self.result.hard_linked.append(listed)
            return
        if st.st_size > MAX_GREP_FILE_BYTES:
            return
        data = os.pread(fd, MAX_GREP_FILE_BYTES + 1, 0)
        if b"\x00" in data[:8192]:
            return
        for number, line in enumerate(data.splitlines(), 1):
            if number % LINES_PER_CHECK == 0 and self.should_stop():
                return
            if self.regex.search(line):
                self.result.total += 1
                if len(self.result.lines) < self.limit:
                    text = line.decode("utf-8", errors="replace")
                    if len(text) > MAX_GREP_LINE_CHARS:
                        text = text[:MAX_GREP_LINE_CHARS] + "…"
                    self.result.lines.append(f"{listed}:{number}: {text}")

    def included(self, name: str, listed: str) -> bool:
        if not self.include:
            return True
        return fnmatch.fnmatch(name, self.include) or fnmatch.fnmatch(listed, self.include)

    def entry(self, dir_fd: int, name: str, listed: str, real: str) -> None:
        """Open a directory entry without following it; a symlink is walked from the root."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                self.file(fd, listed, real)
            finally:
                os.close(fd)
            return
        try:
            with self.workspace.locate(real) as target:
                self.linked(target, listed)
        except (WorkspaceError, OSError):
            # Leads out of the workspace, or vanished: never followed, never reported.
            return

    def linked(self, target: Walk, listed: str) -> None:
        if target.stat is None or not stat.S_ISREG(target.stat.st_mode):
            return
        try:
            fd = reopen(target, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            if identity(os.fstat(fd)) == identity(target.stat):
                real = self.workspace.relative(self.workspace.root.joinpath(*target.parts))
                self.file(fd, listed, real)
        finally:
            os.close(fd)

    def tree(self, top_fd: int, top: str) -> None:
        """Search a directory tree; `top` is its real workspace-relative path."""
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(
            ".", dir_fd=top_fd, follow_symlinks=False
        ):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            below = os.path.normpath(dirpath)
            for name in sorted(filenames):
                if self.should_stop():
                    return
                # Directories are walked without following links, so the name listed is
                # the entry's real path; only a symlink entry leads somewhere else.
                listed = _join(top, below, name)
                if self.included(name, listed):
                    self.entry(dir_fd, name, listed, listed)


def _join(*parts: str) -> str:
    return os.path.normpath(os.path.join(*parts))


def search(
    workspace: Workspace,
    path: str,
    regex: Any,
    *,
    include: str | None,
    limit: int,
    is_secret: SecretCheck | None,
    cutoff: Cutoff,
) -> GrepResult:
    """Search `path` (a file or a directory tree) in the workspace for lines matching `regex`.

    Stops, with the lines found so far and `stopped` set, once `cutoff` is reached.
    """
    guard = workspace.guard()
    state = _Search(
        workspace=workspace,
        guard=guard,
        regex=regex,
        include=include,
        limit=limit,
        is_secret=is_secret,
        cutoff=cutoff,
    )
    with workspace.locate(path) as found:
        shown = workspace.relative(workspace.root.joinpath(*found.parts))
        if found.stat is None:
            raise ToolError(f"{shown} does not exist")
        workspace.refuse_private(path, found, guard)
        if stat.S_ISDIR(found.stat.st_mode):
            top_fd = reopen(found, os.O_RDONLY)
            try:
                state.tree(top_fd, shown)
            finally:
                os.close(top_fd)
        elif state.included(found.name, shown):
            state.linked(found, shown)
    return state.result
