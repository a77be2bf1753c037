"""Clone, fetch and push a workspace's forge repository over http(s).

Baton clones the remote once, fetches the base branch before a thread's first turn,
and pushes the thread's `baton/…` branch. Everything goes through the hardened runner
of `bot.subagents.worktree` (no hooks, no fsmonitor, no inherited `GIT_*` variables),
and:

- The token never touches a file, an argument or the sandbox. Each network command
  gets it in its own environment as command-scope config (`GIT_CONFIG_COUNT`): an
  `Authorization: Basic` header for the remote's URL only, after an empty value that
  drops any header the user's config adds there, and `credential.helper` reset to
  empty so no helper of the user's supplies or stores anything. `.git/config` keeps
  the plain URL.
- Every fetch and push names the URL and an explicit refspec; nothing reads the
  repository's `remote.origin` settings, tags and submodules are never fetched.
- Only `baton/…` branches are ever pushed, checked against a strict pattern before git
  runs; a force push happens only with a lease on the commit the caller expects.
- A network command takes at most `_NETWORK_S` seconds; one that stalls below
  `_LOW_SPEED_BYTES` per second for `_LOW_SPEED_S` seconds is stopped sooner.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from bot.errors import BatonError
from bot.forge.remote import RepoRef
from bot.subagents.worktree import GitResult, WorktreeError, identity_config, run_git

BATON_BRANCH = re.compile(r"baton/[a-z0-9][a-z0-9-]{0,80}")
_BASE_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_ONTO = re.compile(r"refs/(?:remotes/origin|heads)/[A-Za-z0-9._/-]{1,200}")
_NETWORK_S = 120.0
# A clone brings the whole history; run_git's own bound (300 s) stops it in the end.
_CLONE_S = 290.0
_LOW_SPEED_BYTES = 1000
_LOW_SPEED_S = 30
_TOKEN_USER = "x-access-token"
_REMOTE_LINES = 6
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Options that keep each command to what it is for: no tags, no submodules, no hooks
# (run_git turns them off too), no signing, no other ref moved by a rebase.
_CLONE_FLAGS = ("--quiet", "--no-tags", "--single-branch", "--no-recurse-submodules")
_FETCH_FLAGS = ("--quiet", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head")
_PUSH_FLAGS = ("--porcelain", "--no-verify", "--no-signed", "--no-follow-tags")
_REBASE_CONFIG = ("rebase.autoSquash=false", "rebase.updateRefs=false", "rebase.autoStash=false")
_REBASE_FLAGS = (
    *("--merge", "--quiet", "--no-autostash", "--no-verify", "--no-update-refs"),
    *("--no-fork-point", "--no-rerere-autoupdate"),
)

# What git prints when the forge would not take the credentials (or, with none, asks).
_AUTH_SIGNS = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "terminal prompts disabled",
    "returned error: 401",
    "returned error: 403",
    "invalid username or password",
    "permission to",
)
_NOT_FOUND_SIGNS = ("returned error: 404", "not found")
_UNREACHABLE_SIGNS = (
    "could not resolve",
    "failed to connect",
    "couldn't connect",
    "connection refused",
    "connection reset",
    "connection timed out",
    "timed out",
    "operation too slow",
    "unable to access",
    "empty reply from server",
    "the remote end hung up",
    "returned error: 5",
    "ssl connect",
    "certificate",
    "gnutls",
    "rpc failed",
)


class PushStatus(StrEnum):
    """What became of a push (and, on an error, what went wrong talking to the remote)."""

    PUSHED = "pushed"
    UP_TO_DATE = "up_to_date"
    REJECTED = "rejected"
    """Someone else pushed: not a fast-forward, or the lease no longer holds."""
    PROTECTED = "protected"
    """The forge declined the update: a pre-receive hook or a protected branch."""
    AUTH = "auth"
    """The forge refused the credentials (401/403), or asked for some and Baton had none."""
    UNREACHABLE = "unreachable"
    """No answer: connection refused, unknown host, timeout, a 5xx."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PushOutcome:
    """What a push did; `message` is one sentence for people, without any credential.

    Attributes:
        status: What happened.
        message: The same for people.
        commit: The commit the remote branch now has, when Baton put it there or found
            it there (PUSHED, UP_TO_DATE); else None.
    """

    status: PushStatus
    message: str
    commit: str | None = None

    @property
    def landed(self) -> bool:
        """Whether the remote branch now has the local branch's commit."""
        return self.status in (PushStatus.PUSHED, PushStatus.UP_TO_DATE)


