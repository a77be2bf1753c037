"""Git worktrees for sub-agents with `isolation: worktree`.

A child with `isolation: worktree` runs in its own worktree of the workspace, on a new
branch `baton/<task-id>`, so many children can edit the same file in parallel and each
keeps its own change. When the child ends, `finish` commits its work on that branch and
removes the worktree directory; later a person merges the branch into the workspace's
current branch (`merge`) or throws it away (`discard`).

This code runs git outside the sandbox, on files a hostile model wrote, so:

- Every call disables hooks, fsmonitor, signing, pagers, auto gc and submodule recursion
  on the command line (which outranks every config file) and runs with a clean
  environment: no inherited `GIT_*` variable, no system config, no prompts.
- `finish` never uses the worktree's `.git` file or its admin dir (HEAD, index,
  `commondir`), which a child could rewrite to point git at a config of its own: it
  reads the work tree through the common git directory with a private index, builds
  the commit with `commit-tree` and moves the branch with a compare-and-swap.
- Output is read with `-z` and bounded; names are never parsed from human text.
- Branch names and task ids are checked against a strict pattern before they reach git.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from bot.errors import BatonError
from bot.sandbox.policy import CLAUDE_DIRS

_T = TypeVar("_T")
_TASK_ID = re.compile(r"task-[a-z0-9-]+")
_BRANCH = re.compile(r"baton/task-[a-z0-9-]+")
logger = logging.getLogger(__name__)

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MAX_TASK_ID = 100
_FALLBACK_NAME = "Baton"
_FALLBACK_EMAIL = "baton@localhost"
_BATON_IDENTITY = (f"user.name={_FALLBACK_NAME}", f"user.email={_FALLBACK_EMAIL}")

# Command-line config outranks every config file, including a child's. Each key shuts
# a door through which git would run a program or change what the merge does.
# Baton's own directory in a workspace (agents, skills, memory): no branch may change it.
PROTECTED_DIR = ".baton"
# What no branch may change: Baton's own directory, and Claude Code's agent files and
# skills, which Baton reads as its own.
AGENT_READ_DIRS = (PROTECTED_DIR, *CLAUDE_DIRS)

_SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "core.pager=cat",
    "gc.auto=0",
    "maintenance.auto=false",
    "submodule.recurse=false",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "rerere.enabled=false",
    "merge.autoStash=false",
    "safe.bareRepository=explicit",
)
_TIMEOUT_S = 300.0
# What git may see of Baton's environment: where programs are, the user's git config
# (identity), temporary files, the time zone of commit dates, a library path for a git
# installed apart from the system's.
_GIT_INHERITS = ("PATH", "HOME", "XDG_CONFIG_HOME", "TMPDIR", "TZ", "LD_LIBRARY_PATH")
_STDOUT_LIMIT = 8 * 1024 * 1024
_STDERR_LIMIT = 64 * 1024
_SUMMARY_FILES = 20
_MINUS = "\N{MINUS SIGN}"
_MESSAGE_FILES = 10
# How long a repository's answer to "who commits?" is reused.
_IDENTITY_S = 5.0


class WorktreeError(BatonError):
    """A worktree could not be created, finished, merged or discarded; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Worktree:
    """A child's worktree: where it lives, its branch, and the commit it started from."""

    repo: Path
    path: Path
    branch: str
    base: str
    git_dir: Path
    # The workspace's own git dir (its common dir, unless the site's checkout is a
    # linked worktree itself), found when the worktree was made.
    repo_git_dir: Path
    # The tree of `base`, read when the worktree was made (None when reopened): finishing
    # then needs not ask git where the branch is (it is where it was made: the child
    # cannot commit), checked by the compare-and-swap that moves or deletes it.
    base_tree: str | None = None
    # The worktree's own index as `worktree add` left it (inode, size, mtime): finishing
    # starts from a copy of it only while it is unchanged (no git command ran there that
    # could have marked a file as not to be looked at).
    index_stamp: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FileChange:
    """One file's lines added and removed; binary files count 0/0 and say so."""

    path: str
    added: int
    removed: int
    binary: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """The work a child left on its branch, measured against the commit it started from."""

    branch: str
    commit: str
    files: tuple[FileChange, ...]

    def summary(self) -> str:
        """One line for people: totals, then up to 20 files with their own counts."""
        added = sum(change.added for change in self.files)
        removed = sum(change.removed for change in self.files)
        noun = "file" if len(self.files) == 1 else "files"
        shown = ", ".join(_describe(change) for change in self.files[:_SUMMARY_FILES])
        more = len(self.files) - _SUMMARY_FILES
        tail = f", … and {more} more" if more > 0 else ""
        totals = f"+{added} {_MINUS}{removed}"
        return f"{len(self.files)} {noun} changed, {totals}: {shown}{tail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedFile:
    """A file of Baton's own that no branch may change, and what it is, for people.

    `path` is absolute: Merge finds it in the repository by its place under git's top
    directory (a site may be a subdirectory of a repository, and Merge merges the
    whole repository); a file outside the repository concerns no branch.
    """

    path: Path
    what: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeOutcome:
    """What a merge did; `message` is one sentence for people."""

    merged: bool
    commit: str | None
    conflicts: tuple[str, ...] = ()
    message: str


async def check_repository(repo: Path) -> None:
    """Refuse, before a task starts, a directory no worktree can be made of.

    Raises:
        WorktreeError: `repo` is not in a git repository, or it has no commit yet.
    """
    await _head_commit(await _open_repo(repo))


async def create(repo: Path, task_id: str, base_dir: Path) -> Worktree:
    """A new worktree at `<base_dir>/<task_id>` on a new branch `baton/<task_id>` from HEAD.

    The worktree is locked so `git worktree prune` leaves it alone while the task runs.
    """
    return await create_in(repo, await asyncio.to_thread(make_place, base_dir, task_id, repo))


def make_place(base_dir: Path, task_id: str, repo: Path) -> Path:
    """The empty directory `<base_dir>/<task_id>` for `create_in`, made before git is
    asked anything, so the child's tools can be built for it at once. Blocking.

    Raises:
        WorktreeError: A bad task id, `base_dir` inside `repo`, or no directory could be
            made (one already there is never reused).
    """
    _check_task_id(task_id)
    base_dir = _prepare_base_dir(base_dir, repo.resolve())
    path = base_dir / task_id
    try:
        path.mkdir()
    except OSError as error:
        raise WorktreeError(f"Could not make the worktree directory {path}: {error}") from error
    return path


