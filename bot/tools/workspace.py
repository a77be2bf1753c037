"""The workspace jail: every path a tool touches is resolved and checked here.

Paths are walked from the root one component at a time over descriptors
(`bot.tools.safe_open`), and the checks that matter (Baton's database, its
configuration, `.baton/`, hard links) are made on the identity of the object that
was opened, so no other spelling, symlink or hard link of it gets past them.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bot.errors import ToolError, WorkspaceError
from bot.sandbox.policy import CLAUDE_DIRS, GIT_STATE_NAMES
from bot.tools.safe_open import (
    MAX_REOPEN_ATTEMPTS,
    Identity,
    Walk,
    give,
    identity,
    make_dirs,
    reopen,
    walk,
)

PROTECTED_DIR = ".baton"
# Directories and files in every workspace that make programs run for the next person
# who types a git command there: readable, never writable by a tool.
GIT_CONTROL_DIRS = (".git/hooks", ".git/modules", ".git/worktrees")
# And git's state for a rebase, `git am`, cherry-pick or revert in progress, which the
# next `--continue` acts on (a rebase's todo list runs its `exec` lines): the sandbox's
# GIT_STATE_NAMES.
# `.git` itself too: in a linked worktree (an isolated child's) it is a file naming the
# repository, and one pointing elsewhere would make the next git command read a config
# (filters, fsmonitor) the model wrote.
GIT_PROTECTED_FILES = (
    ".git",
    ".git/config",
    ".git/commondir",
    ".git/config.worktree",
    ".git/HEAD",
)
PROTECTED_MESSAGE = (
    f"is protected: Baton's configuration, {PROTECTED_DIR}/, .claude/agents/, "
    ".claude/skills/ and git's hooks, configuration and in-progress state cannot be "
    "written by any tool"
)
# What each kind of protected path is, for a refusal that names it (`Workspace._protection`).
CONFIGURATION = "Baton's configuration"
BATON_DIRECTORY = f"in {PROTECTED_DIR}/, Baton's own directory (agents, skills)"
CLAUDE_DIRECTORY = "in .claude/agents/ or .claude/skills/, agent files and skills Baton runs"
GIT_CONTROL = "part of git's hooks and configuration, which make the next git command run programs"
GIT_STATE = (
    "part of git's in-progress rebase, cherry-pick or revert state, which the next "
    "`--continue` acts on"
)
# Walking `.baton/` for a hard-linked alias stops here; past it the file counts as protected.
MAX_PROTECTED_SCAN = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Guard:
    """Identities of what no tool may touch, taken when a call checks, not at start-up.

    Files may be created after Baton starts (the database's -wal file), so a file that
    does not exist yet has no identity and is recognised by its resolved name instead.
    """

    private_ids: frozenset[Identity]
    protected_ids: frozenset[Identity]
    protected_dir_ids: frozenset[Identity]
    # Of those, the configuration's; and what each protected directory is.
    config_ids: frozenset[Identity] = frozenset()
    dir_kinds: Mapping[Identity, str] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Opened:
    """A file or directory opened for a tool, with the `fstat` of that very descriptor."""

    fd: int
    stat: os.stat_result
    path: Path
    shown: str
    created: bool = False

    def close(self) -> None:
        os.close(self.fd)


class Workspace:
    """A directory the tools may work in, and the paths inside it no tool may write.

    `<root>/.baton/` and any extra protected files (the config file) are readable but
    never writable; private files (Baton's database) are neither read nor written.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        protected_files: Iterable[Path | str] = (),
        private_files: Iterable[Path | str] = (),
        owner: tuple[int, int] | None = None,
    ) -> None:
        root_path = Path(root).expanduser()
        if not root_path.is_dir():
            raise WorkspaceError(f"the workspace {root_path} is not a directory")
        self.root = root_path.resolve()
        self.protected_dir = self.root / PROTECTED_DIR
        # What each protected directory is, for refusals; `.baton/` and the hooks first
        # (the only ones scanned for hard links, see `_in_protected_dir`).
        self._dir_kinds = {
            self.protected_dir: BATON_DIRECTORY,
            **{self.root / name: GIT_CONTROL for name in GIT_CONTROL_DIRS},
            **{self.root / name: GIT_STATE for name in GIT_STATE_NAMES},
            **{self.root / name: CLAUDE_DIRECTORY for name in CLAUDE_DIRS},
        }
        self.protected_dirs = tuple(self._dir_kinds)
        # Walked for hard-linked aliases of their files: what programs or agents read.
        self._scanned_dirs = (
            self.protected_dir,
            self.root / GIT_CONTROL_DIRS[0],
            *(self.root / name for name in CLAUDE_DIRS),
        )
        # The operator's own protected files (the config), apart from git's, which the
        # sandbox guards in its own way (git must still write `.git/HEAD` there).
        self.given_protected_files = frozenset(
            Path(p).expanduser().resolve() for p in protected_files
        )
        self.protected_files = self.given_protected_files | {
            self.root / name for name in GIT_PROTECTED_FILES
        }
        self.private_files = frozenset(Path(p).expanduser().resolve() for p in private_files)
        # Whom new files and directories belong to: the workspace's owner when Baton,
        # running as root, runs commands as them (`bot.sandbox.run_as`); else Baton.
        self.owner = owner
        # Absolute paths may name the root as it is, or as the operator spelled it
        # (through a symlink); anything else absolute is outside.
        spelled = os.path.normpath(os.path.abspath(root_path))
        self._roots = tuple(dict.fromkeys([str(self.root), spelled]))
        self._locks: weakref.WeakValueDictionary[Path, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock_for(self, resolved: Path) -> asyncio.Lock:
        """One lock per file, so parallel edits of a file never lose each other's work."""
        lock = self._locks.get(resolved)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[resolved] = lock
        return lock

    @contextmanager
    def locate(self, path: str) -> Iterator[Walk]:
        """Walk `path` from a freshly opened root; the descriptors close on exit."""
        root_fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            found = walk(root_fd, self._roots, path)
        except BaseException:
            os.close(root_fd)
            raise
        found._owned.append(root_fd)
        with found:
            yield found

    def guard(self) -> Guard:
        """The identities of the private and protected files as they are now."""
        dir_kinds = {
            ident: kind
            for directory, kind in reversed(self._dir_kinds.items())
            for ident in _identities([directory], lstat_too=True)
        }
        return Guard(
            private_ids=_identities(self.private_files),
            protected_ids=_identities(self.protected_files),
            protected_dir_ids=frozenset(dir_kinds),
            config_ids=_identities(self.given_protected_files),
            dir_kinds=dir_kinds,
        )

    def resolve(self, path: str) -> Path:
        """The absolute, symlink-free location of `path`, which must lie in the workspace."""
        with self.locate(path) as found:
            self.refuse_private(path, found, self.guard())
            return self._absolute(found.parts)

    def resolve_for_write(self, path: str) -> Path:
        """Like `resolve`, and also refuses Baton's own protected files."""
        with self.locate(path) as found:
            guard = self.guard()
            self.refuse_private(path, found, guard)
            self._refuse_protected(path, found, guard)
            return self._absolute(found.parts)

    def is_protected(self, resolved: Path) -> bool:
        """Whether a resolved path is protected (`.baton/`, git's control files and
        in-progress state, the config).

        A pre-check for the permission hook, made the way the tools check (by walking
        it and comparing identities); the tools check again on what they open.
        """
        try:
            with self.locate(str(resolved)) as found:
                return self._is_protected_walk(found, self.guard())
        except WorkspaceError:
            return False

    def relative(self, resolved: Path) -> str:
        """How to show a resolved path to the model: relative to the root when possible."""
        if resolved == self.root:
            return "."
        if resolved.is_relative_to(self.root):
            return resolved.relative_to(self.root).as_posix()
        return str(resolved)

    def hard_link_count(self, path: str) -> int:
        """How many hard links the regular file at `path` has; 0 if missing or not a file.

        The permission hook asks a person before a call on a file with more than one
        (it may be a file from outside the workspace). Raises `WorkspaceError` when
        `path` leads out of the workspace, as `resolve` does.
        """
        with self.locate(path) as found:
            if found.stat is None or not stat.S_ISREG(found.stat.st_mode):
                return 0
            return found.stat.st_nlink

    def open_file(
        self, path: str, *, write: bool = False, create: bool = False, approved: bool = False
    ) -> Opened:
        """Open a regular file for a tool, checked on the descriptor it returns.

        Args:
            path: The path the model gave.
            write: Open read-write, and refuse protected files; nothing is truncated, so
                a refused file is left as it was.
            create: Create the file (and its missing parent directories) if absent.
            approved: A person approved this call, so a file with several hard links
                may be used.

        Raises:
            WorkspaceError: The path leaves the workspace, or names a private or (for
                writing) protected file under any name.
            ToolError: Missing, a directory, not a regular file, or hard-linked without
                approval.
        """
        flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_NONBLOCK
        for _ in range(MAX_REOPEN_ATTEMPTS):
            with self.locate(path) as found:
                shown = self.relative(self._absolute(found.parts))
                guard = self.guard()
                self.refuse_private(path, found, guard)
                if write:
                    self._refuse_protected(path, found, guard)
                if not found.exists:
                    if not create:
                        raise ToolError(f"{shown} does not exist")
                    return self._create(found, shown)
                assert found.stat is not None
                if stat.S_ISDIR(found.stat.st_mode):
                    hint = "" if write else "; use list_dir to see what it holds"
                    raise ToolError(f"{shown} is a directory{hint}")
                if not stat.S_ISREG(found.stat.st_mode):
                    raise ToolError(f"{shown} is not a regular file (a FIFO, socket or device)")
                try:
                    fd = reopen(found, flags)
                except OSError as exc:
                    if _changed_meanwhile(exc):
                        continue
                    raise ToolError(f"{shown} cannot be opened: {exc.strerror}") from exc
                opened = Opened(
                    fd=fd, stat=os.fstat(fd), path=self._absolute(found.parts), shown=shown
                )
                if identity(opened.stat) != identity(found.stat):
                    # Replaced between the walk and the open: walk again rather than
                    # trust checks made on another object.
                    opened.close()
                    continue
                if opened.stat.st_nlink > 1 and not approved:
                    opened.close()
                    action = "changing" if write else "reading"
                    raise ToolError(
                        f"{shown} has {opened.stat.st_nlink} hard links, so it may be a file "
                        f"from outside the workspace; {action} it needs a person's approval"
                    )
                return opened
        raise ToolError(f"{path!r} kept changing while it was being opened; try again")

    def open_dir(self, path: str) -> Opened:
        """Open a directory for listing, refusing what is missing or not a directory."""
        with self.locate(path) as found:
            resolved = self._absolute(found.parts)
            shown = self.relative(resolved)
            if found.stat is None:
                raise ToolError(f"{shown} does not exist")
            if not stat.S_ISDIR(found.stat.st_mode):
                hint = "; use read_file" if stat.S_ISREG(found.stat.st_mode) else ""
                raise ToolError(f"{shown} is a file, not a directory{hint}")
            fd = reopen(found, os.O_RDONLY)
            return Opened(fd=fd, stat=os.fstat(fd), path=resolved, shown=shown)

    def _create(self, found: Walk, shown: str) -> Opened:
        make_dirs(found, self.owner)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(found.name, flags, 0o644, dir_fd=found.dir_fd)
        except FileExistsError as exc:
            raise ToolError(f"{shown} appeared while it was being created; try again") from exc
        except OSError as exc:
            raise ToolError(f"{shown} cannot be created: {exc.strerror}") from exc
        if self.owner is not None:
            give(fd, self.owner)
        return Opened(
            fd=fd, stat=os.fstat(fd), path=self._absolute(found.parts), shown=shown, created=True
        )

    def _absolute(self, parts: tuple[str, ...]) -> Path:
        return self.root.joinpath(*parts)

    def refuse_private(self, path: str, found: Walk, guard: Guard) -> None:
        """Raise `WorkspaceError` when the walked object is one of Baton's private files,
        naming it for what it is: the configuration (private too, where the operator
        keeps it out of the model's reach) or the database."""
        if self.is_private(found, guard):
            what = "configuration" if self._is_config(found, guard) else "own database"
            raise WorkspaceError(f"{path!r} is Baton's {what}; no tool may use it")

    def _is_config(self, found: Walk, guard: Guard) -> bool:
        if found.stat is not None and identity(found.stat) in guard.config_ids:
            return True
        return self._absolute(found.parts) in self.given_protected_files

    def is_private(self, found: Walk, guard: Guard) -> bool:
        """Whether the walked object is one of Baton's private files, under any name."""
        if found.stat is not None and identity(found.stat) in guard.private_ids:
            return True
        return self._absolute(found.parts) in self.private_files

    def _refuse_protected(self, path: str, found: Walk, guard: Guard) -> None:
        if (what := self._protection(found, guard)) is not None:
            raise WorkspaceError(f"{path!r} is protected: it is {what}; no tool may write it")

    def _is_protected_walk(self, found: Walk, guard: Guard) -> bool:
        return self._protection(found, guard) is not None

    def _protection(self, found: Walk, guard: Guard) -> str | None:
        """What protected thing the walked object is, under any name; None if none."""
        here = self._absolute(found.parts)
        if here in self.given_protected_files:
            return CONFIGURATION
        for directory, kind in self._dir_kinds.items():
            if here.is_relative_to(directory):
                return kind
        if here in self.protected_files:
            return GIT_CONTROL
        for dir_id in found.dir_ids:
            if dir_id in guard.dir_kinds:
                return guard.dir_kinds[dir_id]
        st = found.stat
        if st is None:
            return None
        ident = identity(st)
        if ident in guard.config_ids:
            return CONFIGURATION
        if ident in guard.protected_ids:
            return GIT_CONTROL
        if ident in guard.dir_kinds:
            return guard.dir_kinds[ident]
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return self._in_protected_dir(ident)
        return None

    def _in_protected_dir(self, ident: Identity) -> str | None:
        """What a hard-linked file is when it is also a file under `.baton/`, `.git/hooks/`,
        `.claude/agents/` or `.claude/skills/`."""
        seen = 0
        for directory in self._scanned_dirs:
            kind = self._dir_kinds[directory]
            try:
                for _, _, files, dir_fd in os.fwalk(directory, follow_symlinks=False):
                    for name in files:
                        seen += 1
                        if seen > MAX_PROTECTED_SCAN:
                            return kind
                        try:
                            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                        except OSError:
                            continue
                        if identity(st) == ident:
                            return kind
            except OSError:
                continue
        return None


def _identities(paths: Iterable[Path], *, lstat_too: bool = False) -> frozenset[Identity]:
    found: set[Identity] = set()
    for path in paths:
        for follow in (True, False) if lstat_too else (True,):
            try:
                found.add(identity(os.stat(path, follow_symlinks=follow)))
            except OSError:
                continue
    return frozenset(found)


def _changed_meanwhile(exc: OSError) -> bool:
    return exc.errno in (errno.ELOOP, errno.ENOENT)
