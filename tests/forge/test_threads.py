"""A thread's branch across replicas: each keeps its own worktree in its own state
directory, and a turn on either starts from everything the other committed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.config import Repository
from bot.forge.git_remote import GitRemote
from bot.forge.remote import parse_remote
from bot.forge.threads import ThreadRepository, ThreadWorkError
from bot.store import Database, SessionKey
from bot.store.branches import BranchStore
from tests.fakes.git_server import FakeGitServer

TOKEN = "ghs_threadsTestToken"
KEY = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1700000000.000100")


@pytest.fixture
async def replicas(
    tmp_path: Path, database: Database
) -> AsyncIterator[tuple[ThreadRepository, ThreadRepository]]:
    """Replicas A and B of a workspace cloned from acme/api (served over smart HTTP):
    one checkout and database, a state directory each."""
    async with FakeGitServer(tmp_path / "forge") as git:
        remote = git.create_repo("acme/api", files={"app.py": "print('hello')\n"})
        git.add_token(TOKEN)
        checkout = tmp_path / "checkout"
        checkout.mkdir()
        a = replica(database, checkout, remote, tmp_path / "state-a")
        b = replica(database, checkout, remote, tmp_path / "state-b")
        await a.ensure_clone()
        yield a, b


async def token() -> str:
    return TOKEN


def replica(database: Database, checkout: Path, remote: str, state: Path) -> ThreadRepository:
    """One replica's view of the workspace: the shared checkout and database, its own
    state directory."""
    return ThreadRepository(
        repository=Repository(path=checkout, remote=remote, base="main"),
        store=BranchStore(database),
        forge=None,
        state_dir=state,
        remote=GitRemote(parse_remote(remote), token=token),
    )


async def test_a_thread_moving_between_replicas_keeps_every_change(
    replicas: tuple[ThreadRepository, ThreadRepository],
) -> None:
    a, b = replicas

    row, tree_a = await a.open(KEY, requester="UALICE")
    (tree_a.path / "one.py").write_text("1\n")
    assert await a.commit(row, message="one", co_author=None) is not None

    # The next turn lands on replica B: no worktree there yet, the branch has it all.
    row, tree_b = await b.open(KEY, requester="UALICE")
    assert tree_b.path != tree_a.path
    assert (tree_b.path / "one.py").read_text() == "1\n"
    (tree_b.path / "two.py").write_text("2\n")
    assert await b.commit(row, message="two", co_author=None) is not None

    # Back on A: its worktree is brought to the tip before the turn, so committing
    # there keeps B's work instead of reverting it.
    row, tree_a = await a.open(KEY, requester="UALICE")
    assert (tree_a.path / "two.py").read_text() == "2\n"
    (tree_a.path / "three.py").write_text("3\n")
    change = await a.commit(row, message="three", co_author=None)
    assert change is not None
    assert {f.path for f in change.files} == {"one.py", "two.py", "three.py"}


async def test_uncommitted_edits_in_a_stale_worktree_are_kept_not_overwritten(
    replicas: tuple[ThreadRepository, ThreadRepository],
) -> None:
    a, b = replicas
    row, tree_a = await a.open(KEY, requester="UALICE")
    row, tree_b = await b.open(KEY, requester="UALICE")
    (tree_b.path / "app.py").write_text("print('from b')\n")
    assert await b.commit(row, message="b", co_author=None) is not None
    # A replica that died mid-run left an edit of the same file, never committed.
    (tree_a.path / "app.py").write_text("print('from a, unsaved')\n")
    with pytest.raises(ThreadWorkError, match="changes of its own"):
        await a.open(KEY, requester="UALICE")
    assert (tree_a.path / "app.py").read_text() == "print('from a, unsaved')\n"


@pytest.mark.parametrize("ending", ["discarded", "merged"])
async def test_a_branch_ended_on_one_replica_starts_clean_on_the_other(
    replicas: tuple[ThreadRepository, ThreadRepository], ending: str
) -> None:
    """Discard (or a merged PR) handled by replica A, while replica B still has the
    branch checked out: A is not refused, and B's next turn starts a new branch from
    the base in a fresh worktree, its old one gone."""
    a, b = replicas
    row, tree_a = await a.open(KEY, requester="UALICE")
    (tree_a.path / "old.py").write_text("old\n")
    assert await a.commit(row, message="old", co_author=None) is not None
    row, tree_b = await b.open(KEY, requester="UALICE")
    old_tree_b = tree_b.path
    if ending == "discarded":
        await a.discard(row)
    else:
        await a.closed(row, merged=True)
    assert not tree_a.path.exists()
    row, tree_b = await b.open(KEY, requester="UALICE")
    assert row.state == "active"
    assert not (tree_b.path / "old.py").exists()
    assert (tree_b.path / "app.py").read_text() == "print('hello')\n"
    if ending == "merged":
        assert tree_b.path != old_tree_b and not old_tree_b.exists()
        assert row.branch.endswith("-2")  # the merged branch keeps its name
