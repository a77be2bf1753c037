"""The work behind glob: match a pattern while walking directory descriptors.

`*`, `?` and `[…]` match within one component, `**` matches any number of
directories. The walk opens each directory relative to its parent with `O_NOFOLLOW`;
`**` never descends through a symlink, a named component only through one that stays
inside the workspace (walked again from the root), and a symlink is reported only
when its target is inside. Baton's private files are never listed.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field

from bot.errors import WorkspaceError
from bot.tools.safe_open import identity, reopen
from bot.tools.workspace import Guard, Workspace

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "__pycache__"})
# Deeper trees are not searched: each level holds one descriptor open.
MAX_GLOB_DEPTH = 100
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(slots=True, kw_only=True)
class _Glob:
    workspace: Workspace
    guard: Guard
    parts: list[str]
    found: dict[str, float] = field(default_factory=dict)

    def match(self, dir_fd: int, real: tuple[str, ...], shown: tuple[str, ...], i: int) -> None:
        """Match `parts[i:]` below the directory `dir_fd` (real path `real`)."""
        if i == len(self.parts):
            if shown:
                self.found.setdefault("/".join(shown), os.fstat(dir_fd).st_mtime)
            return
        if len(shown) >= MAX_GLOB_DEPTH:
            return
        part = self.parts[i]
        entries = _entries(dir_fd)
        if part == "**":
            self.match(dir_fd, real, shown, i + 1)
            for name, st in entries:
                if stat.S_ISDIR(st.st_mode) and name not in SKIPPED_DIRS:
                    self._descend(dir_fd, name, real, shown, i)
            return
        last = i == len(self.parts) - 1
        for name, st in entries:
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


def _entries(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """A directory's entries with their own (not followed) status, in name order."""
    entries = []
    try:
        with os.scandir(dir_fd) as it:
            for entry in it:
                try:
                    entries.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue
    except OSError:
        return []
    return sorted(entries)


def _parts(pattern: str) -> list[str]:
    """The pattern's components; repeated `**` collapse, so the walk stays linear."""
    parts: list[str] = []
    for part in pattern.split("/"):
        if part in ("", ".") or (part == "**" and parts[-1:] == ["**"]):
            continue
        parts.append(part)
    return parts


def glob_paths(workspace: Workspace, path: str, pattern: str) -> list[str]:
    """Workspace-relative paths under directory `path` matching `pattern`, newest first."""
    opened = workspace.open_dir(path)
    try:
        state = _Glob(
            workspace=workspace,
            guard=workspace.guard(),
            parts=_parts(pattern),
        )
        real = opened.path.relative_to(workspace.root).parts
        state.match(opened.fd, real, (), 0)
    finally:
        opened.close()
    prefix = "" if opened.shown == "." else opened.shown + "/"
    ordered = sorted(state.found.items(), key=lambda item: (-item[1], item[0]))
    return [prefix + shown for shown, _ in ordered]
