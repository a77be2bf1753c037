"""Worktrees for `isolation: worktree` children, on real git repositories in tmp_path.

Several tests play the hostile child: the code under test runs git outside the
sandbox on files a model wrote, so no hook, filter or fsmonitor of theirs may run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.subagents.worktree import (
    Change,
    FileChange,
    ProtectedFile,
    Worktree,
    WorktreeError,
    create,
    create_in,
    discard,
    finish,
    make_place,
    merge,
    reopen,
)

SETUP_IDENTITY = ("-c", "user.name=Setup", "-c", "user.email=setup@example.com")


# No user-level git config from the machine running the tests (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("isolated_git")


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Run git for the test's own set-up and checks."""
    result = subprocess.run(
        ["git", *SETUP_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {args} failed: {result.stderr}")
    return result.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A workspace repository on `main` with one commit holding a.txt."""
    path = tmp_path.resolve() / "workspace"
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    (path / "a.txt").write_text("one\ntwo\nthree\n")
    git(path, "add", "a.txt")
    git(path, "commit", "--quiet", "-m", "initial")
    return path


@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    return tmp_path.resolve() / "state" / "worktrees"


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def trap_script(tmp_path: Path) -> tuple[Path, Path]:
    """An executable that leaves a marker file when anything runs it."""
    marker = tmp_path / "PWNED"
    script = tmp_path / "trap.sh"
    script.write_text(f"#!/bin/sh\necho ran >> '{marker}'\ncat\n")
    script.chmod(0o755)
    return script, marker


def plant_hooks(hooks: Path, script: Path) -> None:
    hooks.mkdir(parents=True, exist_ok=True)
    for name in (
        "pre-commit", "commit-msg", "post-commit", "post-checkout", "pre-merge-commit",
        "post-merge", "reference-transaction", "prepare-commit-msg", "post-index-change",
    ):  # fmt: skip
        (hooks / name).write_text(script.read_text())
        (hooks / name).chmod(0o755)


# --- create and finish ------------------------------------------------------------------


async def test_unchanged_child_leaves_no_worktree_and_no_branch(repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-a-1", base_dir)
    assert worktree.path == base_dir / "task-a-1"
    assert worktree.branch == "baton/task-a-1" and worktree.base == head(repo)
    assert worktree.repo == repo
    assert worktree.git_dir == repo / ".git" / "worktrees" / "task-a-1"
    assert (worktree.path / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert "locked" in git(repo, "worktree", "list", "--porcelain")

    assert await finish(worktree, message="nothing") is None
    assert not worktree.path.exists() and not worktree.git_dir.exists()
    assert branches(repo) == ["main"]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    with pytest.raises(WorktreeError, match="is gone"):
        await finish(worktree, message="again")


async def test_changes_are_committed_with_baton_identity(repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-a-2", base_dir)
    (worktree.path / "a.txt").write_text("one\nTWO\nthree\nfour\n")
    (worktree.path / "src").mkdir()
    (worktree.path / "src" / "new.py").write_text("x = 1\n")
    (worktree.path / "logo.png").write_bytes(b"\x89PNG\x00\x01\x02")

    change = await finish(worktree, message="Baton task task-a-2: edit a.txt")
    assert isinstance(change, Change)
    assert change.branch == "baton/task-a-2"
    assert change.commit == git(repo, "rev-parse", "baton/task-a-2").strip()
    assert sorted(change.files, key=lambda f: f.path) == [
        FileChange(path="a.txt", added=2, removed=1),
        FileChange(path="logo.png", added=0, removed=0, binary=True),
        FileChange(path="src/new.py", added=1, removed=0),
    ]
    assert change.summary().startswith("3 files changed, +3 \N{MINUS SIGN}1: ")
    assert "logo.png (binary)" in change.summary()
    assert "src/new.py (+1 \N{MINUS SIGN}0)" in change.summary()
    identity = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", "baton/task-a-2")
    assert identity.strip() == (
        "Baton <baton@localhost>|Baton <baton@localhost>|Baton task task-a-2: edit a.txt"
    )
    assert not worktree.path.exists() and not worktree.git_dir.exists()
    assert git(repo, "status", "--porcelain") == "" and head(repo) == worktree.base


async def test_changes_use_the_repository_identity_when_set(repo: Path, base_dir: Path) -> None:
    git(repo, "config", "user.name", "Ada Lovelace")
    git(repo, "config", "user.email", "ada@example.com")
    worktree = await create(repo, "task-a-3", base_dir)
    (worktree.path / "b.txt").write_text("b\n")
    assert await finish(worktree, message="add b") is not None
    author = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "baton/task-a-3").strip()
    assert author == "Ada Lovelace <ada@example.com>|Ada Lovelace <ada@example.com>"


async def test_commits_the_child_made_itself_count(repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-a-4", base_dir)
    (worktree.path / "c.txt").write_text("c\n")
    git(worktree.path, "add", "c.txt")
    git(worktree.path, "commit", "--quiet", "-m", "child commit")
    (worktree.path / "d.txt").write_text("d\n")

    change = await finish(worktree, message="finish")
    assert change is not None
    assert {f.path for f in change.files} == {"c.txt", "d.txt"}
    log = git(repo, "log", "--format=%s", f"{worktree.base}..baton/task-a-4").split("\n")
    assert log[:2] == ["finish", "child commit"]


async def test_a_file_hidden_from_git_in_the_worktrees_index_is_still_committed(
    repo: Path, base_dir: Path
) -> None:
    """Finishing may start from a copy of the worktree's own index, but never from one a
    git command changed: a file marked there as not to be looked at would be lost with
    the worktree."""
    worktree = await create(repo, "task-a-9", base_dir)
    git(worktree.path, "update-index", "--assume-unchanged", "a.txt")
    (worktree.path / "a.txt").write_text("changed behind git's back\n")
    change = await finish(worktree, message="hidden")
    assert change is not None
    assert [f.path for f in change.files] == ["a.txt"]
    assert git(repo, "show", "baton/task-a-9:a.txt").strip() == "changed behind git's back"


async def test_an_edit_keeping_size_and_time_is_still_committed(repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-a-10", base_dir)
    target = worktree.path / "a.txt"
    before = target.stat()
    target.write_text("X" * before.st_size)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    change = await finish(worktree, message="same size and time")
    assert change is not None and [f.path for f in change.files] == ["a.txt"]


async def test_deleted_files_count_and_a_reverted_commit_is_unchanged(
    repo: Path, base_dir: Path
) -> None:
    worktree = await create(repo, "task-a-5", base_dir)
    (worktree.path / "a.txt").unlink()
    change = await finish(worktree, message="delete")
    assert change is not None and change.files == (FileChange(path="a.txt", added=0, removed=3),)

    worktree = await create(repo, "task-a-6", base_dir)
    (worktree.path / "a.txt").write_text("changed\n")
    git(worktree.path, "commit", "--quiet", "-am", "change")
    git(worktree.path, "revert", "--no-edit", "HEAD")
    assert await finish(worktree, message="nothing left") is None
    assert "baton/task-a-6" not in branches(repo)


async def test_create_explains_what_is_wrong(tmp_path: Path, repo: Path, base_dir: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorktreeError, match="is not a git repository: isolation: worktree"):
        await create(plain, "task-a-1", base_dir)
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "--quiet")
    with pytest.raises(WorktreeError, match="has no commit yet"):
        await create(empty, "task-a-1", base_dir)
    with pytest.raises(WorktreeError, match="is not a directory"):
        await create(tmp_path / "missing", "task-a-1", base_dir)
    for bad in ("task-A", "task-../x", "x-task-a", "task-a\n", "task-a/b", "--force", "task-"):
        with pytest.raises(WorktreeError, match="Invalid task id"):
            await create(repo, bad, base_dir)
    with pytest.raises(WorktreeError, match="outside the workspace"):
        await create(repo, "task-a-1", repo / "worktrees")
    first = await create(repo, "task-a-1", base_dir)
    with pytest.raises(WorktreeError, match=r"Could not make the worktree directory .*File exists"):
        await create(repo, "task-a-1", base_dir)
    assert (first.path / "a.txt").exists()  # the first one is left as it was
    # A branch of that name already (planted, or another Baton's): git refuses, and the
    # directory made for it is removed again.
    git(repo, "branch", "baton/task-a-2")
    with pytest.raises(WorktreeError, match="Could not create a worktree for task-a-2"):
        await create(repo, "task-a-2", base_dir)
    assert not (base_dir / "task-a-2").exists()
    assert not (repo / "worktrees").exists()


async def test_a_place_made_first_is_filled_or_given_back(
    tmp_path: Path, repo: Path, base_dir: Path
) -> None:
    """The runner makes the directory before git is asked anything (the child's tools are
    built for it at once), then `create_in` fills it in the background."""
    place = make_place(base_dir, "task-q-1", repo)
    assert place == base_dir / "task-q-1" and place.is_dir() and not any(place.iterdir())
    tree = await create_in(repo, place)
    assert tree.path == place and tree.branch == "baton/task-q-1" and tree.base == head(repo)
    assert (place / "a.txt").read_text() == "one\ntwo\nthree\n"
    # One already there is never reused, whoever made it.
    with pytest.raises(WorktreeError, match="Could not make the worktree directory"):
        make_place(base_dir, "task-q-1", repo)
    for bad in ("task-../../x", "--force", "task-a/b"):
        with pytest.raises(WorktreeError, match="Invalid task id"):
            make_place(base_dir, bad, repo)
    with pytest.raises(WorktreeError, match="outside the workspace"):
        make_place(repo / "worktrees", "task-q-2", repo)
    assert not (repo / "worktrees").exists()
    # The site's directory is a subdirectory of the repository, the worktrees' parent
    # another one: only git knows the top, so `create_in` refuses and gives the place back.
    (repo / "site").mkdir()
    inside = make_place(repo / "wt", "task-q-3", repo / "site")
    with pytest.raises(WorktreeError, match="outside the workspace"):
        await create_in(repo / "site", inside)
    assert not inside.exists()
    # Not a repository: refused, and the empty directory goes too.
    plain = tmp_path / "plain"
    plain.mkdir()
    lonely = make_place(base_dir, "task-q-4", plain)
    with pytest.raises(WorktreeError, match="is not a git repository"):
        await create_in(plain, lonely)
    assert not lonely.exists()
    assert branches(repo) == ["baton/task-q-1", "main"]


async def test_reopen_finds_only_its_own_worktree(repo: Path, base_dir: Path) -> None:
    """After a restart, a directory named like a task under another state dir (two Batons
    on one repository) is not taken for the worktree whose admin dir has that name:
    finishing it would delete the other's admin dir."""
    theirs = await create(repo, "task-o-1", base_dir)
    mine = base_dir.parent.parent / "other-state" / "worktrees"
    (mine / "task-o-1").mkdir(parents=True)
    assert await reopen(repo, "task-o-1", mine) is None
    found = await reopen(repo, "task-o-1", base_dir)
    assert found is not None and found.git_dir == theirs.git_dir and found.path == theirs.path


async def test_sixteen_children_edit_the_same_file_in_parallel(repo: Path, base_dir: Path) -> None:
    ids = [f"task-p-{n}" for n in range(16)]
    worktrees = await asyncio.gather(*(create(repo, task_id, base_dir) for task_id in ids))
    assert len({w.path for w in worktrees}) == 16

    async def edit_and_finish(worktree: Worktree, n: int) -> Change | None:
        (worktree.path / "a.txt").write_text(f"child {n}\n")
        return await finish(worktree, message=f"child {n}")

    changes = await asyncio.gather(*(edit_and_finish(w, n) for n, w in enumerate(worktrees)))
    assert all(change is not None for change in changes)
    for n, task_id in enumerate(ids):
        assert git(repo, "show", f"baton/{task_id}:a.txt") == f"child {n}\n"
    assert len(branches(repo)) == 17
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert (repo / "a.txt").read_text() == "one\ntwo\nthree\n"


def git_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str) -> None:
    """Put a `git` first on PATH that runs the shell lines `before`, then the real git."""
    real = shutil.which("git")
    assert real is not None
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(f"#!/bin/sh\n{before}exec '{real}' \"$@\"\n")
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")


def logging_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Put a `git` first on PATH that logs each call and runs the real one, taking its
    time (0.3 s) over the questions a fan-out's children share, and leaving a marker
    file when such a question begins; returns the log and the marker."""
    log, marker = tmp_path / "git-calls.log", tmp_path / "asked"
    git_shim(
        tmp_path,
        monkeypatch,
        f"printf '%s\\n' \"$*\" >> '{log}'\n"
        'case "$*" in *"HEAD^{commit}"*|*"^{tree}"*|*"--get-regexp"*)\n'
        f"  touch '{marker}'; sleep 0.3;;\n"
        "esac\n",
    )
    return log, marker


async def test_a_fan_out_asks_git_what_its_children_share_once(
    tmp_path: Path, repo: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sixteen children starting together read their base commit's tree once, and
    finishing together read the repository's identity once; each still reads HEAD
    itself (a shared read could predate a merge), gets its own branch and its own line
    counts."""
    log, _ = logging_git(tmp_path, monkeypatch)
    ids = [f"task-f-{n}" for n in range(16)]
    worktrees = await asyncio.gather(*(create(repo, task_id, base_dir) for task_id in ids))
    for n, worktree in enumerate(worktrees):
        (worktree.path / "a.txt").write_text("one\n" + "new\n" * (n + 1))
    changes = await asyncio.gather(*(finish(w, message="done") for w in worktrees))

    calls = log.read_text().splitlines()
    assert sum("HEAD^{commit}" in call for call in calls) == 16
    assert sum(call.endswith("^{tree}") for call in calls) == 1
    assert sum("--get-regexp" in call for call in calls) == 1
    assert sum(" worktree add " in call for call in calls) == 16
    for n, (task_id, change) in enumerate(zip(ids, changes, strict=True)):
        assert change is not None and change.branch == f"baton/{task_id}"
        assert change.files == (FileChange(path="a.txt", added=n + 1, removed=2),)
        assert git(repo, "log", "-1", "--format=%an", change.branch).strip() == "Baton"


async def test_a_finish_that_goes_away_leaves_the_shared_question_to_the_others(
    tmp_path: Path, repo: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two children finish; the one whose finish is cancelled while both wait on the
    repository's identity takes nothing from the other, and its work stays in its
    worktree."""
    leaving_tree, staying_tree = (
        await create(repo, "task-c-1", base_dir),
        await create(repo, "task-c-2", base_dir),
    )
    _, marker = logging_git(tmp_path, monkeypatch)
    for worktree in (leaving_tree, staying_tree):
        (worktree.path / "b.txt").write_text(f"{worktree.branch}\n")
    staying = asyncio.create_task(finish(staying_tree, message="done"))
    for _ in range(500):  # until the identity is asked for
        if marker.exists():
            break
        await asyncio.sleep(0.01)
    assert marker.exists()
    leaving = asyncio.create_task(finish(leaving_tree, message="done"))
    await asyncio.sleep(0.15)  # it joins the question in flight (0.3 s)
    leaving.cancel()
    change = await staying
    assert change is not None and change.files == (FileChange(path="b.txt", added=1, removed=0),)
    assert git(repo, "log", "-1", "--format=%an", change.branch).strip() == "Baton"
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert (leaving_tree.path / "b.txt").read_text() == "baton/task-c-1\n"


async def test_worktrees_made_and_removed_side_by_side_never_trip_each_other(
    repo: Path, base_dir: Path
) -> None:
    """`git worktree add` reads every admin dir, and fails on one that another add or a
    removal has half made: sixteen children starting while sixteen others end, six
    times over, must all succeed."""
    done = [await create(repo, f"task-r-{n}", base_dir) for n in range(16)]
    for round_ in range(6):

        async def end(worktree: Worktree) -> Change | None:
            (worktree.path / "a.txt").write_text(f"{worktree.branch}\n")
            return await finish(worktree, message="done")

        made, ended = await asyncio.gather(
            asyncio.gather(*(create(repo, f"task-s{round_}-{n}", base_dir) for n in range(16))),
            asyncio.gather(*(end(worktree) for worktree in done)),
        )
        assert all(change is not None for change in ended)
        assert all(w.path.is_dir() and w.git_dir.is_dir() for w in made)
        done = list(made)
    listed = git(repo, "worktree", "list", "--porcelain").count("worktree ")
    assert listed == 1 + 16  # the checkout and the last round, nothing left behind


# --- merge and discard -------------------------------------------------------------------


async def finished(repo: Path, base_dir: Path, task_id: str, files: dict[str, str]) -> str:
    """A finished child's branch holding `files`."""
    worktree = await create(repo, task_id, base_dir)
    for name, text in files.items():
        (worktree.path / name).write_text(text)
    change = await finish(worktree, message=f"{task_id} work")
    assert change is not None
    return change.branch


async def test_merge_makes_a_merge_commit_and_deletes_the_branch(
    repo: Path, base_dir: Path
) -> None:
    branch = await finished(repo, base_dir, "task-m-1", {"new.txt": "new\n"})
    before = head(repo)
    outcome = await merge(repo, branch, message="Merge task-m-1")
    assert outcome.merged and outcome.commit == head(repo) and outcome.conflicts == ()
    assert "Merged baton/task-m-1 into main" in outcome.message
    parents = git(repo, "rev-list", "--parents", "-n", "1", "HEAD").split()
    assert parents[1:] == [before, git(repo, "rev-parse", "HEAD^2").strip()]
    assert git(repo, "log", "-1", "--format=%s").strip() == "Merge task-m-1"
    assert (repo / "new.txt").read_text() == "new\n"
    assert branches(repo) == ["main"] and git(repo, "status", "--porcelain") == ""


async def test_merge_conflict_leaves_the_checkout_as_it_was(repo: Path, base_dir: Path) -> None:
    first = await finished(repo, base_dir, "task-m-2", {"a.txt": "one\nFIRST\nthree\n"})
    second = await finished(repo, base_dir, "task-m-3", {"a.txt": "one\nSECOND\nthree\n"})
    assert (await merge(repo, first, message="first")).merged
    (repo / "notes.txt").write_text("untracked\n")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "sync")
    (repo / "a.txt").write_text((repo / "a.txt").read_text())  # unchanged content
    status_before, head_before = git(repo, "status", "--porcelain"), head(repo)

    outcome = await merge(repo, second, message="second")
    assert not outcome.merged and outcome.commit is None
    assert outcome.conflicts == ("a.txt",)
    assert "a.txt" in outcome.message and "baton/task-m-3" in outcome.message
    assert git(repo, "status", "--porcelain") == status_before
    assert head(repo) == head_before
    assert (repo / "a.txt").read_text() == "one\nFIRST\nthree\n"
    assert second in branches(repo)
    assert not (repo / ".git" / "MERGE_HEAD").exists()


async def test_merge_refuses_local_changes_it_would_overwrite(repo: Path, base_dir: Path) -> None:
    branch = await finished(repo, base_dir, "task-m-4", {"a.txt": "child\n"})
    (repo / "a.txt").write_text("my own edit\n")
    (repo / "other.txt").write_text("untracked\n")
    status_before, head_before = git(repo, "status", "--porcelain"), head(repo)

    outcome = await merge(repo, branch, message="m")
    assert not outcome.merged and outcome.conflicts == ()
    assert "local changes (a.txt)" in outcome.message and "Nothing was changed" in outcome.message
    assert git(repo, "status", "--porcelain") == status_before and head(repo) == head_before
    assert (repo / "a.txt").read_text() == "my own edit\n"
    assert branch in branches(repo)


async def test_merge_keeps_unrelated_local_changes(repo: Path, base_dir: Path) -> None:
    branch = await finished(repo, base_dir, "task-m-5", {"b.txt": "b\n"})
    (repo / "a.txt").write_text("my own edit\n")
    outcome = await merge(repo, branch, message="m")
    assert outcome.merged
    assert (repo / "a.txt").read_text() == "my own edit\n" and (repo / "b.txt").exists()


async def test_merge_refuses_detached_head_and_missing_branch(repo: Path, base_dir: Path) -> None:
    branch = await finished(repo, base_dir, "task-m-6", {"b.txt": "b\n"})
    missing = await merge(repo, "baton/task-nope", message="m")
    assert not missing.merged and "No branch baton/task-nope" in missing.message
    git(repo, "checkout", "--quiet", "--detach")
    detached = await merge(repo, branch, message="m")
    assert not detached.merged and "detached HEAD" in detached.message
    assert branch in branches(repo)


async def test_merge_refuses_a_running_task(repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-m-7", base_dir)
    outcome = await merge(repo, worktree.branch, message="m")
    assert not outcome.merged and "running task" in outcome.message
    assert worktree.path.exists()


async def test_discard_removes_branch_and_worktree(repo: Path, base_dir: Path) -> None:
    branch = await finished(repo, base_dir, "task-d-1", {"b.txt": "b\n"})
    assert await discard(repo, branch) is True
    assert branches(repo) == ["main"]
    assert await discard(repo, branch) is False

    worktree = await create(repo, "task-d-2", base_dir)  # left behind by a crash
    assert await discard(repo, worktree.branch) is True
    assert not worktree.path.exists() and branches(repo) == ["main"]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


async def test_names_that_are_not_baton_branches_are_refused(repo: Path) -> None:
    git(repo, "branch", "other")
    head_before = head(repo)
    for name in (
        "--upload-pack=x", "main", "other", "baton/../main", "baton/task-a..b", "baton/task-A",
        "baton/task-a\n", "refs/heads/main", "-D", "baton/task-a b", "baton/task-a/b",
    ):  # fmt: skip
        outcome = await merge(repo, name, message="m")
        assert not outcome.merged and "is not a Baton branch" in outcome.message
        with pytest.raises(WorktreeError, match="is not a Baton branch"):
            await discard(repo, name)
    assert branches(repo) == ["main", "other"] and head(repo) == head_before


# --- the hostile child --------------------------------------------------------------------


async def test_no_hook_or_fsmonitor_ever_runs(tmp_path: Path, repo: Path, base_dir: Path) -> None:
    script, marker = trap_script(tmp_path)
    plant_hooks(repo / ".git" / "hooks", script)
    plant_hooks(tmp_path / "their-hooks", script)
    git(repo, "config", "core.hooksPath", str(tmp_path / "their-hooks"))
    git(repo, "config", "commit.gpgsign", "true")
    git(repo, "config", "gpg.program", str(script))
    git(repo, "config", "core.fsmonitor", str(script))

    branch = await finished(repo, base_dir, "task-h-1", {"b.txt": "b\n"})
    assert (await merge(repo, branch, message="merge")).merged
    worktree = await create(repo, "task-h-2", base_dir)
    assert await finish(worktree, message="unchanged") is None
    assert not marker.exists()


def evil_git_dir(tmp_path: Path, script: Path) -> Path:
    """A git directory whose config runs `script` from every door we know of."""
    evil = tmp_path / "evil.git"
    git(tmp_path, "init", "--quiet", "--bare", str(evil))
    plant_hooks(evil / "hooks", script)
    for key, value in {
        "core.bare": "false",
        "core.fsmonitor": str(script),
        "core.hooksPath": str(evil / "hooks"),
        "filter.evil.clean": str(script),
        "filter.evil.smudge": str(script),
        "filter.evil.process": str(script),
        "diff.external": str(script),
        "core.pager": str(script),
        "core.editor": str(script),
        "commit.gpgsign": "true",
        "gpg.program": str(script),
    }.items():
        git(evil, "config", key, value)
    return evil


async def test_a_rewritten_git_file_is_never_followed(
    tmp_path: Path, repo: Path, base_dir: Path
) -> None:
    script, marker = trap_script(tmp_path)
    evil = evil_git_dir(tmp_path, script)
    worktree = await create(repo, "task-e-1", base_dir)
    (worktree.path / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (worktree.path / "a.txt").write_text("the child's real change\n")
    (worktree.path / ".git").write_text(f"gitdir: {evil}\n")
    # The trap is armed: git trusting the .git file would run it.
    git(worktree.path, "status", check=False)
    assert marker.exists()
    marker.unlink()

    change = await finish(worktree, message="real work")
    assert not marker.exists()
    assert change is not None
    assert {f.path for f in change.files} == {".gitattributes", "a.txt"}
    assert git(repo, "show", f"{change.branch}:a.txt") == "the child's real change\n"
    assert ".git\n" not in git(repo, "ls-tree", "--name-only", change.branch)
    assert not worktree.path.exists() and not worktree.git_dir.exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert (await merge(repo, change.branch, message="merge")).merged
    assert not marker.exists()


async def test_a_rewritten_commondir_is_never_followed(
    tmp_path: Path, repo: Path, base_dir: Path
) -> None:
    """Should the sandbox ever let a child write its admin dir, the common dir stays ours."""
    script, marker = trap_script(tmp_path)
    evil = evil_git_dir(tmp_path, script)
    worktree = await create(repo, "task-e-2", base_dir)
    (worktree.path / ".gitattributes").write_text("* filter=evil\n")
    (worktree.path / "a.txt").write_text("change\n")
    (worktree.git_dir / "commondir").write_text(f"{evil}\n")

    change = await finish(worktree, message="work")
    assert not marker.exists()
    assert change is not None and git(repo, "show", f"{change.branch}:a.txt") == "change\n"


async def test_a_child_moving_head_cannot_commit_onto_main(repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-e-3", base_dir)
    git(worktree.path, "checkout", "--quiet", "--ignore-other-worktrees", "main")
    (worktree.path / "a.txt").write_text("sneaky\n")
    main_before = head(repo)

    change = await finish(worktree, message="work")
    assert head(repo) == main_before
    assert change is not None and change.branch == "baton/task-e-3"
    assert git(repo, "show", "baton/task-e-3:a.txt") == "sneaky\n"


async def test_a_nested_repository_runs_nothing(tmp_path: Path, repo: Path, base_dir: Path) -> None:
    script, marker = trap_script(tmp_path)
    worktree = await create(repo, "task-e-4", base_dir)
    nested = worktree.path / "sub"
    nested.mkdir()
    git(nested, "init", "--quiet")
    (nested / "x.txt").write_text("x\n")
    git(nested, "add", "x.txt")
    git(nested, "commit", "--quiet", "-m", "x")
    for key in ("core.fsmonitor", "filter.evil.clean", "filter.evil.process", "core.hooksPath"):
        git(nested, "config", key, str(script))
    (nested / ".gitattributes").write_text("* filter=evil\n")
    (nested / "x.txt").write_text("dirty\n")
    (worktree.path / "top.txt").write_text("top\n")

    change = await finish(worktree, message="work")
    assert not marker.exists()
    assert change is not None and "top.txt" in {f.path for f in change.files}


async def test_odd_names_symlinks_and_fifos(tmp_path: Path, repo: Path, base_dir: Path) -> None:
    worktree = await create(repo, "task-e-5", base_dir)
    odd = ["-rf", "new\nline.txt", "with space.txt", "ünïcödé.txt", "--", "tab\there"]
    for name in odd:
        (worktree.path / name).write_text(f"{name}\n")
    (worktree.path / "link").symlink_to("/etc/passwd")
    os.mkfifo(worktree.path / "pipe")

    change = await asyncio.wait_for(finish(worktree, message="odd"), timeout=30)
    assert change is not None
    assert {f.path for f in change.files} == {*odd, "link"}
    tree = git(repo, "ls-tree", "-z", change.branch).split("\0")
    link = next(entry for entry in tree if entry.endswith("\tlink"))
    assert link.startswith("120000 blob ")
    assert git(repo, "cat-file", "-p", f"{change.branch}:link") == "/etc/passwd"
    summary = change.summary()
    assert "\n" not in summary and "new\\nline.txt (+2 \N{MINUS SIGN}0)" in summary
    assert "tab\\there" in summary


async def test_inherited_git_environment_is_ignored(
    tmp_path: Path, repo: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, marker = trap_script(tmp_path)
    evil = evil_git_dir(tmp_path, script)
    monkeypatch.setenv("GIT_DIR", str(evil))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "index"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{script}'")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(script))
    worktree = await create(repo, "task-e-6", base_dir)
    (worktree.path / "a.txt").write_text("x\n")
    change = await finish(worktree, message="work")
    assert change is not None and (await merge(repo, change.branch, message="m")).merged
    assert not marker.exists()


async def test_git_sees_only_the_variables_it_needs(
    tmp_path: Path, repo: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Git runs with PATH, HOME, XDG_CONFIG_HOME, TMPDIR, TZ and LD_LIBRARY_PATH of
    Baton's environment and Baton's own settings; nothing else of it (a preloaded
    library, a pager, an editor, a secret) reaches it."""
    dumps = tmp_path / "envs"
    dumps.mkdir()
    git_shim(tmp_path, monkeypatch, f"env > \"$(mktemp '{dumps}/env.XXXXXX')\"\n")
    monkeypatch.setenv("TZ", "UTC")
    for name, value in (
        ("LD_PRELOAD", str(tmp_path / "evil.so")), ("PAGER", "trap"), ("EDITOR", "trap"),
        ("OPENAI_API_KEY", "sk-secret"), ("SLACK_BOT_TOKEN", "xoxb-secret"),
    ):  # fmt: skip
        monkeypatch.setenv(name, value)
    worktree = await create(repo, "task-e-7", base_dir)
    (worktree.path / "a.txt").write_text("x\n")
    assert await finish(worktree, message="work") is not None

    seen: set[str] = set()
    for dump in dumps.iterdir():
        seen |= {line.split("=", 1)[0] for line in dump.read_text().splitlines() if "=" in line}
    assert {"PATH", "HOME", "XDG_CONFIG_HOME", "TZ", "LC_ALL", "GIT_CONFIG_NOSYSTEM"} <= seen
    leaked = {"LD_PRELOAD", "PAGER", "EDITOR", "OPENAI_API_KEY", "SLACK_BOT_TOKEN"} & seen
    assert not leaked
    # The shell adds PWD, SHLVL and _ of its own; nothing else beyond git's own.
    allowed = {"PATH", "HOME", "XDG_CONFIG_HOME", "TMPDIR", "TZ", "LD_LIBRARY_PATH"}
    assert seen - allowed - {"PWD", "SHLVL", "_", "OLDPWD"} <= {
        "LC_ALL", "GIT_TERMINAL_PROMPT", "GIT_CONFIG_NOSYSTEM", "GIT_EDITOR", "GIT_INDEX_FILE",
        "GIT_DIR", "GIT_WORK_TREE", "GIT_PREFIX", "GIT_EXEC_PATH", "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
    }  # fmt: skip


def test_summary_caps_the_file_list() -> None:
    files = tuple(FileChange(path=f"f{n}.txt", added=1, removed=0) for n in range(25))
    summary = Change(branch="baton/task-x", commit="0" * 40, files=files).summary()
    assert summary.startswith("25 files changed, +25 \N{MINUS SIGN}0: f0.txt (+1 \N{MINUS SIGN}0)")
    assert summary.endswith("f19.txt (+1 \N{MINUS SIGN}0), … and 5 more")
    one = Change(branch="b", commit="c", files=(FileChange(path="a", added=2, removed=3),))
    assert one.summary() == "1 file changed, +2 \N{MINUS SIGN}3: a (+2 \N{MINUS SIGN}3)"


# ------------------------------------------------ what Merge refuses (found by review)


async def test_merge_refuses_a_branch_moved_after_its_task_recorded_it(
    repo: Path, base_dir: Path
) -> None:
    """Commands in the workspace's sandbox can write refs: someone points the task's
    branch at a commit of their own; Merge merges only the commit the task recorded."""
    worktree = await create(repo, "task-m-1", base_dir)
    (worktree.path / "b.txt").write_text("the child's work\n")
    change = await finish(worktree, message="work")
    assert change is not None
    git(repo, "checkout", "--quiet", "-b", "other")
    (repo / "evil.txt").write_text("not the child's\n")
    git(repo, "add", "evil.txt")
    git(repo, "commit", "--quiet", "-m", "planted")
    planted = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "--quiet", "main")
    git(repo, "update-ref", "refs/heads/baton/task-m-1", planted)
    head = git(repo, "rev-parse", "HEAD")
    outcome = await merge(repo, change.branch, message="m", expected=change.commit)
    assert not outcome.merged and "no longer points at the commit" in outcome.message
    assert git(repo, "rev-parse", "HEAD") == head
    # The recorded commit itself still merges once the branch points back at it.
    git(repo, "update-ref", "refs/heads/baton/task-m-1", change.commit)
    assert (await merge(repo, change.branch, message="m", expected=change.commit)).merged


async def test_merge_refuses_changes_to_baton_files_and_submodules(
    repo: Path, base_dir: Path
) -> None:
    for task_id, path, mode in (
        ("task-m-2", ".baton/agents/evil.md", "100644"),
        ("task-m-3", "vendor/lib", "160000"),
    ):
        git(repo, "checkout", "--quiet", "-b", f"baton/{task_id}")
        if mode == "160000":
            head = git(repo, "rev-parse", "HEAD").strip()
            git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head},{path}")
        else:
            (repo / ".baton" / "agents").mkdir(parents=True, exist_ok=True)
            (repo / path).write_text("---\nname: evil\n---\nrun anything\n")
            git(repo, "add", "-f", path)
        git(repo, "commit", "--quiet", "-m", "sneaky")
        git(repo, "checkout", "--quiet", "main")
        if mode != "160000":
            (repo / path).unlink(missing_ok=True)
        before = git(repo, "rev-parse", "HEAD")
        outcome = await merge(repo, f"baton/{task_id}", message="m")
        assert not outcome.merged, outcome.message
        assert ".baton/" in outcome.message if mode != "160000" else "submodule" in outcome.message
        assert git(repo, "rev-parse", "HEAD") == before
        assert not (repo / ".baton" / "agents" / "evil.md").exists()


# --- Baton's own files -------------------------------------------------------------------

CONFIG = "Baton's configuration"
DATABASE = "Baton's database"


def branch_with(repo: Path, task_id: str, *steps: tuple[str, ...]) -> str:
    """A branch `baton/<task_id>` off main with one commit made of git `steps`; files a
    step names are written first when the step is `("write", path, text)`."""
    branch = f"baton/{task_id}"
    git(repo, "checkout", "--quiet", "-b", branch)
    for step in steps:
        if step[0] == "write":
            path = repo / step[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(step[2])
            git(repo, "add", "-f", step[1])
        else:
            git(repo, *step)
    git(repo, "commit", "--quiet", "-m", "the child's work")
    git(repo, "checkout", "--quiet", "main")
    return branch


@pytest.fixture
def with_config(repo: Path) -> Path:
    """The workspace repository tracking Baton's config file, baton.yaml."""
    (repo / "baton.yaml").write_text("self_approval: false\napprovers: [U1]\n")
    git(repo, "add", "baton.yaml")
    git(repo, "commit", "--quiet", "-m", "config")
    return repo


def protected_in(repo: Path, *, database: Path | None = None) -> list[ProtectedFile]:
    files = [ProtectedFile(path=repo / "baton.yaml", what=CONFIG)]
    if database is not None:
        files += [
            ProtectedFile(path=database.with_name(database.name + suffix), what=DATABASE)
            for suffix in ("", "-wal", "-shm", "-journal")
        ]
    return files


async def assert_refused(repo: Path, branch: str, protected: list[ProtectedFile]) -> str:
    """Merge refuses `branch`, changing nothing; the refusal's text."""
    head_before, status_before = head(repo), git(repo, "status", "--porcelain")
    outcome = await merge(repo, branch, message="m", protected=protected)
    assert not outcome.merged and outcome.commit is None, outcome.message
    assert outcome.message.startswith(f"{branch} changes ")
    assert outcome.message.endswith("; it is not merged.")
    assert head(repo) == head_before and git(repo, "status", "--porcelain") == status_before
    assert branch in branches(repo)
    return outcome.message


@pytest.mark.parametrize(
    ("task_id", "steps"),
    [
        ("task-p-1", (("write", "baton.yaml", "self_approval: true\nallow: [bash]\n"),)),
        ("task-p-2", (("rm", "--quiet", "baton.yaml"),)),
        # Listed with --no-renames as a deletion and an addition: the old name counts.
        ("task-p-3", (("mv", "baton.yaml", "moved.yaml"),)),
    ],
    ids=["changes", "deletes", "renames"],
)
async def test_merge_refuses_a_branch_that_changes_batons_config(
    with_config: Path, task_id: str, steps: tuple[tuple[str, ...], ...]
) -> None:
    repo = with_config
    before = (repo / "baton.yaml").read_text()
    branch = branch_with(repo, task_id, *steps)
    message = await assert_refused(repo, branch, protected_in(repo))
    assert f"changes baton.yaml ({CONFIG})" in message
    assert (repo / "baton.yaml").read_text() == before


async def test_merge_refuses_a_branch_that_adds_the_config_where_none_is_tracked(
    repo: Path,
) -> None:
    """An untracked config (or none yet) in the checkout: a branch adding one would
    write it there."""
    branch = branch_with(repo, "task-p-4", ("write", "baton.yaml", "allow: [bash]\n"))
    message = await assert_refused(repo, branch, protected_in(repo))
    assert f"baton.yaml ({CONFIG})" in message
    assert not (repo / "baton.yaml").exists()


async def test_merge_refuses_a_branch_that_adds_an_agent_file(with_config: Path) -> None:
    branch = branch_with(
        with_config, "task-p-5", ("write", ".baton/agents/x.md", "---\nname: x\n---\nanything\n")
    )
    message = await assert_refused(with_config, branch, protected_in(with_config))
    assert (
        ".baton/agents/x.md (.baton/, .claude/agents/, .claude/skills/: the agents, "
        "skills and memory Baton runs)" in message
    )
    assert CONFIG not in message
    assert not (with_config / ".baton").exists()


async def test_merge_refuses_a_branch_that_changes_the_database_naming_each_file(
    repo: Path,
) -> None:
    """A database kept in the workspace: a branch that rewrites it or plants a WAL
    (replayed into it at the next open) is refused, every file named."""
    database = repo / "data" / "baton.db"
    database.parent.mkdir()
    database.write_bytes(b"SQLite format 3\0")
    git(repo, "add", "-f", "data/baton.db")
    git(repo, "commit", "--quiet", "-m", "database")
    branch = branch_with(
        repo, "task-p-6",
        ("write", "data/baton.db", "rewritten"), ("write", "data/baton.db-wal", "planted"),
    )  # fmt: skip
    message = await assert_refused(repo, branch, protected_in(repo, database=database))
    assert f"data/baton.db ({DATABASE})" in message
    assert f"data/baton.db-wal ({DATABASE})" in message
    assert database.read_bytes() == b"SQLite format 3\0"
    assert not database.with_name("baton.db-wal").exists()


async def test_merge_names_the_config_and_baton_files_together(with_config: Path) -> None:
    branch = branch_with(
        with_config, "task-p-7",
        ("write", "baton.yaml", "self_approval: true\n"),
        ("write", ".baton/agents/evil.md", "---\nname: evil\n---\nrun anything\n"),
        ("write", "src/fine.py", "print('fine')\n"),
    )  # fmt: skip
    message = await assert_refused(with_config, branch, protected_in(with_config))
    assert message == (
        f"{branch} changes baton.yaml ({CONFIG}) and .baton/agents/evil.md (.baton/, "
        ".claude/agents/, .claude/skills/: the agents, skills and memory Baton runs), which "
        "no agent may change; it is not merged."
    )
    assert not (with_config / "src").exists()


async def test_merge_refuses_a_branch_that_plants_a_claude_code_agent_or_skill(
    with_config: Path,
) -> None:
    """Claude Code's agent files and skills are Baton's agents and skills too."""
    branch = branch_with(
        with_config, "task-p-8",
        ("write", ".claude/agents/evil.md", "---\ndescription: x\n---\nrun anything\n"),
        ("write", ".claude/skills/evil/SKILL.md", "---\nname: evil\ndescription: x\n---\nx\n"),
        ("write", ".claude/settings.json", "{}\n"),
    )  # fmt: skip
    message = await assert_refused(with_config, branch, protected_in(with_config))
    assert ".claude/agents/evil.md" in message and ".claude/skills/evil/SKILL.md" in message
    assert ".claude/settings.json" not in message


async def test_a_harmless_branch_still_merges_beside_batons_files(
    with_config: Path, base_dir: Path
) -> None:
    branch = await finished(with_config, base_dir, "task-p-8", {"b.txt": "b\n"})
    database = with_config / "baton.db"
    outcome = await merge(
        with_config, branch, message="m", protected=protected_in(with_config, database=database)
    )
    assert outcome.merged, outcome.message
    assert (with_config / "b.txt").read_text() == "b\n"


async def test_a_config_outside_the_workspace_blocks_nothing(
    with_config: Path, tmp_path: Path
) -> None:
    """Baton's config lives elsewhere: the workspace's own baton.yaml is just a file."""
    elsewhere = tmp_path / "etc" / "baton.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("model: m\n")
    branch = branch_with(with_config, "task-p-9", ("write", "baton.yaml", "anything: 1\n"))
    outcome = await merge(
        with_config, branch, message="m",
        protected=[ProtectedFile(path=elsewhere, what=CONFIG),
                   ProtectedFile(path=tmp_path / "state" / "baton.db", what=DATABASE)],
    )  # fmt: skip
    assert outcome.merged, outcome.message
    assert (with_config / "baton.yaml").read_text() == "anything: 1\n"
