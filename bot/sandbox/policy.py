"""What a sandboxed command may touch: the workspace, and the paths inside it it may not."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Inside every workspace: Baton's own directory (agent files, the config's neighbours)
# and the parts of a git repository that make git run programs for the next person
# who types `git status` or `git commit` outside the sandbox: hooks and config, the
# submodules' and linked worktrees' own git directories (each with hooks and config),
# and the per-worktree config git reads when `extensions.worktreeConfig` is on.
# Claude Code's agent files and skills, which Baton reads as its own: a command (or a
# merged branch) that planted one would steer every later run in this workspace.
CLAUDE_DIRS = (".claude/agents", ".claude/skills")
PROTECTED_NAMES = (
    ".baton",
    *CLAUDE_DIRS,
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/modules",
    ".git/worktrees",
)
# Of those, the files: when missing, an empty read-only file holds their place (an
# empty config is valid to git; an empty directory where git expects a file is not).
PROTECTED_FILE_NAMES = (".git/config", ".git/config.worktree")
# Files no mount can keep from being created: git dies on an empty `.git/commondir`
# ("failed to read"), so not even a placeholder may stand there. One that a call
# creates (`echo ../evil > .git/commondir` points git at another config, whose
# `core.fsmonitor` the operator's next `git status` would run) is removed after it.
REMOVED_IF_CREATED_NAMES = (".git/commondir",)
# git's state for work in progress: a rebase's todo list (`exec` lines run programs),
# `git am`'s, and cherry-pick's or revert's. What a command leaves there, the
# operator's next `git rebase --continue` (or `cherry-pick --continue`) on the host
# acts on. No placeholder may hold them: git takes the mere existence of
# `.git/rebase-merge` for a rebase in progress, and an existing `.git/sequencer` stops
# cherry-pick and revert. So one that exists when a call starts (the operator's own
# rebase) is read-only; one that does not is moved aside after the call if it made it.
GIT_STATE_NAMES = (".git/rebase-merge", ".git/rebase-apply", ".git/sequencer")
# Directories bound onto themselves (still writable) so they cannot be renamed away:
# without them `.git` is no repository, and git would take the workspace itself for a
# bare repository with a config the command wrote.
PINNED_NAMES = (".git/objects", ".git/refs")


def sqlite_companions(database: Path) -> tuple[Path, ...]:
    """A SQLite file and the files SQLite may open beside it.

    A journal or WAL planted beside the database is replayed into it the next time
    Baton opens it, so all of them are masked, not only the ones that exist now; and
    the lock the schema migrations take at start-up, which an agent holding would
    stall the next start.
    """
    return tuple(
        database.with_name(database.name + suffix)
        for suffix in ("", "-wal", "-shm", "-journal", ".migrate.lock")
    )


@dataclass(frozen=True)
class SandboxPolicy:
    """The filesystem and network a command sees; `bot.sandbox.profile` turns it into bwrap.

    Attributes:
        workspace: The only host directory mounted read-write (and the working directory).
        read_only: Paths visible but not writable. Inside the workspace they are also
            kept from being created, renamed or removed.
        masked: Paths replaced by an empty file (or empty directory): Baton's database,
            the config file when the operator hides it, and the directories of the
            other workspaces (`workspaces:`). Outside the workspace, only what the
            sandbox would show (under a system directory such as /opt) needs a mask.
        network: False gives the command a network namespace of its own (loopback
            only, nothing listening); True shares the host's network, loopback
            services included.
        files: Read-only paths that are files: when one is missing, an empty
            read-only file keeps it from being created, not an empty directory.
        removed_if_created: Paths no call may leave behind: whatever stands there
            when a call ends is removed (see `Sandbox.command`), also when it was
            there before (another call, running at the same time, may have made it).
        set_aside_if_created: Paths a call may use but not leave behind, and not
            change when they already exist: read-only then (list them in `read_only`
            too); when missing as a call starts, whatever stands there when it ends
            is moved aside to a name git ignores (see `Sandbox.command`), never
            deleted, so nothing of the operator's is lost.
        pinned: Directories that stay writable but cannot be renamed or removed.
        heads: git `HEAD` files a call may change but not break: one that no longer
            names a branch or a commit when the call ends gets its old content back
            (a broken `.git/HEAD` makes git take the workspace itself for a bare
            repository, with a config the command wrote).
    """

    workspace: Path
    read_only: tuple[Path, ...] = ()
    masked: tuple[Path, ...] = ()
    network: bool = False
    files: tuple[Path, ...] = ()
    removed_if_created: tuple[Path, ...] = ()
    set_aside_if_created: tuple[Path, ...] = ()
    heads: tuple[Path, ...] = ()
    pinned: tuple[Path, ...] = ()

    @classmethod
    def for_workspace(
        cls,
        workspace: Path,
        *,
        read_only: Iterable[Path] = (),
        masked: Iterable[Path] = (),
        databases: Iterable[Path] = (),
        network: bool = False,
    ) -> SandboxPolicy:
        """The standard policy: Baton's protected names plus the caller's paths.

        Every path is made absolute here with its directory's symlinks resolved, so
        the profile compares real locations; the last component is kept as named,
        so a protected name that is itself a link is seen (and refused) by the profile.
        Each of `databases` (SQLite files) is masked together with its journal, WAL
        and shared-memory files.
        """
        root = workspace.expanduser().resolve()
        protected = [root / name for name in (*PROTECTED_NAMES, *GIT_STATE_NAMES)]
        protected += [_real(p) for p in read_only]
        hidden = [_real(p) for p in masked]
        for database in map(_real, databases):
            hidden += [database] if _is_companion(database) else sqlite_companions(database)
        return cls(
            workspace=root,
            read_only=_unique(protected),
            masked=_unique(hidden),
            network=network,
            files=tuple(root / name for name in PROTECTED_FILE_NAMES),
            removed_if_created=tuple(root / name for name in REMOVED_IF_CREATED_NAMES),
            set_aside_if_created=tuple(root / name for name in GIT_STATE_NAMES),
            heads=(root / ".git" / "HEAD",),
            pinned=tuple(root / name for name in PINNED_NAMES),
        )


def _real(path: Path | str) -> Path:
    absolute = Path(path).expanduser().absolute()
    return absolute.parent.resolve() / absolute.name


def _is_companion(path: Path) -> bool:
    return path.name.endswith(("-wal", "-shm", "-journal"))


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(paths))