async def create_in(repo: Path, path: Path, *, start: str | None = None) -> Worktree:
    """`create` in the directory `make_place` made (its name is the task id): the base
    commit is read, then git checks it out there. On failure the directory is removed
    again while it is empty.

    `start`: a thread's branch to start from instead of the checkout's HEAD.
    """
    task_id = path.name
    try:
        _check_task_id(task_id)
        # Each asks on its own, even in a fan-out: a lookup shared with one that began
        # earlier could give a HEAD that has moved since (a merge just made).
        workspace, base = await _open_repo_at_head(repo)
        if start is not None:
            if not is_thread_branch(start):
                raise WorktreeError(f"{start!r} is not a thread branch to start a worktree from")
            tip = await _branch_commit(workspace, start)
            if tip is None:
                raise WorktreeError(f"The branch {start} is gone")
            base = tip
        if path.parent.is_relative_to(workspace.top):
            raise WorktreeError(
                f"Worktrees must live outside the workspace; {path.parent} is inside "
                f"{workspace.top}"
            )
        branch = branch_name(task_id)
        # One at a time: `worktree add` reads every other worktree's admin dir, and
        # fails ("failed to read .../commondir") on one that a concurrent add or remove
        # has half made or half deleted (found with sixteen isolated children starting
        # together).
        async with _repo_lock(workspace.common_dir):
            result = await workspace.run(
                "worktree",
                "add",
                "--quiet",
                "--lock",
                "--reason",
                f"Baton task {task_id} is running",
                "-b",
                branch,
                "--",
                str(path),
                base,
            )
        if result.returncode != 0:
            raise WorktreeError(f"Could not create a worktree for {task_id}: {result.error}")
    except WorktreeError:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(path.rmdir)  # only while empty
        raise
    git_dir = await _new_worktree_git_dir(path, workspace, task_id)
    base_tree = await _tree_of(workspace, base)
    stamp = await asyncio.to_thread(_stamp, git_dir / "index")
    return Worktree(
        repo=workspace.top,
        path=path,
        branch=branch,
        base=base,
        git_dir=git_dir,
        repo_git_dir=workspace.git_dir,
        base_tree=base_tree,
        index_stamp=stamp,
    )


def branch_name(task_id: str) -> str:
    """The branch `create` makes for `task_id`."""
    return f"baton/{task_id}"


async def reopen(repo: Path, task_id: str, base_dir: Path) -> Worktree | None:
    """The worktree `create` made for `task_id`, found again after Baton restarted; None
    when there is none (it was finished, or never made) or it is not this repository's.

    Its base is the branch's tip: the child cannot commit inside its sandbox, so the
    branch is still where `create` started it.
    """
    _check_task_id(task_id)
    path = await asyncio.to_thread(lambda: base_dir.resolve() / task_id)
    if not await asyncio.to_thread(path.is_dir):
        return None
    workspace = await _open_repo(repo)
    git_dir = workspace.common_dir / "worktrees" / task_id
    branch = branch_name(task_id)
    if not await asyncio.to_thread(_admin_dir_of, git_dir, path):
        return None  # no admin dir, or one of another worktree: nothing of ours to finish
    base = await _branch_commit(workspace, branch)
    if base is None:
        return None
    return Worktree(
        repo=workspace.top,
        path=path,
        branch=branch,
        base=base,
        git_dir=git_dir,
        repo_git_dir=workspace.git_dir,
    )


async def finish(worktree: Worktree, *, message: str) -> Change | None:
    """Commit the child's work on its branch and remove the worktree directory.

    Returns None, and deletes the branch too, when the branch ends up with the same
    tree as `base` (nothing to merge). If anything fails the worktree is left in place
    and WorktreeError is raised, so no work is ever thrown away by accident.
    """
    # One stat, on the loop: sixteen children finishing together would each wait longer
    # for a thread than the call takes.
    if not worktree.path.is_dir():
        raise WorktreeError(f"The worktree of {worktree.branch} at {worktree.path} is gone")
    workspace = _workspace_of(worktree)
    git = _common_git(worktree)
    tip, counting = await _commit_work_tree(git, workspace, worktree, message)
    if counting is None:  # the branch's tree is its base's
        await _remove_own_worktree(workspace, worktree)
        async with _repo_lock(workspace.common_dir):
            await _delete_branch(workspace, worktree.branch)
        return None
    files = await counting
    try:
        await _remove_own_worktree(workspace, worktree)
    except WorktreeError as error:
        # The work is on its branch already: a leftover directory must not lose it.
        logger.warning("%s; its work is committed on %s", error, worktree.branch)
    return Change(branch=worktree.branch, commit=tip, files=files)


async def merge(
    repo: Path,
    branch: str,
    *,
    message: str,
    expected: str | None = None,
    protected: Sequence[ProtectedFile] = (),
) -> MergeOutcome:
    """Merge a Baton branch into the workspace's current branch with a merge commit.

    `expected`: the commit the task's work was recorded as; a branch that points
    anywhere else now (commands in the workspace's sandbox can write its refs) is
    refused. So is a branch whose changes touch `.baton/` (Baton's agents, skills and
    memory, which no agent may write), add a submodule, or add, change, delete or
    rename one of the `protected` files (Baton's configuration and database) that lie
    in the repository; the refusal names every such file.

    On a conflict the merge is aborted, the checkout is left as it was and the branch
    kept. Anything that stops the merge before it starts (local changes in the way,
    a detached HEAD, a missing or foreign branch) is reported, with nothing changed.
    """
    if not _is_baton_branch(branch):
        return _not_ours(branch)
    try:
        workspace = await _open_repo(repo)
    except WorktreeError as error:
        return _refused(str(error))
    async with _repo_lock(workspace.common_dir):
        return await _merge_locked(workspace, branch, message, expected, protected)


def _not_ours(branch: str) -> MergeOutcome:
    return _refused(
        f"{branch!r} is not a Baton branch (baton/task-…); Baton only merges its own branches."
    )


async def discard(repo: Path, branch: str) -> bool:
    """Remove a Baton branch and its worktree, if any; False when there was no such branch."""
    if not _is_baton_branch(branch):
        raise WorktreeError(
            f"{branch!r} is not a Baton branch (baton/task-…); refusing to delete it."
        )
    workspace = await _open_repo(repo)
    async with _repo_lock(workspace.common_dir):
        linked = await _find_worktree(workspace, branch)
        if linked is not None:
            await _remove_listed_worktree(workspace, linked)
        if await _branch_commit(workspace, branch) is None:
            return False
        await _delete_branch(workspace, branch)
    return True


# --- running git -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GitResult:
    """What one git command said: its exit status, stdout (bounded) and stderr."""

    returncode: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        """Stdout as text, for the short answers of rev-parse and friends."""
        return self.stdout.decode("utf-8", "surrogateescape").strip()

    @property
    def error(self) -> str:
        """The gist of stderr for a message: its first few lines."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        gist = "; ".join(lines[:4]) or f"git exited with status {self.returncode}"
        return gist[:500]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Git:
    """One way of calling git: the same repository, work tree and environment every time."""

    cwd: Path
    options: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    async def run(self, *args: str, config: Sequence[str] = ()) -> GitResult:
        """Run `git <args>`; `config` adds more `-c key=value` pairs."""
        extra = [item for pair in config for item in ("-c", pair)]
        return await run_git([*self.options, *extra, *args], cwd=self.cwd, env=self.env)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Repo(_Git):
    """The workspace's repository, with its git directory pinned after one discovery."""

    top: Path
    git_dir: Path
    common_dir: Path


