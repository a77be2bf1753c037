"""A branch per thread on a workspace with a git remote, and its pull request.

The workspace's directory is a clone of the remote that no thread edits. A thread's
first turn fetches the base branch and makes the thread a worktree of its own on a
branch `baton/<id>` from it; every run of the thread works there. After a run Baton
commits what changed (author Baton, `Co-authored-by` the person who asked), and a
person or the agent may publish it: Baton pushes the branch (only `baton/*` branches,
a force only with a lease on its own branch) and opens a draft pull request, or
updates the one it opened. Credentials stay in Baton's process (`bot.forge.git_remote`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from dataclasses import dataclass
from pathlib import Path

from bot.config import Repository
from bot.errors import BatonError
from bot.forge.forge import Forge, ForgeError, ForgeFailure, PullRequest
from bot.forge.git_remote import GitRemote, PushOutcome, PushStatus, RemoteGitError
from bot.forge.remote import RepoRef, parse_remote, safe_url
from bot.store import SessionKey
from bot.store.branches import BranchStore, ThreadBranch
from bot.subagents import worktree as worktrees

logger = logging.getLogger(__name__)

# Under the state directory: `threads/<owner>/<repository>/<branch id>`.
THREADS_DIR = "threads"
# What runs with the repository's secrets once it is on the forge: GitHub Actions
# workflows and the actions they use from the repository.
WORKFLOW_PATHS = (".github/workflows/", ".github/actions/")
# How many branches one thread may have over its life (each merged or closed PR frees
# its thread for a new one).
_GENERATIONS = 50


class ThreadWorkError(BatonError):
    """A thread's branch could not be made, committed, pushed or published; says why.

    `retry`: the forge could not be reached, so trying again later may work.
    """

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadChange:
    """A thread branch's change against its base, for people and the buttons."""

    branch_id: int
    branch: str
    files: tuple[worktrees.FileChange, ...]

    def summary(self) -> str:
        """Totals, then up to 20 files with their own counts (as a child's change)."""
        return worktrees.Change(branch=self.branch, commit="", files=self.files).summary()


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """What publishing did: the pull request, and whether it was new."""

    pull: PullRequest
    opened: bool
    pushed: PushOutcome


def branch_for(key: SessionKey) -> str:
    """`baton/<seconds of the thread>-<6 hex>`: short, readable, unique per thread."""
    digest = hashlib.sha256(key.key.encode()).hexdigest()[:6]
    seconds = "".join(ch for ch in (key.thread_ts or key.name or "").split(".")[0] if ch.isdigit())
    return f"baton/{(seconds or 'thread')[:12]}-{digest}"


