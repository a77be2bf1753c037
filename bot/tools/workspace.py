"""The workspace jail: every path a tool touches is resolved and checked here."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Iterable
from pathlib import Path, PurePath

from bot.errors import WorkspaceError

PROTECTED_DIR = ".baton"


class Workspace:
    """A directory the tools may work in, and the paths inside it no tool may write.

    Paths are resolved with symlinks followed, so a link that leads out of the
    workspace is caught however it is spelled. `<root>/.baton/` and any extra
    protected files (the config file) are readable but never writable.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        protected_files: Iterable[Path | str] = (),
        private_files: Iterable[Path | str] = (),
    ) -> None:
        root_path = Path(root).expanduser()
        if not root_path.is_dir():
            raise WorkspaceError(f"the workspace {root_path} is not a directory")
        self.root = root_path.resolve()
        self.protected_dir = self.root / PROTECTED_DIR
        self.protected_files = frozenset(Path(p).expanduser().resolve() for p in protected_files)
        # Private files (Baton's own database) are neither read nor written by any tool.
        self.private_files = frozenset(Path(p).expanduser().resolve() for p in private_files)
        self._locks: weakref.WeakValueDictionary[Path, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock_for(self, resolved: Path) -> asyncio.Lock:
        """One lock per file, so parallel edits of a file never lose each other's work."""
        lock = self._locks.get(resolved)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[resolved] = lock
        return lock

    def resolve(self, path: str) -> Path:
        """The absolute, symlink-free location of `path`, which must lie in the workspace."""
        if not path or not path.strip():
            raise WorkspaceError("the path is empty")
        if "\x00" in path:
            raise WorkspaceError("the path contains a NUL byte")
        raw = PurePath(path)
        candidate = raw if raw.is_absolute() else self.root / raw
        resolved = Path(os.path.realpath(candidate))
        if resolved in self.private_files:
            raise WorkspaceError(f"{path!r} is Baton's own database; no tool may use it")
        if resolved == self.root or resolved.is_relative_to(self.root):
            return resolved
        if raw.is_absolute():
            reason = "is an absolute path outside the workspace"
        elif ".." in raw.parts:
            reason = "escapes the workspace through '..'"
        else:
            reason = "leads outside the workspace through a symbolic link"
        raise WorkspaceError(f"{path!r} {reason} ({self.root}); only paths inside it may be used")

    def resolve_for_write(self, path: str) -> Path:
        """Like `resolve`, and also refuses Baton's own protected files."""
        resolved = self.resolve(path)
        if self.is_protected(resolved):
            raise WorkspaceError(
                f"{path!r} is protected: Baton's configuration and {PROTECTED_DIR}/ "
                "cannot be written by any tool"
            )
        return resolved

    def is_protected(self, resolved: Path) -> bool:
        return (
            resolved == self.protected_dir
            or resolved.is_relative_to(self.protected_dir)
            or resolved in self.protected_files
        )

    def relative(self, resolved: Path) -> str:
        """How to show a resolved path to the model: relative to the root when possible."""
        if resolved == self.root:
            return "."
        if resolved.is_relative_to(self.root):
            return resolved.relative_to(self.root).as_posix()
        return str(resolved)
