"""GitRemote over real smart HTTP, against git's own http-backend (tests.fakes.git_server).

Nothing here pushes to a local path: every clone, fetch and push goes through HTTP with
the token in a header, and the tests check it never lands in a file or an argument.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.forge.git_remote import GitRemote, PushStatus, RemoteGitError
from bot.forge.remote import parse_remote
from tests.fakes.git_server import FakeGitServer
from tests.ports import free_port

TOKEN = "ghs_s3cretT0kenForTests"
BASIC = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
SETUP_IDENTITY = ("-c", "user.name=Setup", "-c", "user.email=setup@example.com")
BRANCH = "baton/thread-1"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Run git for the test's own set-up and checks (never against the server)."""
    result = subprocess.run(
        ["git", *SETUP_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {args} failed: {result.stderr}")
    return result.stdout.strip()


def commit(worktree: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (worktree / name).parent.mkdir(parents=True, exist_ok=True)
        (worktree / name).write_text(text)
    git(worktree, "add", "--", *files)
    git(worktree, "commit", "--quiet", "-m", message)
    return git(worktree, "rev-parse", "HEAD")


def fast_import(repo: Path, stream: str) -> None:
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=stream, text=True, check=True)


def token_source(value: str | None) -> Callable[[], Awaitable[str | None]]:
    async def give() -> str | None:
        return value

    return give


@pytest.fixture
async def forge(tmp_path: Path) -> AsyncIterator[FakeGitServer]:
    async with FakeGitServer(tmp_path) as server:
        server.add_token(TOKEN)
        server.create_repo("acme/api", files={"README.md": "hi\n", "app.py": "print(1)\n"})
        yield server


@pytest.fixture
def remote(forge: FakeGitServer) -> GitRemote:
    return GitRemote(parse_remote(forge.repo_url("acme/api")), token=token_source(TOKEN))


@pytest.fixture
async def clone(tmp_path: Path, remote: GitRemote) -> Path:
    path = tmp_path / "clone"
    await remote.clone(path, base="main")
    return path


@pytest.fixture
def worktree(tmp_path: Path, clone: Path) -> Path:
    """A linked worktree of the clone on BRANCH, started from main."""
    path = tmp_path / "wt"
    git(clone, "worktree", "add", "--quiet", "-b", BRANCH, str(path), "main")
    return path


class Spawned:
    """Every command line and environment git was started with (git still runs)."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], dict[str, str]]] = []


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spawned]:
    record = Spawned()
    real = asyncio.create_subprocess_exec

    async def spy(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        if args and args[0] == "git" and args[1:2] != ("http-backend",):
            record.calls.append((tuple(map(str, args)), dict(kwargs.get("env") or {})))
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spy)
    yield record


def files_containing(root: Path, *needles: str) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(needle.encode() in data for needle in needles):
                found.append(path)
    return found


# --- clone -------------------------------------------------------------------------------


async def test_clone_into_a_missing_directory(
    tmp_path: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    path = tmp_path / "deep" / "clone"
    await remote.clone(path, base="main")
    assert (path / "README.md").read_text() == "hi\n"
    assert git(path, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(path, "rev-parse", "HEAD") == forge.head("acme/api", "main")
    config = (path / ".git" / "config").read_text()
    assert f"url = {forge.repo_url('acme/api')}\n" in config
    assert "extraheader" not in config.lower()
    assert TOKEN not in config and BASIC not in config


async def test_clone_into_an_empty_directory(tmp_path: Path, remote: GitRemote) -> None:
    path = tmp_path / "empty"
    path.mkdir()
    await remote.clone(path, base="main")
    assert (path / "app.py").read_text() == "print(1)\n"


async def test_clone_refuses_a_directory_with_files(
    tmp_path: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    path = tmp_path / "busy"
    path.mkdir()
    (path / "mine.txt").write_text("keep me")
    with pytest.raises(RemoteGitError, match="not empty"):
        await remote.clone(path, base="main")
    assert [p.name for p in path.iterdir()] == ["mine.txt"]
    assert forge.requests == []


async def test_clone_of_a_missing_base_says_so_and_leaves_nothing(
    tmp_path: Path, remote: GitRemote
) -> None:
    path = tmp_path / "clone"
    with pytest.raises(RemoteGitError, match="has no branch 'develop'") as caught:
        await remote.clone(path, base="develop")
    assert caught.value.failure is None
    assert not path.exists()


# --- fetch -------------------------------------------------------------------------------


async def test_fetch_base_returns_the_remote_commit(
    clone: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    theirs = forge.commit_on("acme/api", "main", {"NEWS.md": "new\n"}, "Someone's change")
    assert await remote.fetch_base(clone, "main") == theirs
    assert git(clone, "rev-parse", "refs/remotes/origin/main") == theirs
    assert git(clone, "tag", "--list") == ""


async def test_fetch_base_of_a_missing_branch_is_a_clear_error(
    clone: Path, remote: GitRemote
) -> None:
    with pytest.raises(RemoteGitError, match="acme/api has no branch 'release'"):
        await remote.fetch_base(clone, "release")


@pytest.mark.parametrize("base", ["", "-main", "main:evil", "+main", "a..b", "refs/heads/x", "x y"])
async def test_fetch_base_refuses_names_git_would_misread(
    clone: Path, forge: FakeGitServer, remote: GitRemote, base: str
) -> None:
    before = len(forge.requests)
    with pytest.raises(RemoteGitError, match="not a branch name"):
        await remote.fetch_base(clone, base)
    with pytest.raises(RemoteGitError, match="not a branch name"):
        await remote.clone(clone.parent / "other", base=base)
    assert len(forge.requests) == before


async def test_fetch_branch_is_none_when_the_remote_has_no_such_branch(
    clone: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    assert await remote.fetch_branch(clone, BRANCH) is None
    theirs = forge.commit_on("acme/api", BRANCH, {"x.txt": "x\n"}, "Theirs")
    assert await remote.fetch_branch(clone, BRANCH) == theirs
    assert git(clone, "rev-parse", f"refs/remotes/origin/{BRANCH}") == theirs


# --- push --------------------------------------------------------------------------------


async def test_push_of_a_new_branch(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    mine = commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.PUSHED
    assert outcome.commit == mine
    assert forge.head("acme/api", BRANCH) == mine
    assert forge.show("acme/api", BRANCH, "feature.py") == "x = 1\n"
    assert git(clone, "rev-parse", f"refs/remotes/origin/{BRANCH}") == mine


async def test_push_again_unchanged_is_up_to_date(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    mine = commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.push(clone, BRANCH, expected_remote=None)
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.UP_TO_DATE
    assert outcome.commit == mine


async def test_push_after_someone_else_pushed_is_rejected(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.push(clone, BRANCH, expected_remote=None)
    theirs = forge.commit_on("acme/api", BRANCH, {"other.py": "y\n"}, "Theirs")
    commit(worktree, {"feature.py": "x = 2\n"}, "Change feature")
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.REJECTED
    assert "Someone else pushed" in outcome.message
    assert outcome.commit is None
    assert forge.head("acme/api", BRANCH) == theirs


async def test_force_with_a_stale_lease_overwrites_nothing(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    first = commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.push(clone, BRANCH, expected_remote=None)
    theirs = forge.commit_on("acme/api", BRANCH, {"other.py": "y\n"}, "Theirs")
    git(worktree, "commit", "--quiet", "--amend", "-m", "Add feature, reworded")
    outcome = await remote.push(clone, BRANCH, expected_remote=first)
    assert outcome.status is PushStatus.REJECTED
    assert "no longer at the commit Baton expected" in outcome.message
    assert forge.head("acme/api", BRANCH) == theirs


async def test_force_with_a_holding_lease_replaces_the_branch(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    first = commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.push(clone, BRANCH, expected_remote=None)
    git(worktree, "commit", "--quiet", "--amend", "-m", "Add feature, reworded")
    amended = git(worktree, "rev-parse", "HEAD")
    outcome = await remote.push(clone, BRANCH, expected_remote=first)
    assert outcome.status is PushStatus.PUSHED
    assert forge.head("acme/api", BRANCH) == amended


async def test_push_with_retry_rebases_onto_their_commits(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.push(clone, BRANCH, expected_remote=None)
    forge.commit_on("acme/api", BRANCH, {"other.py": "y\n"}, "Theirs")
    commit(worktree, {"feature.py": "x = 2\n"}, "Change feature")
    outcome = await remote.push_with_retry(clone, worktree, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.PUSHED, outcome.message
    assert forge.head("acme/api", BRANCH) == git(worktree, "rev-parse", "HEAD") == outcome.commit
    assert forge.log("acme/api", BRANCH)[:3] == ["Change feature", "Theirs", "Add feature"]
    assert forge.show("acme/api", BRANCH, "other.py") == "y\n"
    assert (worktree / "other.py").read_text() == "y\n"
    assert git(worktree, "status", "--porcelain") == ""
    assert git(worktree, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    # No identity is configured (the tests give theirs per command): Baton's is used.
    assert git(worktree, "log", "-1", "--format=%cn <%ce>") == "Baton <baton@localhost>"


async def test_push_with_retry_reports_a_conflict_and_keeps_the_branch(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.push(clone, BRANCH, expected_remote=None)
    theirs = forge.commit_on("acme/api", BRANCH, {"feature.py": "x = 'theirs'\n"}, "Theirs")
    mine = commit(worktree, {"feature.py": "x = 'mine'\n"}, "Mine")
    outcome = await remote.push_with_retry(clone, worktree, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.REJECTED
    assert "do not apply on top" in outcome.message
    assert "feature.py" in outcome.message
    assert git(worktree, "rev-parse", "HEAD") == mine
    assert (worktree / "feature.py").read_text() == "x = 'mine'\n"
    assert git(worktree, "status", "--porcelain") == ""
    assert forge.head("acme/api", BRANCH) == theirs


async def test_push_to_a_protected_branch(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    forge.protect("acme/api", BRANCH)
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.PROTECTED
    assert "declined" in outcome.message and "Protected branch" in outcome.message
    assert forge.head("acme/api", BRANCH) is None


@pytest.mark.parametrize("revoked", [False, True])
async def test_a_wrong_or_revoked_token_is_auth_and_never_shown(
    clone: Path, worktree: Path, forge: FakeGitServer, revoked: bool
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    used = TOKEN if revoked else "ghs_wrongWrongWrong"
    if revoked:
        forge.revoke(TOKEN)
    remote = GitRemote(parse_remote(forge.repo_url("acme/api")), token=token_source(used))
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.AUTH
    basic = base64.b64encode(f"x-access-token:{used}".encode()).decode()
    assert used not in outcome.message and basic not in outcome.message
    with pytest.raises(RemoteGitError) as caught:
        await remote.fetch_base(clone, "main")
    assert caught.value.failure is PushStatus.AUTH
    assert used not in str(caught.value)
    assert forge.head("acme/api", BRANCH) is None


class Rotating:
    """Tokens as an installation's cache hands them out: the cached one until it is
    dropped, then a fresh one; records what the remote refused."""

    def __init__(self, *tokens: str, fresh_may_work: bool = True) -> None:
        self.tokens = list(tokens)
        self.refused: list[str] = []
        self.fresh_may_work = fresh_may_work

    async def token(self) -> str | None:
        return self.tokens[0]

    def drop(self, token: str) -> bool:
        self.refused.append(token)
        if self.fresh_may_work and len(self.tokens) > 1 and self.tokens[0] == token:
            self.tokens.pop(0)
        return self.fresh_may_work


async def test_a_push_refused_with_a_cached_token_gets_a_fresh_one_once(
    clone: Path, worktree: Path, forge: FakeGitServer
) -> None:
    """As the REST calls do: git refused the cached installation token (revoked early),
    so it is dropped and the push runs once more with a new one."""
    mine = commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    tokens = Rotating("ghs_revokedRevokedRevoked", TOKEN)
    remote = GitRemote(
        parse_remote(forge.repo_url("acme/api")), token=tokens.token, refused=tokens.drop
    )
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.PUSHED and forge.head("acme/api", BRANCH) == mine
    assert tokens.refused == ["ghs_revokedRevokedRevoked"]


async def test_a_fresh_token_refused_too_is_tried_once_and_named_to_check(
    clone: Path, worktree: Path, forge: FakeGitServer
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    tokens = Rotating("ghs_revokedOne111111", "ghs_revokedTwo222222")
    remote = GitRemote(
        parse_remote(forge.repo_url("acme/api")),
        token=tokens.token,
        refused=tokens.drop,
        hint="check GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY and the app's installation",
    )
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.AUTH
    assert tokens.refused == ["ghs_revokedOne111111"]  # one retry, not a loop
    assert "GITHUB_APP_ID" in outcome.message
    assert not any(token in outcome.message for token in ("ghs_revokedOne", "ghs_revokedTwo"))


async def test_a_fixed_token_refused_is_not_retried_and_the_variable_is_named(
    clone: Path, worktree: Path, forge: FakeGitServer
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    forge.revoke(TOKEN)
    tokens = Rotating(TOKEN, fresh_may_work=False)
    remote = GitRemote(
        parse_remote(forge.repo_url("acme/api")),
        token=tokens.token,
        refused=tokens.drop,
        hint="check GITHUB_TOKEN",
    )
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.AUTH and "check GITHUB_TOKEN" in outcome.message
    assert tokens.refused == [TOKEN]
    assert len([r for r in forge.requests if r.status == 401]) == 1  # asked once
    with pytest.raises(RemoteGitError) as caught:
        await remote.fetch_base(clone, "main")
    assert "check GITHUB_TOKEN" in str(caught.value)


async def test_anonymous_gets_auth_and_no_user_helper_or_header_speaks_for_it(
    clone: Path, worktree: Path, forge: FakeGitServer, isolated_git: Path
) -> None:
    """The user's credential helper and extra headers hold a valid token: not used."""
    host = forge.url.removeprefix("http://")
    (isolated_git / ".git-credentials").write_text(f"http://x-access-token:{TOKEN}@{host}\n")
    (isolated_git / ".gitconfig").write_text(
        "[credential]\n\thelper = store\n"
        f'[http "{forge.url}"]\n\textraHeader = Authorization: Basic {BASIC}\n'
    )
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    remote = GitRemote(parse_remote(forge.repo_url("acme/api")), token=token_source(None))
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.AUTH
    assert "Baton has none" in outcome.message
    assert forge.head("acme/api", BRANCH) is None
    assert {r.status for r in forge.requests[-1:]} == {401}
    anonymous = GitRemote(parse_remote(forge.repo_url("acme/api")), token=None)
    assert (await anonymous.push(clone, BRANCH, expected_remote=None)).status is PushStatus.AUTH


async def test_a_closed_port_is_unreachable(clone: Path, worktree: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/acme/api.git"
    remote = GitRemote(parse_remote(url), token=token_source(TOKEN))
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    outcome = await remote.push(clone, BRANCH, expected_remote=None)
    assert outcome.status is PushStatus.UNREACHABLE
    assert "could not reach 127.0.0.1" in outcome.message
    with pytest.raises(RemoteGitError) as caught:
        await remote.fetch_base(clone, "main")
    assert caught.value.failure is PushStatus.UNREACHABLE


@pytest.mark.parametrize(
    "branch",
    [
        "main",
        "baton/../main",
        "+baton/x",
        "baton/x:refs/heads/main",
        "refs/heads/baton/x",
        "baton/x y",
        "-baton",
        "baton/" + "a" * 200,
        "baton/X",
        "baton/x/y",
        "baton/-x",
        "baton/x\n",
        "",
    ],
)
async def test_hostile_branch_names_are_refused_before_git_runs(
    tmp_path: Path, forge: FakeGitServer, remote: GitRemote, spawned: Spawned, branch: str
) -> None:
    nowhere = tmp_path / "nowhere"
    with pytest.raises(RemoteGitError, match="is not a Baton branch"):
        await remote.push(nowhere, branch, expected_remote=None)
    with pytest.raises(RemoteGitError, match="is not a Baton branch"):
        await remote.push(nowhere, branch, expected_remote="a" * 40)
    with pytest.raises(RemoteGitError, match="is not a Baton branch"):
        await remote.fetch_branch(nowhere, branch)
    with pytest.raises(RemoteGitError, match="is not a Baton branch"):
        await remote.rebase(nowhere, branch, "refs/remotes/origin/main")
    with pytest.raises(RemoteGitError, match="is not a Baton branch"):
        await remote.push_with_retry(nowhere, nowhere, branch, expected_remote=None)
    assert spawned.calls == []
    assert forge.requests == []


async def test_a_lease_must_be_a_commit_id(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    for lease in ("main", "", "--force", "HEAD~1"):
        with pytest.raises(RemoteGitError, match="not a commit id"):
            await remote.push(clone, BRANCH, expected_remote=lease)
    assert forge.head("acme/api", BRANCH) is None


# --- credentials stay out of files and command lines -------------------------------------


async def test_the_token_reaches_the_forge_only_as_a_header(
    tmp_path: Path,
    clone: Path,
    worktree: Path,
    forge: FakeGitServer,
    remote: GitRemote,
    spawned: Spawned,
) -> None:
    commit(worktree, {"feature.py": "x = 1\n"}, "Add feature")
    await remote.fetch_base(clone, "main")
    await remote.fetch_branch(clone, BRANCH)
    assert (await remote.push(clone, BRANCH, expected_remote=None)).status is PushStatus.PUSHED
    forge.commit_on("acme/api", BRANCH, {"other.py": "y\n"}, "Theirs")
    commit(worktree, {"feature.py": "x = 2\n"}, "Change feature")
    retried = await remote.push_with_retry(clone, worktree, BRANCH, expected_remote=None)
    assert retried.status is PushStatus.PUSHED

    # Not in any file of the clone, its worktree or the home directory.
    for root in (clone, worktree, tmp_path / "home"):
        assert files_containing(root, TOKEN, BASIC) == []
    assert "extraheader" not in (clone / ".git" / "config").read_text().lower()
    # Not on any command line; in the environment only as the header's config value.
    carried = 0
    for argv, env in spawned.calls:
        assert not any(TOKEN in arg or BASIC in arg for arg in argv)
        holders = {key for key, value in env.items() if TOKEN in value or BASIC in value}
        assert holders <= {key for key in env if key.startswith("GIT_CONFIG_VALUE_")}
        carried += bool(holders)
        if holders:  # a network command: only for the remote's URL, and no helper
            keys = {env[key.replace("VALUE", "KEY")] for key in holders}
            assert keys == {f"http.{forge.repo_url('acme/api')}.extraHeader"}
            assert ("credential.helper", "") in {
                (env[key], env[key.replace("KEY", "VALUE")])
                for key in env
                if key.startswith("GIT_CONFIG_KEY_")
            }
    assert carried >= 5  # two fetches, push, fetch and push again
    # Every request carried it as a Basic header, none in its path or query.
    assert forge.requests
    for request in forge.requests:
        assert request.authorization == f"Basic {BASIC}"
        assert TOKEN not in request.path + request.query
    pushes = [r for r in forge.requests if r.path.endswith("/git-receive-pack")]
    assert pushes


# --- rebase ------------------------------------------------------------------------------


async def test_rebase_conflict_returns_false_and_restores_the_branch(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    forge.commit_on("acme/api", "main", {"app.py": "print('theirs')\n"}, "Theirs")
    await remote.fetch_base(clone, "main")
    mine = commit(worktree, {"app.py": "print('mine')\n"}, "Mine")
    assert not await remote.rebase(worktree, BRANCH, "refs/remotes/origin/main")
    assert git(worktree, "rev-parse", "HEAD") == mine
    assert git(worktree, "status", "--porcelain") == ""


async def test_rebase_refuses_a_worktree_whose_git_file_points_elsewhere(
    tmp_path: Path, clone: Path, worktree: Path, remote: GitRemote
) -> None:
    """What ran in the worktree may rewrite its `.git` file to a git dir of its own."""
    fake = worktree / "fake-git"
    git(tmp_path, "init", "--quiet", "--bare", str(fake / "worktrees" / "wt"))
    (worktree / ".git").write_text(f"gitdir: {fake / 'worktrees' / 'wt'}\n")
    with pytest.raises(RemoteGitError, match="not a git worktree Baton made"):
        await remote.rebase(worktree, BRANCH, "refs/remotes/origin/main")


async def test_rebase_refuses_a_worktree_on_another_branch(
    clone: Path, worktree: Path, remote: GitRemote
) -> None:
    with pytest.raises(RemoteGitError, match="does not have baton/other checked out"):
        await remote.rebase(worktree, "baton/other", "refs/remotes/origin/main")


async def test_large_pushes_and_long_negotiations_go_through_the_fake(
    clone: Path, worktree: Path, forge: FakeGitServer, remote: GitRemote
) -> None:
    """A pack over git's 1 MiB post buffer goes chunked; a fetch with many local commits
    the server lacks sends a gzip body: http-backend gets both intact."""
    blob = base64.b64encode(os.urandom(1536 * 1024)).decode()  # packs to ~1.5 MiB
    mine = commit(worktree, {"big.txt": blob}, "Big")
    assert (await remote.push(clone, BRANCH, expected_remote=None)).status is PushStatus.PUSHED
    assert forge.show("acme/api", BRANCH, "big.txt") == blob
    # Sixty local commits the server lacks, newer than any other: git offers them first,
    # as "have"s in growing rounds.
    stream = "".join(
        f"commit refs/heads/notes\n"
        f"committer Setup <setup@example.com> {4_000_000_000 + number} +0000\n"
        f"data {len(f'Note {number}')}\nNote {number}\n"
        + (f"from {mine}\n" if number == 0 else "")
        + f"M 644 inline notes.txt\ndata {len(str(number))}\n{number}\n\n"
        for number in range(60)
    )
    fast_import(clone, stream)
    theirs = forge.commit_on("acme/api", "main", {"after.txt": "later\n"}, "Later")
    assert await remote.fetch_base(clone, "main") == theirs
    assert git(clone, "show", f"{theirs}:after.txt") == "later"
    assert git(clone, "rev-parse", f"refs/remotes/origin/{BRANCH}") == mine