async def run_git(args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> GitResult:
    """Run git without a shell, bounded in time and output; the process never outlives us.

    Every call gets `_SAFE_CONFIG` on its command line and a minimal environment
    (`_git_environment`), to which `env` adds: how the forge's remotes are reached
    (`bot.forge.git_remote`) uses it to hand git credentials for one command only.
    """
    safe = [item for pair in _SAFE_CONFIG for item in ("-c", pair)]
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            *safe,
            *args,
            cwd=cwd,
            env=_git_environment(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as error:
        raise WorktreeError(f"Could not run git in {cwd}: {error}") from error
    assert process.stdout is not None and process.stderr is not None
    try:
        async with asyncio.timeout(_TIMEOUT_S):
            stdout, stderr = await asyncio.gather(
                _read_bounded(process.stdout, _STDOUT_LIMIT),
                _read_bounded(process.stderr, _STDERR_LIMIT),
            )
            returncode = await process.wait()
    except TimeoutError:
        raise WorktreeError(f"git {' '.join(args[:3])} took over {_TIMEOUT_S:.0f} s") from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return GitResult(returncode=returncode, stdout=stdout, stderr=stderr.decode("utf-8", "replace"))


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Keep the first `limit` bytes and drain the rest, so git never blocks on a full pipe."""
    kept: list[bytes] = []
    size = 0
    while chunk := await stream.read(65536):
        if size < limit:
            kept.append(chunk[: limit - size])
        size += len(chunk)
    return b"".join(kept)


def _git_environment(extra: dict[str, str]) -> dict[str, str]:
    """The few variables of ours that these local git commands read, and none other: no
    GIT_* variable (they would redirect or reconfigure git), no pager, editor or
    preloaded library, and none of Baton's secrets (git runs on files a child wrote,
    and a filter its attributes name would see them)."""
    env = {key: value for key in _GIT_INHERITS if (value := os.environ.get(key)) is not None}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_EDITOR="true",
        LC_ALL="C",
    )
    env.update(extra)
    return env


async def _open_repo(repo: Path) -> _Repo:
    """Find the repository holding `repo` once; later calls name its directories explicitly."""
    if not await asyncio.to_thread(repo.is_dir):
        raise WorktreeError(
            f"{repo} is not a directory: isolation: worktree needs a git repository"
        )
    probe = _Git(cwd=repo)
    result = await probe.run(
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--absolute-git-dir",
        "--git-common-dir",
    )
    lines = result.stdout.decode("utf-8", "surrogateescape").split("\n")
    if result.returncode != 0 or len(lines) != 4 or lines[3]:
        raise WorktreeError(f"{repo} is not a git repository: isolation: worktree needs one")
    top, git_dir, common_dir = (Path(line) for line in lines[:3])
    return _repo(top, git_dir, common_dir)


async def _open_repo_at_head(repo: Path) -> tuple[_Repo, str]:
    """`_open_repo` and `_head_commit` in one git call when the repository has a commit."""
    if await asyncio.to_thread(repo.is_dir):
        result = await _Git(cwd=repo).run(
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--absolute-git-dir",
            "--git-common-dir",
            "--verify",
            "--quiet",
            "HEAD^{commit}",
        )
        lines = result.stdout.decode("utf-8", "surrogateescape").split("\n")
        if result.returncode == 0 and len(lines) == 5 and not lines[4] and _SHA.fullmatch(lines[3]):
            top, git_dir, common_dir = (Path(line) for line in lines[:3])
            return _repo(top, git_dir, common_dir), lines[3]
    # Not a repository, or no commit yet: the slow path says which.
    workspace = await _open_repo(repo)
    return workspace, await _head_commit(workspace)


def _repo(top: Path, git_dir: Path, common_dir: Path) -> _Repo:
    return _Repo(
        cwd=top,
        options=(f"--git-dir={git_dir}", f"--work-tree={top}"),
        top=top,
        git_dir=git_dir,
        common_dir=common_dir,
    )


def _workspace_of(worktree: Worktree) -> _Repo:
    """The workspace's repository as `worktree` recorded it (never asked of its files)."""
    return _repo(worktree.repo, worktree.repo_git_dir, worktree.git_dir.parent.parent)


def _own_git(worktree: Worktree) -> _Git:
    """Git on the worktree with its own admin dir (index, HEAD) pinned, not its `.git` file."""
    return _Git(
        cwd=worktree.path,
        options=(f"--git-dir={worktree.git_dir}", f"--work-tree={worktree.path}"),
    )


def _common_git(worktree: Worktree) -> _Git:
    """Git on the repository's common directory with the child's files as work tree.

    Nothing in the child's reach takes part: not its `.git` file, nor its admin dir.
    """
    common_dir = worktree.git_dir.parent.parent
    return _Git(
        cwd=worktree.path,
        # The workspace's own sparse-checkout must not hide the child's files from `add`.
        options=(
            f"--git-dir={common_dir}",
            f"--work-tree={worktree.path}",
            "-c",
            "core.sparseCheckout=false",
        ),
    )


# --- create ----------------------------------------------------------------------------


def _check_task_id(task_id: str) -> None:
    """The id becomes a directory and a branch name, so only a strict shape is allowed."""
    if len(task_id) > _MAX_TASK_ID or not _TASK_ID.fullmatch(task_id):
        raise WorktreeError(
            f"Invalid task id {task_id!r}: expected 'task-' then lowercase letters, digits "
            f"and dashes, at most {_MAX_TASK_ID} characters"
        )


def _is_baton_branch(branch: str) -> bool:
    return len(branch) <= _MAX_TASK_ID + 6 and _BRANCH.fullmatch(branch) is not None


async def _head_commit(workspace: _Repo) -> str:
    result = await workspace.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if result.returncode != 0:
        raise WorktreeError(f"{workspace.top} has no commit yet: isolation: worktree needs one")
    return result.text


def _prepare_base_dir(base_dir: Path, top: Path) -> Path:
    """Create the worktrees' parent; inside the workspace it would show up in its status.
    `top` is resolved."""
    base_dir = base_dir.resolve()
    if base_dir.is_relative_to(top):
        raise WorktreeError(
            f"Worktrees must live outside the workspace; {base_dir} is inside {top}"
        )
    base_dir.mkdir(parents=True, exist_ok=True)
    return base_dir


async def _new_worktree_git_dir(path: Path, workspace: _Repo, task_id: str) -> Path:
    """The new worktree's admin dir, read from its `.git` file before the child has had
    any chance to touch it: `<common dir>/worktrees/<task id>[<n>]`, nothing else."""
    try:
        pointer = await asyncio.to_thread((path / ".git").read_text, "utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise WorktreeError(f"Could not read the new worktree's .git file in {path}") from error
    named = pointer.removeprefix("gitdir: ").strip()
    # Relative with `worktree.useRelativePaths` (git 2.48+): from the worktree.
    git_dir = _joined(path, named)
    if (
        not pointer.startswith("gitdir: ")
        or git_dir.parent != workspace.common_dir / "worktrees"
        or not re.fullmatch(re.escape(task_id) + r"[0-9]*", git_dir.name)
    ):
        raise WorktreeError(f"Could not find the git directory of the new worktree {path}")
    return git_dir


# --- finish ----------------------------------------------------------------------------


async def _commit_work_tree(
    git: _Git,
    workspace: _Repo,
    worktree: Worktree,
    message: str,
    identity: Sequence[str] | None = None,
) -> tuple[str, asyncio.Future[tuple[FileChange, ...]] | None]:
    """Commit the work tree's files on the child's branch; return the branch's tip and
    the lines changed between its tree and its base's, counted while the commit is made
    (None when the trees are the same: nothing to merge).

    A fresh index in a directory of our own, then `add --all`: the commit holds exactly
    the files the child left, whatever it did to its index or HEAD. Commits the child
    made itself are kept, being the branch's history. While the branch is where it was
    made (as it is: the child cannot commit), the index starts as a copy of the
    worktree's own (its files' stat data spare `add` hashing unchanged ones) and git is
    not asked where the branch is; the compare-and-swap that moves the branch checks
    that, and if it moved, the branch is read and the commit made again.
    """
    if worktree.base_tree is not None and worktree.index_stamp is not None:
        try:
            return await _commit_on(
                git,
                workspace,
                worktree,
                message,
                existing=worktree.base,
                parent_tree=worktree.base_tree,
                base_tree=worktree.base_tree,
                seed=(worktree.git_dir / "index", worktree.index_stamp),
                identity=identity,
            )
        except _BranchMoved:
            pass
    existing, parent_tree, base_tree = await _branch_state(git, worktree)
    return await _commit_on(
        git,
        workspace,
        worktree,
        message,
        existing=existing,
        parent_tree=parent_tree,
        base_tree=base_tree,
        seed=None,
        identity=identity,
    )


class _BranchMoved(Exception):
    """The branch was not where a commit on it assumed."""


async def _commit_on(
    git: _Git,
    workspace: _Repo,
    worktree: Worktree,
    message: str,
    *,
    existing: str | None,
    parent_tree: str,
    base_tree: str,
    seed: tuple[Path, tuple[int, int, int]] | None,
    identity: Sequence[str] | None = None,
) -> tuple[str, asyncio.Future[tuple[FileChange, ...]] | None]:
    """`_commit_work_tree` with the branch at `existing` (None: gone), whose tree is
    `parent_tree`; the index starts as a copy of `seed` when given (raising _BranchMoved
    when the branch is not at `existing`), else from the branch's tree."""
    parent = existing or worktree.base
    preparing = asyncio.ensure_future(asyncio.to_thread(_scratch_index, seed))
    try:
        scratch, seeded = await asyncio.shield(preparing)
    except asyncio.CancelledError:
        # Cancelled while the thread makes it: the copy of the index goes too.
        preparing.add_done_callback(_remove_scratch)
        raise
    try:
        indexed = replace(git, env={**git.env, "GIT_INDEX_FILE": str(scratch / "index")})
        if not seeded:
            await _checked(indexed, "read-tree", parent)
        added = await indexed.run("add", "--all", "--", ".")
        if added.returncode != 0:
            raise WorktreeError(
                f"Could not record the changes of {worktree.branch}; "
                f"its worktree is kept at {worktree.path}: {added.error}"
            )
        tree = (await _checked(indexed, "write-tree")).text
    finally:
        # Our own directory with git's index in it: removed on the loop, not worth a
        # thread's wait.
        shutil.rmtree(scratch, ignore_errors=True)
    # Counted from the trees alone, so alongside the commit: one git call less in a row.
    counting = None if tree == base_tree else asyncio.ensure_future(_numstat(git, base_tree, tree))
    if parent_tree == tree:
        return parent, counting
    try:
        text = message.strip() or f"Baton task {worktree.branch.removeprefix('baton/')}"
        if identity is None:
            identity = await _identity_config(workspace)
        created = await git.run("commit-tree", tree, "-p", parent, "-m", text, config=identity)
        if created.returncode != 0:
            raise WorktreeError(
                f"Could not commit the changes on {worktree.branch}: {created.error}"
            )
        # Compare-and-swap: the branch must still be where we read it (or still absent).
        ref = f"refs/heads/{worktree.branch}"
        moved = await git.run(
            "update-ref", "-m", "baton: finish", ref, created.text, existing or ""
        )
        if moved.returncode != 0:
            if seed is not None:
                raise _BranchMoved
            raise WorktreeError(f"git update-ref failed: {moved.error}")
    except BaseException:
        if counting is not None:
            counting.cancel()
        raise
    return created.text, counting


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _scratch_index(seed: tuple[Path, tuple[int, int, int]] | None) -> tuple[Path, bool]:
    """A new private directory for a scratch index, and whether `seed`'s index was
    copied in as `index` (else git starts it). Blocking: one thread's wait for both."""
    scratch = Path(tempfile.mkdtemp(prefix="baton-index-"))
    return scratch, seed is not None and _copied(*seed, scratch / "index")


def _remove_scratch(prepared: asyncio.Future[tuple[Path, bool]]) -> None:
    if not prepared.cancelled() and prepared.exception() is None:
        shutil.rmtree(prepared.result()[0], ignore_errors=True)


def _copied(source: Path, stamp: tuple[int, int, int], target: Path) -> bool:
    """Copy `source` with its times (git's racy-entry check reads the index's mtime)
    while it is as `stamp` says; False when it changed or cannot be read."""
    if _stamp(source) != stamp:
        return False
    try:
        shutil.copy2(source, target)
    except OSError:
        return False
    return True


async def _branch_state(git: _Git, worktree: Worktree) -> tuple[str | None, str, str]:
    """The branch's commit (None when it is gone), its tree (the base's when it is gone)
    and the base's tree: one git call while the branch is there, as it normally is."""
    branch = f"refs/heads/{worktree.branch}"
    found = await git.run(
        "rev-parse",
        f"{branch}^{{commit}}",
        f"{branch}^{{tree}}",
        f"{worktree.base}^{{tree}}",
        "--",  # revisions only, never the names of files the child left
    )
    answers = found.text.split()
    if found.returncode == 0 and len(answers) == 4 and answers[3] == "--":
        return answers[0], answers[1], answers[2]
    existing = await _branch_commit(git, worktree.branch)
    parent_tree, base_tree = await _trees(git, existing or worktree.base, worktree.base)
    return existing, parent_tree, base_tree


async def _identity_config(git: _Repo) -> tuple[str, ...]:
    """Baton's identity unless the repository (or its user) has a complete one; asked
    once in `_IDENTITY_S` seconds per repository (sixteen children finish together)."""
    cached = _identities.get(git.common_dir)
    if cached is not None and time.monotonic() - cached[0] < _IDENTITY_S:
        return cached[1]
    return await _shared(("identity", git.common_dir), lambda: _read_identity(git))


async def _read_identity(git: _Repo) -> tuple[str, ...]:
    identity = await identity_config(git.run)
    _identities[git.common_dir] = (time.monotonic(), identity)
    return identity


async def identity_config(run: Callable[..., Awaitable[GitResult]]) -> tuple[str, ...]:
    """The `user.name=…`/`user.email=…` config pairs a commit needs: Baton's, unless
    the repository (or its user) has a complete identity, which git then uses.

    `run` runs one git command on the repository (its directories pinned by the caller).
    """
    found = await run("config", "--get-regexp", r"^user\.(name|email)$")
    values: dict[str, str] = {}
    for line in found.text.splitlines() if found.returncode == 0 else ():
        key, _, value = line.partition(" ")
        values[key] = value.strip()
    if values.get("user.name") and values.get("user.email"):
        return ()
    return _BATON_IDENTITY


async def _branch_commit(git: _Git, branch: str) -> str | None:
    result = await git.run("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    return result.text if result.returncode == 0 else None


async def _trees(git: _Git, *commits: str) -> list[str]:
    """The trees of several commits, in one git call."""
    result = await _checked(git, "rev-parse", *(f"{commit}^{{tree}}" for commit in commits))
    trees = result.text.split()
    if len(trees) != len(commits):
        raise WorktreeError(f"Could not read the trees of {', '.join(commits)}")
    return trees


async def _tree_of(git: _Repo, commit: str) -> str:
    """A commit's tree: asked once per repository and commit (it never changes)."""
    key = (git.common_dir, commit)

    async def read() -> str:
        (tree,) = await _trees(git, commit)
        # Kept before the shared call ends: a child that asks after it ended, before its
        # first caller resumed, finds the tree here rather than asking git again.
        if len(_commit_trees) >= _TREES_KEPT:
            _commit_trees.clear()
        _commit_trees[key] = tree
        return tree

    tree = _commit_trees.get(key)
    return tree if tree is not None else await _shared(("tree", *key), read)


async def _numstat(git: _Git, base_tree: str, tree: str) -> tuple[FileChange, ...]:
    """Lines added and removed per file between two trees, parsed from `-z` output."""
    result = await _checked(
        git,
        "diff",
        "--numstat",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
        base_tree,
        tree,
        "--",
    )
    files: list[FileChange] = []
    for record in result.stdout.split(b"\0"):
        parts = record.split(b"\t", 2)
        if len(parts) != 3:
            continue
        added, removed, raw_path = parts
        path = os.fsdecode(raw_path)
        if added == b"-" or removed == b"-":
            files.append(FileChange(path=path, added=0, removed=0, binary=True))
        else:
            files.append(FileChange(path=path, added=int(added), removed=int(removed)))
    return tuple(files)


async def _remove_own_worktree(workspace: _Repo, worktree: Worktree) -> None:
    """Remove a worktree whose paths we created ourselves, whatever the child did to it.

    Both directories are deleted here, not by `git worktree remove` (which also refuses
    a worktree whose `.git` file the child broke), once they are where `create` puts
    them: the admin dir first, under the repository's lock (a concurrent `worktree add`
    reads every admin dir), then the files. `shutil.rmtree` never follows symlinks, so
    links the child left cannot lead the deletion elsewhere.
    """
    if (
        worktree.git_dir.parent != workspace.common_dir / "worktrees"
        or worktree.path.is_relative_to(workspace.top)
        or workspace.top.is_relative_to(worktree.path)
    ):
        raise WorktreeError(
            f"Could not remove the worktree at {worktree.path}: it is not where Baton makes them"
        )
    try:
        async with _repo_lock(workspace.common_dir):
            await asyncio.to_thread(_remove_tree, worktree.git_dir)
        await asyncio.to_thread(_remove_tree, worktree.path)
    except OSError as error:
        raise WorktreeError(f"Could not remove the worktree at {worktree.path}: {error}") from error


def _admin_dir_of(git_dir: Path, path: Path) -> bool:
    """Whether `git_dir` is the admin dir of the worktree at `path` (its `gitdir` file
    names `path/.git`)."""
    try:
        named = (git_dir / "gitdir").read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return _joined(git_dir, named) == path / ".git"


def _joined(directory: Path, named: str) -> Path:
    """`named` (absolute, or relative to `directory`) without `.` or `..` parts."""
    return Path(os.path.normpath(directory / named))


def _remove_tree(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


async def _delete_branch(workspace: _Repo, branch: str) -> None:
    result = await workspace.run("branch", "--quiet", "-D", "--", branch)
    if result.returncode != 0:
        raise WorktreeError(f"Could not delete branch {branch}: {result.error}")


async def _checked(git: _Git, *args: str) -> GitResult:
    result = await git.run(*args)
    if result.returncode != 0:
        raise WorktreeError(f"git {args[0]} failed: {result.error}")
    return result


# --- merge and discard -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Listed:
    """A linked worktree as `git worktree list` reports it."""

    path: str
    locked: bool


async def _merge_locked(
    workspace: _Repo,
    branch: str,
    message: str,
    expected: str | None,
    protected: Sequence[ProtectedFile],
) -> MergeOutcome:
    tip = await _branch_commit(workspace, branch)
    if tip is None:
        return _refused(f"No branch {branch} to merge: it was merged or discarded already.")
    if expected is not None and tip != expected:
        return _refused(
            f"{branch} no longer points at the commit its task recorded ({expected[:12]}); "
            "something changed it since, so it is not merged."
        )
    if problem := await _protected_change(workspace, branch, tip, protected):
        return _refused(problem)
    current = await workspace.run("symbolic-ref", "--quiet", "--short", "HEAD")
    if current.returncode != 0:
        return _refused(
            f"The workspace is on a detached HEAD; check out a branch to merge {branch}."
        )
    target = current.text
    if target == branch:
        return _refused(f"{branch} is the workspace's current branch; check out another one first.")
    if await _merge_in_progress(workspace):
        return _refused(
            f"A merge is already in progress in the workspace; finish or abort it before "
            f"merging {branch}."
        )
    linked = await _find_worktree(workspace, branch)
    if linked is not None and linked.locked:
        return _refused(f"{branch} is still in use by a running task; merge it once it has ended.")
    before = (await _checked(workspace, "rev-parse", "HEAD")).text
    identity = await _identity_config(workspace)
    text = message.strip() or f"Merge {branch}"
    result = await workspace.run(
        "merge",
        "--no-ff",
        "--no-edit",
        "--no-verify",
        "--no-autostash",
        "--quiet",
        f"--message={text}",
        tip,
        config=identity,
    )
    if result.returncode == 0:
        return await _after_merge(workspace, branch, target, before, linked)
    if await _merge_in_progress(workspace):
        return await _abort_conflicted(workspace, branch, target)
    return _refused(_refusal_message(branch, target, result.stderr))


async def _after_merge(
    workspace: _Repo, branch: str, target: str, before: str, linked: _Listed | None
) -> MergeOutcome:
    """Delete the merged branch (its work now lives in `target`) and its leftover worktree."""
    commit = (await _checked(workspace, "rev-parse", "HEAD")).text
    note = ""
    try:
        if linked is not None:
            await _remove_listed_worktree(workspace, linked)
        await _delete_branch(workspace, branch)
    except WorktreeError as error:
        note = f" ({error})"
    if commit == before:
        message = f"{target} already contained everything on {branch}; nothing new to merge{note}."
    else:
        message = f"Merged {branch} into {target} as {commit[:12]}{note}."
    return MergeOutcome(merged=True, commit=commit, message=message)


async def _abort_conflicted(workspace: _Repo, branch: str, target: str) -> MergeOutcome:
    listed = await workspace.run("diff", "--name-only", "-z", "--diff-filter=U", "--no-ext-diff")
    conflicts = tuple(os.fsdecode(name) for name in listed.stdout.split(b"\0") if name)
    aborted = await workspace.run("merge", "--abort")
    if aborted.returncode != 0:
        raise WorktreeError(
            f"Merging {branch} into {target} conflicted and could not be aborted: {aborted.error}"
        )
    return MergeOutcome(
        merged=False,
        commit=None,
        conflicts=conflicts,
        message=(
            f"{branch} conflicts with {target} in {_name_files(conflicts)}; nothing was merged "
            f"and the branch was kept."
        ),
    )


async def _protected_change(
    workspace: _Repo, branch: str, tip: str, protected: Sequence[ProtectedFile]
) -> str | None:
    """Why the branch's changes may not be merged: every path it changes under `.baton/`
    or among Baton's own files, and every submodule it adds; None when there is none.

    `--no-renames` lists a rename as a deletion and an addition, so both of its names
    are looked at: moving Baton's config away is as refused as rewriting it.
    """
    base = await workspace.run("merge-base", "HEAD", tip)
    if base.returncode != 0:
        return f"{branch} shares no history with the workspace's branch; it is not merged."
    raw = await _checked(
        workspace,
        "diff",
        "--raw",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--ignore-submodules=none",
        base.text,
        tip,
        "--",
    )
    own = _in_repository(workspace.top, protected)
    named: list[str] = []  # Baton's files: every one is named
    baton_dir: list[str] = []
    submodules: list[str] = []
    fields = raw.stdout.split(b"\0")
    for meta, name in zip(fields[0::2], fields[1::2], strict=False):
        path = os.fsdecode(name)
        modes = meta.decode("ascii", "replace").lstrip(":").split()
        if path in own:
            named.append(f"{printable(path)} ({own[path]})")
        elif any(path == d or path.startswith(f"{d}/") for d in AGENT_READ_DIRS):
            baton_dir.append(path)
        elif len(modes) > 1 and modes[1] == "160000":
            submodules.append(path)
    return _protection_refusal(branch, named, baton_dir, submodules)


def _in_repository(top: Path, protected: Sequence[ProtectedFile]) -> dict[str, str]:
    """Baton's files that lie in the repository, by the path git names them with."""
    inside: dict[str, str] = {}
    for item in protected:
        if item.path.is_relative_to(top) and item.path != top:
            inside.setdefault(item.path.relative_to(top).as_posix(), item.what)
    return inside


def _protection_refusal(
    branch: str, named: list[str], baton_dir: list[str], submodules: list[str]
) -> str | None:
    """One sentence naming what the branch may not change; None when it changes none."""
    changed = list(named)
    if baton_dir:
        changed.append(
            f"{_name_files(baton_dir)} ({PROTECTED_DIR}/, .claude/agents/, .claude/skills/: "
            "the agents, skills and memory Baton runs)"
        )
    parts = []
    if changed:
        parts.append(f"changes {_joined_names(changed)}, which no agent may change")
    if submodules:
        parts.append(f"adds a submodule at {_name_files(submodules)}")
    if not parts:
        return None
    return f"{branch} {' and '.join(parts)}; it is not merged."


def _joined_names(items: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    if len(items) == 1:
        return items[0]
    return f"{', '.join(items[:-1])} and {items[-1]}"


async def _merge_in_progress(workspace: _Repo) -> bool:
    result = await workspace.run("rev-parse", "--verify", "--quiet", "MERGE_HEAD")
    return result.returncode == 0


def _refusal_message(branch: str, target: str, stderr: str) -> str:
    """Say why git would not start the merge; git has changed nothing in these cases."""
    files = _indented_lines(stderr)
    if "untracked working tree files would be overwritten" in stderr:
        return (
            f"Could not merge {branch} into {target}: untracked files in the workspace "
            f"({_name_files(files)}) would be overwritten; move or remove them first. "
            f"Nothing was changed."
        )
    if "would be overwritten" in stderr:
        return (
            f"Could not merge {branch} into {target}: the workspace has local changes "
            f"({_name_files(files)}) that the merge would overwrite; commit or stash them first. "
            f"Nothing was changed."
        )
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    reason = lines[0].removeprefix("fatal: ").removeprefix("error: ") if lines else "git failed"
    return f"Could not merge {branch} into {target}: {reason[:300]}. Nothing was changed."


def _indented_lines(stderr: str) -> tuple[str, ...]:
    """The file names git lists, indented, under its 'would be overwritten' errors."""
    lines = stderr.splitlines()
    return tuple(line.strip() for line in lines if line[:1] in ("\t", " ") and line.strip())


async def _find_worktree(workspace: _Repo, branch: str) -> _Listed | None:
    """The linked worktree that has `branch` checked out, never the workspace itself."""
    result = await _checked(workspace, "worktree", "list", "--porcelain", "-z")
    ref = f"refs/heads/{branch}".encode()
    for number, record in enumerate(result.stdout.split(b"\0\0")):
        fields = [item for item in record.split(b"\0") if item]
        values = dict(item.partition(b" ")[::2] for item in fields)
        path = os.fsdecode(values.get(b"worktree", b""))
        if number == 0 or not path or Path(path) == workspace.top:
            continue
        if values.get(b"branch") == ref:
            return _Listed(path=path, locked=b"locked" in values)
    return None


async def _remove_listed_worktree(workspace: _Repo, linked: _Listed) -> None:
    """Remove a worktree found through git; only git deletes it, since its path came from
    a file in the admin dir rather than from us."""
    await workspace.run("worktree", "unlock", linked.path)
    result = await workspace.run("worktree", "remove", "--force", linked.path)
    if result.returncode != 0:
        raise WorktreeError(f"Could not remove the worktree at {linked.path}: {result.error}")


def _refused(message: str) -> MergeOutcome:
    return MergeOutcome(merged=False, commit=None, message=message)


# --- text for people -------------------------------------------------------------------


def _describe(change: FileChange) -> str:
    name = printable(change.path)
    if change.binary:
        return f"{name} (binary)"
    return f"{name} (+{change.added} {_MINUS}{change.removed})"


def _name_files(paths: Sequence[str]) -> str:
    shown = ", ".join(printable(path) for path in paths[:_MESSAGE_FILES])
    more = len(paths) - _MESSAGE_FILES
    return shown + (f" and {more} more" if more > 0 else "") if shown else "some files"


def printable(path: str) -> str:
    """A file name safe to show: control characters and undecodable bytes escaped."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


# --- one lock per repository -----------------------------------------------------------

# Keyed by event loop too: an asyncio.Lock belongs to the loop that first waits on it.
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


# Per repository (common dir): when its identity was read, and what `commit-tree` adds.
_identities: dict[Path, tuple[float, tuple[str, ...]]] = {}
# Per repository and commit: the commit's tree.
_commit_trees: dict[tuple[Path, str], str] = {}
_TREES_KEPT = 256
# Per event loop: the git lookups in flight, by what they ask (see `_shared`).
_in_flight: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[Hashable, asyncio.Future[Any]]
] = weakref.WeakKeyDictionary()


async def _shared(key: Hashable, ask: Callable[[], Awaitable[_T]]) -> _T:
    """`ask()`, or the answer of the same question already in flight: sixteen children
    finishing together make one git call where each would have made its own. Only for
    answers that cannot have changed since the call began (a commit's tree) or may be
    seconds old anyway (the identity). A caller cancelled meanwhile leaves the call to
    the others."""
    pending = _in_flight.setdefault(asyncio.get_running_loop(), {})
    future = pending.get(key)
    if future is None:
        future = asyncio.ensure_future(ask())
        pending[key] = future

        def done(finished: asyncio.Future[Any]) -> None:
            if pending.get(key) is finished:
                del pending[key]
            if not finished.cancelled():
                finished.exception()  # retrieved, even when every caller went away

        future.add_done_callback(done)
    return await asyncio.shield(future)


def _repo_lock(common_dir: Path) -> asyncio.Lock:
    """Serialise what rewrites shared refs or worktree records: git takes no turns itself."""
    per_loop = _locks.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(common_dir, asyncio.Lock())


# --- threads' worktrees ----------------------------------------------------------------
#
# On a workspace with a git remote, each thread works in a worktree of its own, on a
# branch `baton/<id>` that lives as long as the thread's work: committed after each run,
# pushed, merged into by isolated children. Like a child's, it is only ever reached with
# its git directories pinned (never through its `.git` file, which the thread's commands
# can rewrite).

_THREAD_BRANCH = re.compile(r"baton/(?!task-)[a-z0-9][a-z0-9-]{0,80}")


def is_thread_branch(branch: str) -> bool:
    """Whether `branch` has the shape of a thread's branch (`baton/<id>`, not a task's)."""
    return _THREAD_BRANCH.fullmatch(branch) is not None


async def add_thread_tree(repo: Path, path: Path, *, branch: str, start: str) -> Worktree:
    """A worktree at `path` (missing or empty, outside the repository) on a new branch
    `branch` from commit `start`; its `base` is `start`.

    Raises:
        WorktreeError: A branch that is not a thread's, a branch that exists already,
            `path` inside the repository, or git failing.
    """
    if not is_thread_branch(branch):
        raise WorktreeError(f"{branch!r} is not a thread branch (baton/<id>)")
    if not _SHA.fullmatch(start):
        raise WorktreeError(f"{start!r} is not a commit id")
    workspace = await _open_repo(repo)
    return await _add_thread_worktree(workspace, path, branch, new_from=start, base=start)


async def _add_thread_worktree(
    workspace: _Repo, path: Path, branch: str, *, new_from: str | None, base: str
) -> Worktree:
    """`worktree add` at `path` of `branch`: made from commit `new_from`, or the
    existing branch when None (git's stale record of a gone worktree pruned first)."""
    if path.is_relative_to(workspace.top):
        raise WorktreeError(f"Worktrees must live outside the workspace; {path} is inside it")
    await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
    # An existing branch may be checked out in another replica's worktree (each keeps
    # its own): --force lets this one check it out too. Turns of a thread take turns,
    # and each worktree is brought to the branch's tip before a turn (sync_thread_tree).
    where = (
        ("-b", branch, "--", str(path), new_from)
        if new_from
        else ("--force", "--", str(path), branch)
    )
    async with _repo_lock(workspace.common_dir):
        if new_from is None:
            await workspace.run("worktree", "prune")
        reason = f"Baton thread branch {branch}"
        result = await workspace.run(
            "worktree", "add", "--quiet", "--lock", "--reason", reason, *where
        )
    if result.returncode != 0:
        raise WorktreeError(f"Could not make a worktree for {branch}: {result.error}")
    git_dir = await _new_worktree_git_dir(path, workspace, path.name)
    return Worktree(
        repo=workspace.top,
        path=path,
        branch=branch,
        base=base,
        git_dir=git_dir,
        repo_git_dir=workspace.git_dir,
    )


async def reopen_thread_tree(repo: Path, path: Path, *, branch: str) -> Worktree | None:
    """The worktree `add_thread_tree` made at `path`, found through the repository's own
    records (never its `.git` file); None when it is gone or is not on `branch`."""
    if not is_thread_branch(branch) or not await asyncio.to_thread(path.is_dir):
        return None
    workspace = await _open_repo(repo)
    admin = workspace.common_dir / "worktrees"

    def find() -> Path | None:
        candidates = sorted(admin.glob(f"{glob_escape(path.name)}*")) if admin.is_dir() else []
        for git_dir in candidates:
            if re.fullmatch(re.escape(path.name) + r"[0-9]*", git_dir.name) and _admin_dir_of(
                git_dir, path
            ):
                return git_dir
        return None

    git_dir = await asyncio.to_thread(find)
    if git_dir is None:
        return None
    tip = await _branch_commit(workspace, branch)
    if tip is None:
        return None
    checked_out = await _Git(cwd=workspace.top, options=(f"--git-dir={git_dir}",)).run(
        "symbolic-ref", "--quiet", "HEAD"
    )
    if checked_out.returncode != 0 or checked_out.text != f"refs/heads/{branch}":
        return None
    return Worktree(
        repo=workspace.top,
        path=path,
        branch=branch,
        base=tip,
        git_dir=git_dir,
        repo_git_dir=workspace.git_dir,
    )


def glob_escape(name: str) -> str:
    """`name` with glob's special characters taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", name)


async def commit_thread(
    tree: Worktree, *, message: str, identity: Sequence[str] = ()
) -> tuple[str, str | None]:
    """Commit what the thread's files now hold on its branch, as `identity`'s
    `user.name=…`/`user.email=…` (Baton's own when empty).

    Returns the branch's tip before and after (after == before: nothing changed). The
    worktree's own index is then reset to the new tip, so a later merge into the branch
    starts clean.
    """
    workspace = _workspace_of(tree)
    git = _common_git(tree)
    before = await _branch_commit(workspace, tree.branch)
    if before is None:
        raise WorktreeError(f"The branch {tree.branch} is gone")
    pinned = replace(tree, base=before, base_tree=None, index_stamp=None)
    async with _repo_lock(workspace.common_dir):
        tip, counting = await _commit_work_tree(
            git, workspace, pinned, message, tuple(identity) or _BATON_IDENTITY
        )
        if counting is not None:
            counting.cancel()
        if tip != before:
            await _checked(_own_git(tree), "read-tree", tip)
    return before, (tip if tip != before else None)


async def thread_change(tree: Worktree, *, since: str) -> tuple[FileChange, ...]:
    """Lines added and removed per file between commit `since` and the branch's tip."""
    git = _common_git(tree)
    tip = await _branch_commit(git, tree.branch)
    if tip is None:
        raise WorktreeError(f"The branch {tree.branch} is gone")
    since_tree, tip_tree = await _trees(git, since, tip)
    if since_tree == tip_tree:
        return ()
    return await _numstat(git, since_tree, tip_tree)


async def merge_base(tree: Worktree, ref: str) -> str:
    """The commit where the thread's branch and `ref` (its base, fetched) last met."""
    git = _common_git(tree)
    result = await _checked(git, "merge-base", f"refs/heads/{tree.branch}", ref)
    return result.text


async def thread_diff(tree: Worktree, *, since: str) -> bytes:
    """The branch's change since commit `since`, as a patch (bounded like all output)."""
    git = _common_git(tree)
    result = await _checked(
        git,
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--binary",
        "--no-renames",
        since,
        f"refs/heads/{tree.branch}",
        "--",
    )
    return result.stdout


async def merge_into_thread(
    tree: Worktree,
    branch: str,
    *,
    message: str,
    expected: str | None = None,
    protected: Sequence[ProtectedFile] = (),
) -> MergeOutcome:
    """`merge` of an isolated child's branch into the thread's branch, in its worktree,
    with the thread's git directories pinned."""
    if not _is_baton_branch(branch):
        return _not_ours(branch)
    workspace = _repo(tree.path, tree.git_dir, tree.git_dir.parent.parent)
    async with _repo_lock(workspace.common_dir):
        return await _merge_locked(workspace, branch, message, expected, protected)


async def remove_thread_tree(tree: Worktree, *, delete_branch: bool) -> None:
    """Remove the thread's worktree (its work stays on the branch unless `delete_branch`)."""
    workspace = _workspace_of(tree)
    await _remove_own_worktree(workspace, tree)
    if delete_branch:
        async with _repo_lock(workspace.common_dir):
            await _delete_thread_ref(workspace, tree.branch)


async def _delete_thread_ref(workspace: _Repo, branch: str) -> bool:
    """Delete a thread's branch even where another replica's worktree has it checked
    out (`git branch -D` refuses that); False when there was none."""
    tip = await _branch_commit(workspace, branch)
    if tip is None:
        return False
    result = await workspace.run("update-ref", "-d", f"refs/heads/{branch}", tip)
    if result.returncode != 0:
        raise WorktreeError(f"Could not delete branch {branch}: {result.error}")
    return True


async def remove_leftover_tree(repo: Path, path: Path) -> None:
    """Remove a worktree this replica left at `path` for a branch that is gone or done
    with (another replica discarded it, or its pull request closed): git forgets it,
    and its directory goes."""
    workspace = await _open_repo(repo)
    async with _repo_lock(workspace.common_dir):
        await workspace.run("worktree", "unlock", str(path))
        removed = await workspace.run("worktree", "remove", "--force", "--force", str(path))
    if removed.returncode != 0 and await asyncio.to_thread(path.exists):
        await asyncio.to_thread(_remove_tree, path)
        async with _repo_lock(workspace.common_dir):
            await workspace.run("worktree", "prune")


async def delete_thread_branch(repo: Path, branch: str) -> bool:
    """Delete a thread's branch whose worktree is gone; False when there was none."""
    if not is_thread_branch(branch):
        raise WorktreeError(f"{branch!r} is not a thread branch (baton/<id>)")
    workspace = await _open_repo(repo)
    async with _repo_lock(workspace.common_dir):
        return await _delete_thread_ref(workspace, branch)


async def restore_thread_tree(repo: Path, path: Path, *, branch: str) -> Worktree:
    """A worktree at `path` again for an existing thread branch whose directory is gone
    (git's stale record of it is pruned first)."""
    if not is_thread_branch(branch):
        raise WorktreeError(f"{branch!r} is not a thread branch (baton/<id>)")
    workspace = await _open_repo(repo)
    tip = await _branch_commit(workspace, branch)
    if tip is None:
        raise WorktreeError(f"The branch {branch} is gone")
    return await _add_thread_worktree(workspace, path, branch, new_from=None, base=tip)


async def sync_thread_tree(tree: Worktree) -> bool:
    """Bring a thread's worktree to its branch's tip when another replica committed on
    the branch since this worktree last committed (or synced); True if files moved.

    The worktree's index holds the tree it last saw (`commit_thread` resets it to each
    new tip); a two-way `read-tree -m -u` moves the files from that tree to the tip's,
    and refuses, changing nothing, when a file it would change was edited here and not
    committed.

    Raises:
        WorktreeError: The branch is gone, or files here would be overwritten.
    """
    own = _own_git(tree)
    common = _common_git(tree)
    tip = await _branch_commit(common, tree.branch)
    if tip is None:
        raise WorktreeError(f"The branch {tree.branch} is gone")
    seen = (await _checked(own, "write-tree")).text
    (tip_tree,) = await _trees(common, tip)
    if seen == tip_tree:
        return False
    async with _repo_lock(tree.git_dir.parent.parent):
        moved = await own.run("read-tree", "-m", "-u", seen, tip)
    if moved.returncode != 0:
        raise WorktreeError(
            f"{tree.branch} moved on (committed from another replica) and this worktree "
            f"has changes of its own in the same files; they were kept: {moved.error}"
        )
    return True


async def branch_exists(repo: Path, branch: str) -> bool:
    """Whether the repository holding `repo` has a local branch `branch`."""
    return await _branch_commit(await _open_repo(repo), branch) is not None