class RemoteGitError(BatonError):
    """A clone, fetch, push or rebase failed; the message says why, never with a token.

    Attributes:
        failure: AUTH or UNREACHABLE when that is why; None for every other reason
            (a missing branch, a non-empty directory, a refused name).
    """

    def __init__(self, message: str, *, failure: PushStatus | None = None) -> None:
        super().__init__(message)
        self.failure = failure


TokenSource = Callable[[], Awaitable[str | None]]
# The remote refused a token: drop it, and say whether a fresh one may work.
TokenRefused = Callable[[str], bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Answer(GitResult):
    """A network command's result, its stderr cleared of secrets; `anonymous` when git
    had no token to offer."""

    anonymous: bool


class GitRemote:
    """A forge repository's git remote, reached with a token handed over per command.

    Args:
        repo: The repository and its URL (from `parse_remote`).
        token: Gives the token for the next command (None, or a source that answers
            None: anonymous). Errors it raises reach the caller unchanged.
        refused: Told of a token the remote refused; when it answers True (a cached
            installation token, dropped), the command runs once more with a fresh one,
            as the forge's REST calls do.
        hint: What an operator checks when the remote refuses the token, naming the
            variables (`check GITHUB_TOKEN`); said in the error.
    """

    def __init__(
        self,
        repo: RepoRef,
        *,
        token: TokenSource | None,
        refused: TokenRefused | None = None,
        hint: str | None = None,
    ) -> None:
        url = urlsplit(repo.url)
        if url.scheme not in ("http", "https") or any(c.isspace() for c in repo.url):
            raise RemoteGitError(f"remote {repo.url!r}: expected an http(s) URL")
        if not repo.url.isprintable():
            raise RemoteGitError(f"remote {repo.url!r}: the URL has control characters")
        self.repo = repo
        self._token = token
        self._refused = refused
        self._hint = hint
        self._scheme = url.scheme
        self._host = url.hostname or url.netloc

    # --- clone and fetch ---------------------------------------------------------------

    async def clone(self, path: Path, *, base: str) -> None:
        """Clone into `path` (missing, or an empty directory) and check out `base`.

        Only `base` is fetched, without tags or submodules; `.git/config` names the
        plain URL as `origin`.

        Raises:
            RemoteGitError: `path` holds something already, `base` is no branch name or
                not on the remote, or the remote could not be reached or refused Baton.
        """
        check_base_branch(base)
        path, created = await asyncio.to_thread(_empty_place, path)
        try:
            result = await self._network(
                path.parent,
                *("clone", *_CLONE_FLAGS, "--origin", "origin", "--branch", base),
                *("--", self.repo.url, str(path)),
                limit_s=_CLONE_S,
            )
        except BaseException:
            await asyncio.to_thread(_clear_place, path, created)
            raise
        if result.returncode != 0:
            await asyncio.to_thread(_clear_place, path, created)
            if _is_missing_ref(result.stderr):
                raise self._missing_base(base)
            raise self._error(result, f"Could not clone {self.repo.full_name}")

    async def fetch_base(self, repo_dir: Path, base: str) -> str:
        """Fetch the remote's `base` into `refs/remotes/origin/<base>`; its commit.

        Raises:
            RemoteGitError: `base` is no branch name or not on the remote, or the remote
                could not be reached or refused Baton.
        """
        check_base_branch(base)
        sha = await self._fetch(repo_dir, base)
        if sha is None:
            raise self._missing_base(base)
        return sha

    async def fetch_branch(self, repo_dir: Path, branch: str) -> str | None:
        """Fetch the remote's `baton/…` branch into `refs/remotes/origin/<branch>`; its
        commit, or None when the remote has no such branch (the tracking ref is then
        deleted too).

        Raises:
            RemoteGitError: `branch` is not a Baton branch, or the remote could not be
                reached or refused Baton.
        """
        check_baton_branch(branch)
        return await self._fetch(repo_dir, branch)

    async def _fetch(self, repo_dir: Path, branch: str) -> str | None:
        tracking = f"refs/remotes/origin/{branch}"
        result = await self._network(
            repo_dir,
            "fetch",
            *_FETCH_FLAGS,
            "--",
            self.repo.url,
            f"+refs/heads/{branch}:{tracking}",
        )
        if result.returncode != 0:
            if _is_missing_ref(result.stderr):
                await _local(repo_dir, "update-ref", "-d", tracking)
                return None
            raise self._error(result, f"Could not fetch {branch} from {self.repo.full_name}")
        found = await _local(repo_dir, "rev-parse", "--verify", "--quiet", f"{tracking}^{{commit}}")
        if found.returncode != 0:
            raise RemoteGitError(
                f"Fetched {branch} from {self.repo.full_name}, but found no commit"
            )
        return found.text

    # --- push --------------------------------------------------------------------------

    async def push(
        self, repo_dir: Path, branch: str, *, expected_remote: str | None
    ) -> PushOutcome:
        """Push the local `baton/…` branch to the remote branch of the same name.

        A plain push when `expected_remote` is None; else a force push that holds only
        while the remote branch is still at `expected_remote` (a lease).

        Raises:
            RemoteGitError: `branch` is not a Baton branch, `expected_remote` is not a
                commit id, the local branch is missing, or git failed for a reason that
                is none of `PushStatus`.
        """
        check_baton_branch(branch)
        if expected_remote is not None and not _SHA.fullmatch(expected_remote):
            raise RemoteGitError(f"expected_remote {expected_remote!r} is not a commit id")
        ref = f"refs/heads/{branch}"
        local = await _local(repo_dir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if local.returncode != 0:
            raise RemoteGitError(f"There is no local branch {branch} in {repo_dir} to push")
        commit = local.text
        lease = [f"--force-with-lease={ref}:{expected_remote}"] if expected_remote else []
        try:
            result = await self._network(
                repo_dir,
                "push",
                *_PUSH_FLAGS,
                "--recurse-submodules=no",
                *lease,
                "--",
                self.repo.url,
                f"{commit}:{ref}",
            )
        except RemoteGitError as error:
            if error.failure is None:
                raise
            return PushOutcome(status=error.failure, message=str(error))
        outcome = self._push_outcome(result, branch, commit)
        if outcome.landed:
            # As git does for a named remote: the tracking ref is where the push put it.
            await _local(repo_dir, "update-ref", f"refs/remotes/origin/{branch}", commit)
        return outcome

    async def push_with_retry(
        self, repo_dir: Path, worktree: Path, branch: str, *, expected_remote: str | None
    ) -> PushOutcome:
        """`push`; when someone else pushed meanwhile, fetch their commits, rebase
        Baton's onto them in `worktree` and push once more.

        When Baton's commits do not apply on top of theirs, the branch is left as it was
        and the outcome (REJECTED) says so.

        Raises:
            RemoteGitError: As `push` and `rebase` do (a refused name, `worktree` not
                clean or not on `branch`, ...).
        """
        first = await self.push(repo_dir, branch, expected_remote=expected_remote)
        if first.status is not PushStatus.REJECTED:
            return first
        try:
            theirs = await self.fetch_branch(repo_dir, branch)
        except RemoteGitError as error:
            if error.failure is None:
                raise
            return PushOutcome(status=error.failure, message=str(error))
        if theirs is None:
            return PushOutcome(
                status=PushStatus.REJECTED,
                message=(
                    f"The push of {branch} to {self.repo.full_name} was refused, and the branch "
                    "has since been deleted there; nothing was pushed."
                ),
            )
        conflicts = await self._rebase(worktree, branch, f"refs/remotes/origin/{branch}")
        if conflicts is not None:
            where = f" (conflicts in {_name_files(conflicts)})" if conflicts else ""
            return PushOutcome(
                status=PushStatus.REJECTED,
                message=(
                    f"Someone else pushed to {branch} on {self.repo.full_name} and Baton's "
                    f"commits do not apply on top of theirs{where}; Baton's branch was left "
                    "as it was and nothing was pushed."
                ),
            )
        lease = theirs if expected_remote is not None else None
        retry = await self.push(repo_dir, branch, expected_remote=lease)
        if retry.status is PushStatus.REJECTED:
            return PushOutcome(
                status=PushStatus.REJECTED,
                message=(
                    f"Someone else pushed to {branch} on {self.repo.full_name} again while "
                    "Baton was putting its commits on top of theirs; nothing was pushed."
                ),
            )
        return retry

    def _push_outcome(self, result: _Answer, branch: str, commit: str) -> PushOutcome:
        """Read `git push --porcelain`: one line `<flag>\\t<from>:<to>\\t<summary>` per ref."""
        where = self.repo.full_name
        line = _porcelain_line(result.stdout, f"refs/heads/{branch}")
        if line is None:
            if result.returncode == 0:
                raise RemoteGitError(f"git push to {where} reported nothing about {branch}")
            error = self._error(result, f"Could not push {branch} to {where}")
            if error.failure is None:
                raise error
            return PushOutcome(status=error.failure, message=str(error))
        flag, summary = line
        if flag in ("*", " ", "+"):
            return PushOutcome(
                status=PushStatus.PUSHED,
                message=f"Pushed {branch} to {where} ({commit[:12]}).",
                commit=commit,
            )
        if flag == "=":
            return PushOutcome(
                status=PushStatus.UP_TO_DATE,
                message=f"{branch} on {where} already has {commit[:12]}; nothing to push.",
                commit=commit,
            )
        if "remote rejected" in summary or "remote failure" in summary:
            said = _remote_lines(result.stderr)
            reason = f": {said}" if said else f" ({_reason(summary)})"
            return PushOutcome(
                status=PushStatus.PROTECTED,
                message=f"{where} declined the push to {branch}{reason}",
            )
        if "stale info" in summary:
            message = (
                f"{branch} on {where} is no longer at the commit Baton expected: someone else "
                "pushed to it. Nothing was overwritten."
            )
        else:
            message = (
                f"Someone else pushed to {branch} on {where} ({_reason(summary)}); the push "
                "was refused and nothing was overwritten."
            )
        return PushOutcome(status=PushStatus.REJECTED, message=message)

    # --- rebase ------------------------------------------------------------------------

    async def rebase(self, worktree: Path, branch: str, onto: str) -> bool:
        """Rebase Baton's commits on `branch`, checked out and clean in `worktree`, onto
        `onto` (a commit id or `refs/remotes/origin/…`); False, with the branch as it
        was, when they conflict.

        Git runs on the repository's own directory for the worktree (never one the
        worktree's `.git` file could point elsewhere), with hooks off, no autostash,
        no `exec` and no other ref moved.

        Raises:
            RemoteGitError: A refused branch or `onto`, `worktree` not on `branch` or with
                a rebase in progress, local changes in the way, or git failing otherwise.
        """
        return await self._rebase(worktree, branch, onto) is None

    async def _rebase(self, worktree: Path, branch: str, onto: str) -> tuple[str, ...] | None:
        """`rebase`: None when done, else the conflicted files (the rebase aborted)."""
        check_baton_branch(branch)
        if not (_SHA.fullmatch(onto) or (_ONTO.fullmatch(onto) and ".." not in onto)):
            raise RemoteGitError(f"Cannot rebase onto {onto!r}: give a commit id or a ref")
        git_dir = await asyncio.to_thread(_worktree_git_dir, worktree)
        options = (f"--git-dir={git_dir}", f"--work-tree={worktree}")
        ref = f"refs/heads/{branch}"

        async def run(*args: str) -> GitResult:
            try:
                return await run_git([*options, *args], cwd=worktree, env={})
            except WorktreeError as error:
                raise RemoteGitError(str(error)) from None

        head = await run("symbolic-ref", "--quiet", "HEAD")
        if head.returncode != 0 or head.text != ref:
            raise RemoteGitError(f"The worktree {worktree} does not have {branch} checked out")
        if await asyncio.to_thread(_rebase_in_progress, git_dir):
            raise RemoteGitError(f"A rebase is already in progress in {worktree}")
        target = await run("rev-parse", "--verify", "--quiet", f"{onto}^{{commit}}")
        before = await run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if target.returncode != 0 or before.returncode != 0:
            raise RemoteGitError(f"Cannot rebase {branch} onto {onto}: no such commit")
        ancestor = await run("merge-base", "--is-ancestor", target.text, before.text)
        if ancestor.returncode == 0:
            return None  # already on top of `onto`
        identity = [item for pair in await identity_config(run) for item in ("-c", pair)]
        config = [item for pair in _REBASE_CONFIG for item in ("-c", pair)]
        rebased = await run(*identity, *config, "rebase", *_REBASE_FLAGS, target.text)
        if rebased.returncode == 0:
            return None
        if not await asyncio.to_thread(_rebase_in_progress, git_dir):
            raise RemoteGitError(f"Could not rebase {branch} onto {onto}: {rebased.error}")
        listed = await run("diff", "--name-only", "-z", "--diff-filter=U", "--no-ext-diff")
        conflicts = tuple(os.fsdecode(name) for name in listed.stdout.split(b"\0") if name)
        aborted = await run("rebase", "--abort")
        after = await run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if aborted.returncode != 0 or after.text != before.text:
            raise RemoteGitError(
                f"Rebasing {branch} onto {onto} conflicted and could not be undone: {aborted.error}"
            )
        return conflicts

    # --- running git with the token ------------------------------------------------------

    async def _network(self, cwd: Path, *args: str, limit_s: float = _NETWORK_S) -> _Answer:
        """Run one git command that talks to the remote, with the token for it alone.

        A token the remote refuses is reported to `refused`; when a fresh one may work
        (a revoked or expired installation token), the command runs once more with it.
        """
        answer, token = await self._network_once(cwd, args, limit_s)
        if (
            answer.returncode != 0
            and token is not None
            and self._refused is not None
            and _failure(answer.stderr) is PushStatus.AUTH
            and self._refused(token)
        ):
            answer, _ = await self._network_once(cwd, args, limit_s)
        return answer

    async def _network_once(
        self, cwd: Path, args: Sequence[str], limit_s: float
    ) -> tuple[_Answer, str | None]:
        """One run of a network command; its answer and the token it offered."""
        env, secrets, token = await self._credentials()
        config = (
            "protocol.allow=never",
            f"protocol.{self._scheme}.allow=always",
            "core.askPass=",
            f"http.lowSpeedLimit={_LOW_SPEED_BYTES}",
            f"http.lowSpeedTime={_LOW_SPEED_S}",
        )
        flags = [item for pair in config for item in ("-c", pair)]
        try:
            async with asyncio.timeout(limit_s):
                result = await run_git([*flags, *args], cwd=cwd, env=env)
        except TimeoutError:
            raise RemoteGitError(
                f"{self._host} did not answer git {args[0]} within {limit_s:.0f} s",
                failure=PushStatus.UNREACHABLE,
            ) from None
        except WorktreeError as error:
            raise RemoteGitError(_scrub(str(error), secrets)) from None
        answer = _Answer(
            returncode=result.returncode,
            stdout=result.stdout,
            stderr=_scrub(result.stderr, secrets),
            anonymous=not secrets,
        )
        return answer, token or None

    async def _credentials(self) -> tuple[dict[str, str], tuple[str, ...], str | None]:
        """The environment that hands git the token for the remote's URL, the strings
        no message may show, and the token."""
        token = await self._token() if self._token is not None else None
        header_key = f"http.{self.repo.url}.extraHeader"
        # An empty value empties the list: no header from the user's config goes along.
        entries = [("credential.helper", ""), (header_key, "")]
        secrets: tuple[str, ...] = ()
        if token:
            if not token.isprintable() or any(c.isspace() for c in token):
                raise RemoteGitError(
                    "The forge token has spaces or control characters; it cannot be used"
                )
            basic = base64.b64encode(f"{_TOKEN_USER}:{token}".encode()).decode("ascii")
            entries.append((header_key, f"Authorization: Basic {basic}"))
            secrets = (token, basic)
        env = {"GIT_CONFIG_COUNT": str(len(entries))}
        for number, (key, value) in enumerate(entries):
            env[f"GIT_CONFIG_KEY_{number}"] = key
            env[f"GIT_CONFIG_VALUE_{number}"] = value
        return env, secrets, token

    def _error(self, result: _Answer, doing: str) -> RemoteGitError:
        """Why a network command failed, for people: AUTH or UNREACHABLE when it says so."""
        failure = _failure(result.stderr)
        where = self.repo.full_name
        if failure is PushStatus.AUTH:
            if result.anonymous:
                hint = (
                    "it asks for credentials and Baton has none (set GITHUB_TOKEN or a GitHub App)"
                )
            else:
                hint = (
                    "it refused Baton's token, which must be valid and allowed to use the "
                    f"repository: {self._hint}"
                    if self._hint
                    else "it refused Baton's token; check that it is valid and may use the "
                    "repository"
                )
            return RemoteGitError(f"{doing}: {hint} ({result.error})", failure=failure)
        if failure is None and any(sign in result.stderr.lower() for sign in _NOT_FOUND_SIGNS):
            return RemoteGitError(
                f"{doing}: {where} was not found at {self.repo.url}, or Baton's token may not "
                f"see it{self._checks} ({result.error})",
                failure=PushStatus.AUTH,
            )
        if failure is PushStatus.UNREACHABLE:
            return RemoteGitError(
                f"{doing}: could not reach {self._host} ({result.error})", failure=failure
            )
        return RemoteGitError(f"{doing}: {result.error}")

    @property
    def _checks(self) -> str:
        """`: check GITHUB_TOKEN` (what the operator checks), or nothing when unknown."""
        return f": {self._hint}" if self._hint else ""

    def _missing_base(self, base: str) -> RemoteGitError:
        return RemoteGitError(
            f"{self.repo.full_name} has no branch {base!r}; check the workspace's base branch"
        )


# --- names -------------------------------------------------------------------------------


def check_baton_branch(branch: str) -> None:
    """Refuse any name but `baton/` and lowercase letters, digits and dashes.

    Raises:
        RemoteGitError: Any other name (`main`, `baton/../main`, `+baton/x`, refspecs...).
    """
    if not BATON_BRANCH.fullmatch(branch):
        raise RemoteGitError(
            f"{branch!r} is not a Baton branch (baton/ then lowercase letters, digits and "
            "dashes); Baton only pushes its own branches"
        )


def check_base_branch(base: str) -> None:
    """Refuse a base branch name git would not take, or one that reads as an option.

    Raises:
        RemoteGitError: An empty name, one with spaces, `:`, `+`, `..`, `@{` or the like.
    """
    parts = base.split("/")
    if (
        not _BASE_BRANCH.fullmatch(base)
        or ".." in base
        or base.startswith("refs/")
        or base.endswith((".", ".lock"))
        or any(not part or part.startswith(".") or part.endswith(".lock") for part in parts)
    ):
        raise RemoteGitError(f"{base!r} is not a branch name Baton can fetch")


# --- helpers -----------------------------------------------------------------------------


async def _local(repo_dir: Path, *args: str) -> GitResult:
    """A git command on the local repository only (no network, no token)."""
    try:
        return await run_git(list(args), cwd=repo_dir, env={})
    except WorktreeError as error:
        raise RemoteGitError(str(error)) from None


def _empty_place(path: Path) -> tuple[Path, bool]:
    """Make sure `path` is an empty directory: its absolute path, and whether it was
    made here. Blocking."""
    path = path.absolute()
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise RemoteGitError(f"Cannot clone into {path}: it is not a directory")
    if path.is_dir():
        if any(path.iterdir()):
            raise RemoteGitError(f"Cannot clone into {path}: the directory is not empty")
        return path, False
    try:
        path.mkdir(parents=True)
    except OSError as error:
        raise RemoteGitError(f"Cannot clone into {path}: {error}") from error
    return path, True


def _clear_place(path: Path, created: bool) -> None:
    """Undo a failed clone: remove what it left, and the directory when it was made here."""
    if not path.is_dir() or path.is_symlink():
        return
    if created:
        shutil.rmtree(path, ignore_errors=True)
        return
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _worktree_git_dir(worktree: Path) -> Path:
    """The git directory of `worktree`, checked rather than taken from its `.git` file.

    A linked worktree's `.git` file may have been rewritten by what ran in it: the
    directory it names must be `<common dir>/worktrees/<name>`, outside the worktree,
    with its `gitdir` naming this worktree and its `commondir` naming that common dir.
    A plain checkout's `.git` directory is used as it is. Blocking.
    """
    worktree = worktree.resolve()
    dot_git = worktree / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        return dot_git
    problem = f"{worktree} is not a git worktree Baton made"
    try:
        text = dot_git.read_text("utf-8") if not dot_git.is_symlink() else ""
    except (OSError, UnicodeDecodeError):
        raise RemoteGitError(problem) from None
    named = text.strip().removeprefix("gitdir:").strip()
    if not text.startswith("gitdir:") or not named:
        raise RemoteGitError(problem)
    git_dir = Path(os.path.normpath(worktree / named))
    if git_dir.is_relative_to(worktree) or git_dir.parent.name != "worktrees":
        raise RemoteGitError(problem)
    common = git_dir.parent.parent
    try:
        back = (git_dir / "gitdir").read_text("utf-8").strip()
        common_named = (git_dir / "commondir").read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise RemoteGitError(problem) from None
    if Path(os.path.normpath(git_dir / back)) != dot_git:
        raise RemoteGitError(problem)
    if Path(os.path.normpath(git_dir / common_named)).resolve() != common.resolve():
        raise RemoteGitError(problem)
    return git_dir


def _rebase_in_progress(git_dir: Path) -> bool:
    return (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists()


def _porcelain_line(stdout: bytes, ref: str) -> tuple[str, str] | None:
    """The flag and summary `git push --porcelain` printed for the destination `ref`."""
    for raw in stdout.decode("utf-8", "replace").splitlines():
        fields = raw.split("\t")
        if len(fields) >= 3 and len(fields[0]) == 1 and fields[1].endswith(f":{ref}"):
            return fields[0], fields[2]
    return None


def _failure(stderr: str) -> PushStatus | None:
    """AUTH or UNREACHABLE when git's stderr says so, else None."""
    text = stderr.lower()
    if any(sign in text for sign in _AUTH_SIGNS):
        return PushStatus.AUTH
    if "returned error: 404" not in text and any(sign in text for sign in _UNREACHABLE_SIGNS):
        return PushStatus.UNREACHABLE
    return None


def _is_missing_ref(stderr: str) -> bool:
    text = stderr.lower()
    return "couldn't find remote ref" in text or (
        "remote branch" in text and "not found in upstream" in text
    )


def _reason(summary: str) -> str:
    """`[rejected] (fetch first)` → `fetch first`."""
    inner = summary.partition("(")[2].rpartition(")")[0]
    return inner or summary.strip("[] ") or "refused"


def _remote_lines(stderr: str) -> str:
    """What the forge said (`remote: …` lines), printable and bounded."""
    lines = []
    for raw in stderr.splitlines():
        if raw.startswith("remote:"):
            text = _ANSI.sub("", raw.removeprefix("remote:")).strip()
            text = "".join(char for char in text if char.isprintable())
            if text:
                lines.append(text)
    return " ".join(lines[:_REMOTE_LINES])[:500]


def _name_files(paths: Sequence[str]) -> str:
    shown = [repr(path)[1:-1] for path in paths[:10]]
    more = len(paths) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _scrub(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret replaced, whatever git chose to echo."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
