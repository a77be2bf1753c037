"""git's in-progress state (rebase, `git am`, cherry-pick, revert) in the sandbox.

What a command leaves in `.git/rebase-merge`, `.git/rebase-apply` or `.git/sequencer`,
the operator's next `git rebase --continue` (or `cherry-pick --continue`) on the host
acts on, outside any sandbox. An operator's own rebase in progress stays as it is.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sandbox import Sandbox, SandboxPolicy
from bot.sandbox.runner import _set_aside
from bot.tools.shell import Bash, BashArgs
from bot.tools.workspace import Workspace
from tests.sandbox.conftest import Site
from tests.sandbox.test_filesystem import host_git, present, tree

STATE = ("rebase-merge", "rebase-apply", "sequencer")
# Three commits on `topic` after `main`'s first, one more on `main`: rebasing or
# cherry-picking them conflicts with nothing.
HISTORY = (
    "set -e; git checkout -q -b main; echo base > base.txt; git add base.txt; "
    "git commit -qm base; git checkout -q -b topic; "
    "for n in 1 2 3; do echo $n > t$n.txt; git add t$n.txt; git commit -qm t$n; done; "
    "git checkout -q main; echo m > m.txt; git add m.txt; git commit -qm m"
)


async def run(bash: Bash, command: str) -> str:
    return await bash.run(BashArgs(command=command, timeout_s=60))


def stopped_rebase(marker: Path) -> str:
    """Shell that starts an interactive rebase of `topic`, stops it at once (`break`), and
    adds an `exec` line to its todo list: what `--continue` would run next."""
    return (
        "git checkout -q topic && "
        "GIT_SEQUENCE_EDITOR='sed -i 1ibreak' git rebase -q -i main && "
        f"echo 'exec touch {marker}' >> .git/rebase-merge/git-rebase-todo"
    )


def set_aside(root: Path, name: str) -> list[Path]:
    """Where Baton moved `name` aside: into a new directory of its own, named at random."""
    holders = sorted((root / ".git").glob(f"{name}.set-aside-by-baton-*"))
    return [holder / name for holder in holders if (holder / name).exists()]


@pytest.fixture
async def history(site: Site, sandbox: Sandbox) -> Bash:
    bash = site.bash(sandbox)
    out = await run(bash, HISTORY)
    assert out == "exit code 0 (no output)", out
    return bash


async def test_ordinary_rebase_and_cherry_pick_work_within_a_call(
    site: Site, history: Bash
) -> None:
    root = site.workspace.root
    out = await run(
        history,
        "set -e; git status | grep -ci rebas || true; "
        "git checkout -q topic; git rebase -q main; git log --format=%s | head -4 | xargs; "
        "git checkout -q main; git cherry-pick topic~1 topic >/dev/null; "
        "git log --format=%s | head -3 | xargs; git status | grep -ci 'rebas\\|cherry' || true",
    )
    assert out.splitlines() == ["exit code 0", "0", "t3 t2 t1 m", "t3 t2 m", "0"], out
    # Nothing was left, so nothing was moved and the model was told nothing.
    assert "[Baton" not in out
    assert not any(present(root / ".git" / name) for name in STATE)
    assert not any(set_aside(root, name) for name in STATE)


async def test_a_rebase_left_by_a_command_is_moved_aside_and_runs_nothing(
    site: Site, history: Bash
) -> None:
    root = site.workspace.root
    marker = site.root / "PWNED"
    out = await run(history, f"{stopped_rebase(marker)} && git status | head -3")
    assert "rebase in progress" in out  # inside the call, git worked as usual
    note = out.splitlines()[-1]
    assert "Baton moved" in note and ".git/rebase-merge" in note, out
    assert "rebase" in note and "outside the sandbox" in note and "Nothing was deleted" in note
    assert not present(root / ".git" / "rebase-merge")
    status = host_git(root, "status")
    assert status.returncode == 0, status.stderr
    assert "rebas" not in status.stdout
    cont = host_git(root, "rebase", "--continue")
    assert cont.returncode != 0 and "No rebase in progress" in cont.stderr
    assert not marker.exists()
    # Moved, not lost: the todo is there under a name git ignores...
    (moved,) = set_aside(root, "rebase-merge")
    assert f"exec touch {marker}" in (moved / "git-rebase-todo").read_text()
    # ...and put back by hand, it does run the line on the host: the attack is real.
    moved.rename(root / ".git" / "rebase-merge")
    moved.parent.rmdir()
    assert "rebase in progress" in host_git(root, "status").stdout
    host_git(root, "-c", "core.editor=true", "rebase", "--continue")
    assert marker.exists()


async def test_planted_rebase_am_and_sequencer_state_is_moved_aside(
    site: Site, history: Bash
) -> None:
    root = site.workspace.root
    marker = site.root / "PWNED"
    out = await run(
        history,
        "mkdir -p .git/rebase-merge .git/rebase-apply .git/sequencer && "
        f"printf 'exec touch {marker}\\n' | tee .git/rebase-merge/git-rebase-todo "
        "> .git/sequencer/todo && git rev-parse HEAD | tee .git/sequencer/head "
        "> .git/rebase-merge/orig-head && echo refs/heads/main > .git/rebase-merge/head-name "
        "&& touch .git/rebase-merge/interactive .git/rebase-apply/rebasing && "
        "git rev-parse HEAD > .git/rebase-merge/onto",
    )
    notes = [line for line in out.splitlines() if line.startswith("[Baton moved")]
    assert len(notes) == 3, out
    for name in STATE:
        assert not present(root / ".git" / name), name
        assert len(set_aside(root, name)) == 1, name
    status = host_git(root, "status")
    assert status.returncode == 0, status.stderr
    assert "rebas" not in status.stdout and "herry" not in status.stdout, status.stdout
    for action in ("rebase", "cherry-pick"):
        result = host_git(root, "-c", "core.editor=true", action, "--continue")
        assert result.returncode != 0, (action, result)
    assert not marker.exists()
    # A file or a link where git wants the directory goes the same way.
    for command in ("echo x > .git/sequencer", "ln -s /tmp .git/rebase-apply"):
        out = await run(history, command)
        assert "[Baton moved" in out.splitlines()[-1], (command, out)
        assert not any(present(root / ".git" / name) for name in STATE)


def start_rebase_on_the_host(root: Path, marker: Path) -> None:
    """An operator's own interactive rebase, stopped (`break`) before an `exec` line."""
    for args in (
        ("checkout", "-q", "topic"),
        ("-c", "sequence.editor=sed -i 1ibreak", "rebase", "-q", "-i", "--exec",
         f"touch {marker}", "main"),
    ):  # fmt: skip
        result = host_git(root, *args)
        assert result.returncode == 0, result.stderr
    assert "rebase in progress" in host_git(root, "status").stdout


