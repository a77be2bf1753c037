"""The work behind glob: match a pattern while walking directory descriptors.

`*`, `?` and `[…]` match within one component, `**` matches any number of
directories. The walk opens each directory relative to its parent with `O_NOFOLLOW`;
`**` never descends through a symlink, a named component only through one that stays
inside the workspace (walked again from the root), and a symlink is reported only
when its target is inside. Baton's private files are never listed.

The walk is polynomial: it remembers each (directory, pattern position) pair it has
matched, so neither `**` nor links back up the tree (`ln -s . l`) revisit a state, and a
pattern has at most `MAX_GLOB_PARTS` components. A deadline and a stop flag (set when
the tool call is cancelled) still bound it; the caller then reports partial results.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field

from bot.errors import ToolError, WorkspaceError
from bot.tools.cutoff import Cutoff
from bot.tools.safe_open import identity, reopen
from bot.tools.workspace import Guard, Workspace

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "__pycache__"})
# Deeper trees are not searched: each level holds one descriptor open.
MAX_GLOB_DEPTH = 100
# Longer patterns are refused: the work grows with directories times components.
MAX_GLOB_PARTS = 64
# Directory entries read between two looks at the clock and the stop flag.
ENTRIES_PER_CHECK = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(slots=True)
class GlobResult:
    """Matching workspace-relative paths, newest first; `stopped` if cut short."""

    paths: list[str]
    stopped: bool = False


@dataclass(slots=True, kw_only=True)
class _Glob:
    workspace: Workspace
    guard: Guard
    parts: list[str]
    cutoff: Cutoff
    found: dict[str, float] = field(default_factory=dict)
    # (st_dev, st_ino, pattern position) already matched: each is matched once.
    seen: set[tuple[int, int, int]] = field(default_factory=set)

    @property
    def stopped(self) -> bool:
        return self.cutoff.hit

    def should_stop(self) -> bool:
        return self.cutoff.reached()

    def match(self, dir_fd: int, real: tuple[str, ...], shown: tuple[str, ...], i: int) -> None:
        """Match `parts[i:]` below the directory `dir_fd` (real path `real`)."""
        if self.should_stop():
            return
        try:
            st = os.fstat(dir_fd)
        except OSError:
            return
        # The same directory at the same position matches the same names below it: only
        # the first path that reaches it is walked (others are aliases through links).
        state = (st.st_dev, st.st_ino, i)
        if state in self.seen:
            return
        self.seen.add(state)
        if i == len(self.parts):
            if shown:
                self.found.setdefault("/".join(shown), st.st_mtime)
            return
        if len(shown) >= MAX_GLOB_DEPTH:
            return
        part = self.parts[i]
        entries = self._entries(dir_fd)
        if part == "**":
            self.match(dir_fd, real, shown, i + 1)
            for name, st in entries:
                if self.stopped:
                    return
                if stat.S_ISDIR(st.st_mode) and name not in SKIPPED_DIRS:
                    self._descend(dir_fd, name, real, shown, i)
            return
        last = i == len(self.parts) - 1
        # Real directories before links, so a directory reached both ways is shown by
        # its own path.
        entries.sort(key=lambda entry: stat.S_ISLNK(entry[1].st_mode))
        for n, (name, st) in enumerate(entries):
            if self.stopped or (n % ENTRIES_PER_CHECK == 0 and self.should_stop()):
                return
            if name in SKIPPED_DIRS or not fnmatch.fnmatchcase(name, part):
                continue
            if last:
                self._report(name, st, real, shown)
            elif stat.S_ISDIR(st.st_mode):
                self._descend(dir_fd, name, real, shown, i + 1)
            elif stat.S_ISLNK(st.st_mode):
                self._descend_link(name, real, shown, i + 1)

    def _descend(
        self, dir_fd: int, name: str, real: tuple[str, ...], shown: tuple[str, ...], i: int
    ) -> None:
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            return
        try:
            self.match(sub, (*real, name), (*shown, name), i)
        finally:
            os.close(sub)

    def _descend_link(
        self, name: str, real: tuple[str, ...], shown: tuple[str, ...], i: int
    ) -> None:
        try:
            with self.workspace.locate("/".join((*real, name))) as target:
                if target.stat is None or not stat.S_ISDIR(target.stat.st_mode):
                    return
                sub = reopen(target, os.O_RDONLY)
                try:
                    self.match(sub, target.parts, (*shown, name), i)
                finally:
                    os.close(sub)
        except (WorkspaceError, OSError):
            return

    def _report(
        self, name: str, st: os.stat_result, real: tuple[str, ...], shown: tuple[str, ...]
    ) -> None:
        if stat.S_ISLNK(st.st_mode):
            try:
                with self.workspace.locate("/".join((*real, name))) as target:
                    if target.stat is None or self.workspace.is_private(target, self.guard):
                        return
                    st = target.stat
            except (WorkspaceError, OSError):
                # A link out of the workspace is never reported, nor where it leads.
                return
        elif identity(st) in self.guard.private_ids:
            return
        self.found.setdefault("/".join((*shown, name)), st.st_mtime)

    def _entries(self, dir_fd: int) -> list[tuple[str, os.stat_result]]:
        """A directory's entries with their own (not followed) status, in name order."""
        entries = []
        try:
            with os.scandir(dir_fd) as it:
                for n, entry in enumerate(it, 1):
                    if n % ENTRIES_PER_CHECK == 0 and self.should_stop():
                        break
                    try:
                        entries.append((entry.name, entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue
        except OSError:
            return []
        return sorted(entries)


def pattern_parts(pattern: str) -> list[str]:
    """The pattern's components; repeated `**` collapse, so the walk stays linear.

    Raises:
        ToolError: The pattern has more than `MAX_GLOB_PARTS` components.
    """
    parts: list[str] = []
    for part in pattern.split("/"):
        if part in ("", ".") or (part == "**" and parts[-1:] == ["**"]):
            continue
        parts.append(part)
        if len(parts) > MAX_GLOB_PARTS:
            raise ToolError(
                f"the pattern has more than {MAX_GLOB_PARTS} components; use a shorter one "
                "(or start from a deeper path)"
            )
    return parts


def glob_paths(
    workspace: Workspace,
    path: str,
    pattern: str,
    *,
    cutoff: Cutoff,
) -> GlobResult:
    """Workspace-relative paths under directory `path` matching `pattern`, newest first.

    Stops, with the paths found so far and `stopped` set, once `cutoff` is reached.
    """
    parts = pattern_parts(pattern)
    opened = workspace.open_dir(path)
    try:
        state = _Glob(
            workspace=workspace,
            guard=workspace.guard(),
            parts=parts,
            cutoff=cutoff,
        )
        real = opened.path.relative_to(workspace.root).parts
        state.match(opened.fd, real, (), 0)
    finally:
        opened.close()
    prefix = "" if opened.shown == "." else opened.shown + "/"
    ordered = sorted(state.found.items(), key=lambda item: (-item[1], item[0]))
    return GlobResult([prefix + shown for shown, _ in ordered], stopped=state.stopped)