class ThreadRepository:
    """One workspace directory with a remote: its clone, and each thread's branch."""

    def __init__(
        self,
        *,
        repository: Repository,
        store: BranchStore,
        forge: Forge | None,
        state_dir: Path,
        remote: GitRemote | None = None,
    ) -> None:
        self.repository = repository
        self.repo: RepoRef = parse_remote(repository.remote)
        self.store = store
        self.forge = forge
        self.trees_dir = state_dir / THREADS_DIR / self.repo.owner / self.repo.name
        self.remote = (
            remote
            if remote is not None
            else GitRemote(
                self.repo,
                token=self._token,
                refused=self._token_refused,
                hint=forge.hint if forge is not None else None,
            )
        )
        # Threads whose worktree is being made or changed here: one at a time each.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @property
    def root(self) -> Path:
        """The workspace's checkout (the clone), which no thread edits."""
        return self.repository.path

    @property
    def base(self) -> str:
        return self.repository.base

    async def _token(self) -> str | None:
        """The token for git's next command. A GitHub App's comes from the forge: its
        failure (GitHub down, a bad key, an App not installed) is git's failure to
        reach the remote or be let in, so every git caller says it and nothing is lost."""
        if self.forge is None:
            return None
        try:
            return await self.forge.token(self.repo)
        except ForgeError as error:
            unreachable = error.kind is ForgeFailure.UNREACHABLE
            failure = PushStatus.UNREACHABLE if unreachable else PushStatus.AUTH
            raise RemoteGitError(
                f"Could not get a token for {self.repo.full_name}: {error}", failure=failure
            ) from error

    def _token_refused(self, token: str) -> bool:
        """git was refused `token`: the forge drops it; whether a fresh one may work."""
        return self.forge is not None and self.forge.forget_token(self.repo, token)

    def _lock(self, session_key: str) -> asyncio.Lock:
        lock = self._locks.get(session_key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[session_key] = lock
        return lock

    async def ensure_clone(self) -> None:
        """Clone the remote into the workspace's directory when it is empty."""
        empty = await asyncio.to_thread(lambda: not any(self.root.iterdir()))
        if not empty:
            return
        logger.info("cloning %s into %s", self.repo.url, self.root)
        await self.remote.clone(self.root, base=self.base)

    # --- a thread's worktree ------------------------------------------------------------

    async def open(
        self, key: SessionKey, *, requester: str | None
    ) -> tuple[ThreadBranch, worktrees.Worktree]:
        """The thread's branch and worktree, made from the freshly fetched base on the
        thread's first turn (or after its branch was discarded or its PR closed)."""
        async with self._lock(key.key):
            known = await self.store.of_thread(key.key)
            if known is not None and known.active:
                tree = await self.tree_of(known)
                if tree is None:
                    # No worktree here: the thread ran on another replica (each makes its
                    # own, in its state directory), or its directory went. The work is
                    # on the branch: check it out again.
                    return known, await self._restore(known)
                try:
                    # Another replica may have committed on the branch since this
                    # worktree last saw it: its files move to the branch's tip first.
                    await worktrees.sync_thread_tree(tree)
                except worktrees.WorktreeError as error:
                    raise ThreadWorkError(str(error)) from error
                return known, tree
            if known is not None:
                # Discarded, or its pull request closed (maybe on another replica): a
                # worktree this replica kept of it goes before the thread starts anew.
                await self._remove_leftover(known)
                await self.store.remove(known.id)
            try:
                await self.ensure_clone()  # a clone that failed at start-up is tried again
                start = await self.remote.fetch_base(self.root, self.base)
            except RemoteGitError as error:
                raise ThreadWorkError(
                    f"Could not fetch {self.base} from {self.repo.full_name}: {error}"
                ) from error
            branch = await self._free_name(key)
            path = self.tree_path(branch)
            try:
                tree = await worktrees.add_thread_tree(self.root, path, branch=branch, start=start)
            except worktrees.WorktreeError as error:
                raise ThreadWorkError(str(error)) from error
            row = await self.store.add(
                session_key=key.key,
                channel_id=key.channel_id or "",
                thread_ts=key.thread_ts or "",
                repo=self.repo.full_name,
                branch=branch,
                base=self.base,
                worktree=str(path),
                requester=requester,
            )
            await self.store.set(row.id, head=start)
            return await self._refreshed(row), tree

    async def _free_name(self, key: SessionKey) -> str:
        """The thread's branch name, with `-2`, `-3`… after it when an earlier branch of
        the thread (its pull request merged or closed) still holds the name."""
        first = branch_for(key)
        for generation in range(1, _GENERATIONS + 1):
            name = first if generation == 1 else f"{first}-{generation}"
            taken = await self.store.by_branch(self.repo.full_name, name) is not None
            if not taken and not await worktrees.branch_exists(self.root, name):
                return name
        raise ThreadWorkError(
            f"This thread has had {_GENERATIONS} branches already; start a new thread."
        )

    async def _restore(self, row: ThreadBranch) -> worktrees.Worktree:
        """A new worktree for a branch whose directory is gone (the work is on the branch)."""
        try:
            return await worktrees.restore_thread_tree(
                self.root, self.tree_path(row.branch), branch=row.branch
            )
        except worktrees.WorktreeError as error:
            raise ThreadWorkError(
                f"Could not make the worktree of {row.branch} again: {error}"
            ) from error

    async def _remove_leftover(self, row: ThreadBranch) -> None:
        path = self.tree_path(row.branch)
        if not await asyncio.to_thread(path.exists):
            return
        try:
            await worktrees.remove_leftover_tree(self.root, path)
        except (OSError, worktrees.WorktreeError) as error:
            raise ThreadWorkError(
                f"Could not remove the old worktree of {row.branch} at {path}: {error}"
            ) from error

    def tree_path(self, branch: str) -> Path:
        """Where this replica keeps `branch`'s worktree: in its own state directory
        (the path stored with the branch is where the replica that made it keeps it)."""
        return self.trees_dir / branch.removeprefix("baton/")

    async def tree_of(self, row: ThreadBranch) -> worktrees.Worktree | None:
        """The branch's worktree on this replica, if it has one."""
        return await worktrees.reopen_thread_tree(
            self.root, self.tree_path(row.branch), branch=row.branch
        )

    async def _refreshed(self, row: ThreadBranch) -> ThreadBranch:
        fresh = await self.store.get(row.id)
        assert fresh is not None
        return fresh

    # --- after a run --------------------------------------------------------------------

    async def commit(
        self, row: ThreadBranch, *, message: str, co_author: tuple[str, str] | None
    ) -> ThreadChange | None:
        """Commit the run's work on the thread's branch; the branch's whole change
        against its base when this run changed something, else None."""
        async with self._lock(row.session_key):
            tree = await self.tree_of(row)
            if tree is None:
                return None
            text = message.strip() or f"Baton: work in thread {row.thread_ts}"
            if co_author is not None:
                name, email = co_author
                text += f"\n\nCo-authored-by: {_trailer(name)} <{_trailer(email)}>"
            try:
                _, tip = await worktrees.commit_thread(tree, message=text)
            except worktrees.WorktreeError as error:
                raise ThreadWorkError(
                    f"Could not commit the work on {row.branch}; it stays in its worktree: {error}"
                ) from error
            if tip is None:
                return None
            await self.store.set(row.id, head=tip)
            return await self.change(await self._refreshed(row), tree=tree)

    async def change(
        self, row: ThreadBranch, *, tree: worktrees.Worktree | None = None
    ) -> ThreadChange | None:
        """The branch's change against where it left its base."""
        tree = tree or await self.tree_of(row)
        if tree is None:
            return None
        since = await self._fork_point(tree)
        files = await worktrees.thread_change(tree, since=since)
        if not files:
            return None
        return ThreadChange(branch_id=row.id, branch=row.branch, files=files)

    async def _fork_point(self, tree: worktrees.Worktree) -> str:
        try:
            return await worktrees.merge_base(tree, f"refs/remotes/origin/{self.base}")
        except worktrees.WorktreeError:
            return tree.base

    async def diff(self, row: ThreadBranch) -> bytes:
        """The branch's change against its base, as a patch."""
        tree = await self.tree_of(row)
        if tree is None:
            raise ThreadWorkError(f"{row.branch} has no worktree any more")
        return await worktrees.thread_diff(tree, since=await self._fork_point(tree))

    # --- publishing ---------------------------------------------------------------------

    async def _unpushed_workflows(self, row: ThreadBranch, tree: worktrees.Worktree) -> list[str]:
        """The CI files the branch changes that the forge has not got yet."""
        since = row.pushed or await self._fork_point(tree)
        files = await worktrees.thread_change(tree, since=since)
        return [f.path for f in files if f.path.startswith(WORKFLOW_PATHS)]

    async def publish(
        self, row: ThreadBranch, *, title: str, body: str, trusted: bool = False
    ) -> Published:
        """Push the thread's branch and open its draft pull request, or update the one
        it has. Raises ThreadWorkError saying what went wrong (nothing is lost: the work
        stays on the branch).

        `trusted`: an approver asked. Only then is a change to CI workflows pushed: once
        on the forge, they run with the repository's secrets, and a model can be talked
        into writing one that sends them away.
        """
        if self.forge is None:
            raise ThreadWorkError(
                f"No forge credentials: set GITHUB_TOKEN or a GitHub App to open pull "
                f"requests on {self.repo.full_name}"
            )
        async with self._lock(row.session_key):
            row = await self._refreshed(row)
            tree = await self.tree_of(row)
            if tree is None:
                raise ThreadWorkError(f"{row.branch} has no worktree any more")
            if not trusted and (workflows := await self._unpushed_workflows(row, tree)):
                raise ThreadWorkError(_workflow_refusal(workflows))
            try:
                pushed = await self._push(row, tree)
            except RemoteGitError as error:
                raise ThreadWorkError(f"Could not push {row.branch}: {error}") from error
            if not pushed.landed:
                raise ThreadWorkError(pushed.message, retry=pushed.status is PushStatus.UNREACHABLE)
            try:
                if row.pr_number is not None:
                    pull = await self.forge.update_pull(self.repo, row.pr_number, body=body)
                    opened = False
                else:
                    pull = await self.forge.open_pull(
                        self.repo, branch=row.branch, base=row.base, title=title, body=body
                    )
                    opened = True
            except ForgeError as error:
                raise ThreadWorkError(
                    str(error), retry=error.kind is ForgeFailure.UNREACHABLE
                ) from error
            await self.store.set(row.id, pr_number=pull.number, pr_url=safe_url(pull.url))
            return Published(pull=pull, opened=opened, pushed=pushed)

    async def push_update(self, row: ThreadBranch) -> PushOutcome | None:
        """After a later run of a thread with a pull request: push, so the PR updates."""
        if row.pr_number is None:
            return None
        async with self._lock(row.session_key):
            row = await self._refreshed(row)
            tree = await self.tree_of(row)
            if tree is None:
                return None
            if workflows := await self._unpushed_workflows(row, tree):
                return PushOutcome(
                    status=PushStatus.PROTECTED, message=_workflow_refusal(workflows)
                )
            return await self._push(row, tree)

    async def _push(self, row: ThreadBranch, tree: worktrees.Worktree) -> PushOutcome:
        """Push the branch (a lease on what Baton pushed last; a rejected push rebases
        once) and record the commit the forge now has."""
        pushed = await self.remote.push_with_retry(
            self.root, tree.path, row.branch, expected_remote=row.pushed
        )
        if pushed.landed:
            tip = pushed.commit or row.head
            await self.store.set(row.id, pushed=tip, head=tip)
        return pushed

    async def discard(self, row: ThreadBranch) -> None:
        """Remove the thread's worktree and its branch; the thread's next change starts
        anew. What Baton pushed stays on the forge (a pull request is closed there)."""
        async with self._lock(row.session_key):
            tree = await self.tree_of(row)
            try:
                if tree is not None:
                    await worktrees.remove_thread_tree(tree, delete_branch=True)
                else:
                    await worktrees.delete_thread_branch(self.root, row.branch)
            except worktrees.WorktreeError as error:
                raise ThreadWorkError(f"Could not discard {row.branch}: {error}") from error
            await self.store.set(row.id, state="discarded")

    async def closed(self, row: ThreadBranch, *, merged: bool) -> None:
        """The pull request was merged or closed: its worktree goes, its branch stays."""
        async with self._lock(row.session_key):
            tree = await self.tree_of(row)
            if tree is not None:
                try:
                    await worktrees.remove_thread_tree(tree, delete_branch=False)
                except worktrees.WorktreeError as error:
                    logger.warning("could not remove the worktree of %s: %s", row.branch, error)
            await self.store.set(row.id, state="merged" if merged else "closed")


def _workflow_refusal(paths: list[str]) -> str:
    names = ", ".join(f"`{worktrees.printable(p)}`" for p in paths[:5])
    more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    return (
        f"The change edits CI workflows ({names}{more}), which run with the repository's "
        "secrets once pushed: only an approver may push it (Open or Update pull request)."
    )


def _trailer(text: str) -> str:
    """A name or address safe inside a trailer line: no line breaks, no angle brackets."""
    return " ".join(text.replace("<", "").replace(">", "").split())[:200]