async def test_an_operators_rebase_in_progress_stays_untouched_and_unwritable(
    site: Site, history: Bash
) -> None:
    root = site.workspace.root
    marker = site.root / "continued"
    start_rebase_on_the_host(root, marker)
    state = root / ".git" / "rebase-merge"
    before = tree(state)
    for command in (
        "echo 'exec touch x' >> .git/rebase-merge/git-rebase-todo",
        "rm -rf .git/rebase-merge",
        "mv .git/rebase-merge .git/elsewhere",
        "echo x > .git/rebase-merge/new",
    ):
        out = await run(history, command)
        assert not out.startswith("exit code 0"), (command, out)
        assert "Baton moved" not in out
    # Read, it is what git shows inside too.
    assert "interactive rebase in progress" in await run(history, "git status")
    # git's own abort cannot end it either (HEAD and the work tree are the command's
    # to change, as always; the rebase's state is not).
    out = await run(history, "git rebase --abort")
    assert not out.startswith("exit code 0") and "Baton moved" not in out, out
    assert tree(state) == before
    assert not set_aside(root, "rebase-merge")
    assert not (root / ".git" / "elsewhere").exists()
    # The operator's rebase is still theirs to end, and nothing of it ran.
    result = host_git(root, "rebase", "--abort")
    assert result.returncode == 0, result.stderr
    assert not state.exists() and not marker.exists()


def test_only_the_last_call_started_without_it_moves_it_aside(site: Site, sandbox: Sandbox) -> None:
    """Calls at once: one call's rebase is not taken away while another still runs it."""
    root = site.workspace.root
    policy = SandboxPolicy.for_workspace(root)
    state = root / ".git" / "rebase-merge"
    notes: list[str] = []
    with sandbox.command(policy, ["true"], notes=notes):
        state.mkdir()  # as the first call's command would
        # A second call starts meanwhile: to it, the state is the first call's, not
        # the operator's, so it neither binds it read-only nor keeps it.
        with sandbox.command(policy, ["true"], notes=notes) as argv:
            assert str(state) not in argv
        assert state.is_dir() and notes == []
    assert not state.exists()
    assert len(notes) == 1 and "Baton moved" in notes[0]
    # Existing when a call starts, with no call running: the operator's. Bound
    # read-only, and left where it is.
    state.mkdir()
    with sandbox.command(policy, ["true"], notes=notes) as argv:
        at = argv.index(str(state))
        assert argv[at - 1 : at + 2] == ["--ro-bind", str(state), str(state)]
    assert state.is_dir() and len(notes) == 1


async def test_a_worktree_s_git_state_cannot_be_made_from_its_sandbox(
    site: Site, sandbox: Sandbox, history: Bash
) -> None:
    """A linked worktree's `.git` is a file, read-only like the main `.git`'s protected
    paths, and its git directory lies outside the sandbox: no state can be made there."""
    root = site.workspace.root
    worktree = site.root / "wt"
    result = host_git(root, "worktree", "add", "-q", str(worktree), "topic")
    assert result.returncode == 0, result.stderr
    bash = Bash(Workspace(worktree), sandbox=sandbox)
    for name in STATE:
        out = await run(bash, f"mkdir -p .git/{name} && echo 'exec touch x' > .git/{name}/todo")
        assert not out.startswith("exit code 0"), (name, out)
    admin = root / ".git" / "worktrees" / "wt"
    assert not any(present(admin / name) for name in STATE)
    assert (worktree / ".git").is_file()
    status = host_git(worktree, "status")
    assert status.returncode == 0 and "rebas" not in status.stdout, status


async def test_concurrent_calls_share_one_rebase_until_the_last_ends(
    site: Site, history: Bash
) -> None:
    root = site.workspace.root
    first = asyncio.create_task(
        run(history, "mkdir .git/rebase-merge && sleep 1 && test -d .git/rebase-merge")
    )
    await asyncio.sleep(0.4)
    second = await run(history, "test -d .git/rebase-merge && echo seen")
    assert second == "exit code 0\nseen\n"  # not moved when the second call ended
    out = await first
    assert out.startswith("exit code 0"), out
    assert "[Baton moved" in out
    assert not (root / ".git" / "rebase-merge").exists()


async def test_names_taken_ahead_cannot_make_the_move_fail(site: Site, history: Bash) -> None:
    """A command that takes every name it can guess still gets its state moved aside.

    (Review finding: with a predictable name and a counter, a command holding all 1,000
    names made the move fail, and the planted rebase stayed live for the host's git.)
    """
    root = site.workspace.root
    marker = site.root / "PWNED"
    stamps = " ".join(
        f"$(date -u -d @$(( $(date +%s) + {delta} )) +%Y%m%dT%H%M%SZ)" for delta in range(4)
    )
    out = await run(
        history,
        f"{stopped_rebase(marker)} && for s in {stamps}; do "
        "mkdir .git/rebase-merge.set-aside-by-baton-$s; "
        "for n in $(seq 1 300); do mkdir .git/rebase-merge.set-aside-by-baton-$s-$n "
        ".git/rebase-merge.set-aside-by-baton-$s-$n$n; done; done; echo planted",
    )
    assert "planted" in out and "Baton moved" in out, out
    assert not present(root / ".git" / "rebase-merge")
    assert "rebas" not in host_git(root, "status").stdout
    host_git(root, "-c", "core.editor=true", "rebase", "--continue")
    assert not marker.exists()


def test_a_state_a_command_locked_is_still_moved_aside_by_a_non_root_baton(
    request: pytest.FixtureRequest,
) -> None:
    """Baton running as the workspace's own user: a command that ends with `chmod 555`
    on the state (or on `.git`) must not keep it there (a review left a live rebase so).
    Run as `nobody`, since root is not stopped by modes."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another user")
    # Not under pytest's own directory, which only root may enter.
    base = Path(tempfile.mkdtemp(prefix="baton-git-state-"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    root = base / "ws"
    state = root / ".git" / "rebase-merge"
    (state / "deep").mkdir(parents=True)
    (state / "git-rebase-todo").write_text("exec touch PWNED\n")
    for path in (base, root, root / ".git", state, state / "deep"):
        os.chown(path, 65534, 65534)
    os.chown(state / "git-rebase-todo", 65534, 65534)
    base.chmod(0o755)
    (state / "deep").chmod(0o000)
    state.chmod(0o555)
    (root / ".git").chmod(0o555)
    note = as_nobody(lambda: _set_aside(state))
    assert "Baton moved" in note, note
    assert not state.exists()
    (moved,) = set_aside(root, "rebase-merge")
    assert (moved / "git-rebase-todo").read_text() == "exec touch PWNED\n"


def as_nobody(work: Callable[[], str]) -> str:
    """Run `work` in a forked child that has become `nobody`; what it returned."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, do the work, report, leave
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(writer, work().encode())
        except BaseException:  # reported to the parent
            os.write(writer, f"child failed: {traceback.format_exc()}".encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    return out
