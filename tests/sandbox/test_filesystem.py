"""What a sandboxed command can read and write, checked against the real bwrap."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sandbox import Sandbox, SandboxPolicy
from bot.tools.shell import Bash, BashArgs
from bot.tools.workspace import Workspace
from tests.sandbox.conftest import Site, make_site, require


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(path: Path) -> dict[str, str]:
    """Every file under `path` with its content hash, to compare before and after."""
    return {
        str(p.relative_to(path)): digest(p) if p.is_file() else "dir"
        for p in sorted(path.rglob("*"))
    }


async def run(bash: Bash, command: str) -> str:
    return await bash.run(BashArgs(command=command, timeout_s=30))


async def test_reads_outside_the_workspace_fail(site: Site, sandbox: Sandbox) -> None:
    bash = site.bash(sandbox)
    for target in (site.sibling_secret, site.state_file, Path("/root"), Path("/srv")):
        out = await run(bash, f"cat {target} || ls -a {target}")
        assert "-secret" not in out
        assert "No such file or directory" in out, out
    assert await run(bash, "ls ..") == "exit code 0\nws\n"
    assert await run(bash, "ls -A /home") == "exit code 0\nsandbox\n"
    # The host's password hashes are not even there: /etc is Baton's (see test_etc.py).
    assert await run(bash, "test -e /etc/shadow || echo absent") == "exit code 0\nabsent\n"


async def test_writes_outside_the_workspace_fail(site: Site, sandbox: Sandbox) -> None:
    bash = site.bash(sandbox)
    before = tree(site.root / "sibling")
    for target in ("../sibling/new", "../sibling/secret.txt", "/etc/baton-x", "/usr/baton-x"):
        out = await run(bash, f"echo pwned > {target}")
        assert not out.startswith("exit code 0"), (target, out)
    assert tree(site.root / "sibling") == before
    assert not any(map(os.path.lexists, ["/etc/baton-x", "/usr/baton-x"]))
    # Scratch space exists but is private to the call; home holds only git's identity.
    assert await run(bash, "echo hi > /tmp/x && cat /tmp/x && echo $HOME && ls -A ~") == (
        "exit code 0\nhi\n/home/sandbox\n.gitconfig\n"
    )
    assert await run(bash, "cat /tmp/x") == (
        "exit code 1\ncat: /tmp/x: No such file or directory\n"
    )


async def test_writes_in_the_workspace_reach_the_host(site: Site, sandbox: Sandbox) -> None:
    bash = site.bash(sandbox)
    out = await run(bash, "mkdir -p src && echo made > src/out.txt && pwd")
    assert out == f"exit code 0\n{site.workspace.root}\n"
    made = site.workspace.root / "src" / "out.txt"
    assert made.read_text() == "made\n"
    assert made.stat().st_uid == os.getuid()


async def test_protected_paths_stay_unchanged(site: Site, sandbox: Sandbox) -> None:
    bash = site.bash(sandbox)
    root = site.workspace.root
    before = {name: tree(root / name) for name in (".baton", ".git/hooks")}
    config_before = digest(site.config)
    git_config_before = digest(root / ".git" / "config")
    attacks = [
        "echo evil > .baton/agents/x.md",
        "echo evil > .baton/agents/general-purpose.md",
        "rm -rf .baton",
        "mv .baton .b && mkdir -p .baton/agents && echo evil > .baton/agents/x.md",
        "echo evil > baton.yaml",
        "rm -f baton.yaml",
        "mv baton.yaml moved.yaml",
        "echo 'exit 1' > .git/hooks/pre-commit",
        "echo evil > .git/hooks/post-checkout",
        "git config alias.x '!touch pwned'",
        "git config core.hooksPath /tmp",
        "mv .git .g && git init -q && echo evil > .git/hooks/pre-commit",
        "rm -rf .git",
    ]
    for command in attacks:
        await run(bash, command)
    assert {name: tree(root / name) for name in before} == before
    assert digest(site.config) == config_before
    assert digest(root / ".git" / "config") == git_config_before
    assert not (root / ".b").exists()
    assert not (root / ".g").exists()
    assert not (root / "moved.yaml").exists()


async def test_git_still_works_in_the_workspace(site: Site, sandbox: Sandbox) -> None:
    out = await run(
        site.bash(sandbox),
        "echo a > a.txt && git add a.txt && "
        "git -c user.name=t -c user.email=t@example.com commit -qm first && git log --format=%s",
    )
    assert out == "exit code 0\nfirst\n"


async def test_commits_are_baton_s_unless_the_repository_names_someone(
    site: Site, sandbox: Sandbox
) -> None:
    bash = site.bash(sandbox)
    out = await run(bash, "echo a > a.txt && git add a.txt && git commit -qm one && "
                          "git log -1 --format='%an <%ae>'")  # fmt: skip
    assert out == "exit code 0\nBaton <baton@localhost>\n"
    # The identity is read-only, like the rest of what the sandbox is shown.
    out = await run(bash, "git config --global user.name Mallory")
    assert not out.startswith("exit code 0")
    # The team's own identity in the repository wins (set by a person, outside).
    config = site.workspace.root / ".git" / "config"
    config.write_text(config.read_text() + "[user]\n\tname = Team\n\temail = team@example.com\n")
    out = await run(bash, "echo b > b.txt && git add b.txt && git commit -qm two && "
                          "git log -1 --format='%an <%ae>'")  # fmt: skip
    assert out == "exit code 0\nTeam <team@example.com>\n"


async def test_the_database_is_masked(site: Site, sandbox: Sandbox) -> None:
    bash = site.bash(sandbox)
    before = digest(site.database)
    assert await run(bash, "wc -c < baton.db") == "exit code 0\n0\n"
    for command in (
        "echo x > baton.db",
        "rm -f baton.db",
        "mv baton.db old.db",
        "echo planted > baton.db-journal",
        "echo planted > baton.db-wal",
    ):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    assert digest(site.database) == before
    root = site.workspace.root
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("baton.db")) == ["baton.db"]


async def test_a_hidden_config_is_masked(site: Site, sandbox: Sandbox) -> None:
    policy = SandboxPolicy.for_workspace(site.workspace.root, masked=[site.config])
    bash = Bash(site.workspace, sandbox=sandbox, policy=policy)
    assert await run(bash, "wc -c < baton.yaml") == "exit code 0\n0\n"


async def test_missing_protected_paths_cannot_be_created(tmp_path: Path, sandbox: Sandbox) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    workspace = Workspace(root, protected_files=[root / "baton.yaml"])
    bash = Bash(workspace, sandbox=sandbox)
    for command in (
        "mkdir -p .baton/agents && echo evil > .baton/agents/x.md",
        "git init -q && echo evil > .git/hooks/pre-commit",
        "echo 'permissions: {allow: [bash]}' > baton.yaml",
        "mkdir -p .claude/agents && echo evil > .claude/agents/x.md",
        "mkdir -p .claude/skills/evil && echo evil > .claude/skills/evil/SKILL.md",
    ):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    # The placeholders that kept them from being made are gone again.
    assert list(root.iterdir()) == []


async def test_a_missing_hooks_directory_cannot_be_created(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    site = make_site(tmp_path)
    hooks = site.workspace.root / ".git" / "hooks"
    for hook in hooks.iterdir():
        hook.unlink()
    hooks.rmdir()
    out = await run(site.bash(sandbox), "mkdir .git/hooks || echo evil > .git/hooks/pre-commit")
    assert not out.startswith("exit code 0")
    assert not hooks.exists()


def present(path: Path) -> bool:
    return os.path.lexists(path)


def host_git_status(root: Path) -> subprocess.CompletedProcess[str]:
    """What the operator's next `git status` on the host does in the workspace."""
    return host_git(root, "status", "--porcelain")


def host_git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A git command the operator types on the host, in the workspace."""
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)


def evil_repository(marker: Path) -> str:
    """Shell that builds `evil/`: a git directory whose config runs a program on `git status`."""
    return (
        "mkdir -p evil && cp -r .git/objects .git/refs .git/HEAD evil/ && "
        "printf '[core]\\n\\trepositoryformatversion = 0\\n"
        f'\\tfsmonitor = "touch {marker}; false"\\n\' > evil/config'
    )


async def test_a_planted_commondir_is_removed_and_runs_nothing(
    site: Site, sandbox: Sandbox
) -> None:
    root = site.workspace.root
    marker = site.root / "fsmonitor-ran"
    bash = site.bash(sandbox)
    await run(bash, "echo a > a.txt && git add a.txt && git commit -qm one")
    out = await run(
        bash, f"{evil_repository(marker)} && echo ../evil > .git/commondir && git status"
    )
    assert out.startswith("exit code 0"), out
    # Gone once the call is over, and the model is told why.
    assert ".git/commondir" in out.splitlines()[-1] and "removed" in out.splitlines()[-1].lower()
    # The host's git reads its own config and runs nothing.
    assert not (root / ".git" / "commondir").exists()
    status = host_git_status(root)
    assert status.returncode == 0, status.stderr
    assert not marker.exists()
    # The same commondir written by hand does run the program: the attack is real.
    (root / ".git" / "commondir").write_text("../evil\n")
    host_git_status(root)
    assert marker.exists()
    (root / ".git" / "commondir").unlink()
    marker.unlink()
    # A directory in its place, or a link, goes too.
    for command in ("mkdir .git/commondir", "ln -s ../evil/HEAD .git/commondir"):
        await run(bash, command)
        assert not present(root / ".git" / "commondir"), command
    assert host_git_status(root).returncode == 0


def test_the_runner_reports_what_it_removed(site: Site, sandbox: Sandbox) -> None:
    root = site.workspace.root
    policy = SandboxPolicy.for_workspace(root)
    notes: list[str] = []
    with sandbox.command(policy, ["true"], notes=notes):
        (root / ".git" / "commondir").write_text("../evil\n")
    assert not (root / ".git" / "commondir").exists()
    assert len(notes) == 1
    assert "Baton removed" in notes[0] and "commondir" in notes[0]
    # One that was there before the call goes too: a main repository's `.git` never
    # holds one, and another call running alongside may have planted it.
    (root / ".git" / "commondir").write_text(".\n")
    with sandbox.command(policy, ["true"], notes=notes):
        pass
    assert not (root / ".git" / "commondir").exists()
    assert len(notes) == 2


async def test_submodule_and_worktree_git_directories_are_protected(
    site: Site, sandbox: Sandbox
) -> None:
    root = site.workspace.root
    git = root / ".git"
    marker = site.root / "fsmonitor-ran"
    (git / "modules" / "lib").mkdir(parents=True)
    (git / "modules" / "lib" / "config").write_text("[core]\n\tbare = false\n")
    before = tree(git / "modules")
    bash = site.bash(sandbox)
    attacks = [
        f"printf '[core]\\n\\tfsmonitor = \"touch {marker}\"\\n' >> .git/modules/lib/config",
        "mkdir -p .git/modules/lib/hooks && echo evil > .git/modules/lib/hooks/post-checkout",
        "rm -rf .git/modules",
        "mv .git/modules .git/m",
        "mkdir -p .git/worktrees/w && echo ../.. > .git/worktrees/w/commondir",
        "echo '[core] fsmonitor = evil' > .git/config.worktree",
    ]
    for command in attacks:
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    assert tree(git / "modules") == before
    assert not (git / "m").exists()
    assert not (git / "worktrees").exists()
    assert not (git / "config.worktree").exists()
    # An existing config.worktree is read-only, not hidden.
    (git / "config.worktree").write_text("[user]\n\tname = Team\n")
    out = await run(bash, "cat .git/config.worktree && echo x >> .git/config.worktree")
    assert out.startswith("exit code 1\n[user]"), out
    assert (git / "config.worktree").read_text() == "[user]\n\tname = Team\n"
    assert host_git_status(root).returncode == 0
    assert not marker.exists()


async def test_git_keeps_working_with_the_control_paths_protected(
    site: Site, sandbox: Sandbox
) -> None:
    out = await run(
        site.bash(sandbox),
        "set -e; echo a > a.txt; git add a.txt; git commit -qm one; git status --short a.txt; "
        "echo b >> a.txt; git diff --stat | tail -1; git stash -q; git stash pop -q; "
        "git branch topic; git branch --list topic; git commit -qam two; git log --format=%s; "
        "git worktree list >/dev/null; git gc -q; echo done",
    )
    assert out.splitlines() == [
        "exit code 0",
        " 1 file changed, 1 insertion(+)",
        "  topic",
        "two",
        "one",
        "done",
    ], out
    root = site.workspace.root
    assert not any(present(root / ".git" / n) for n in ("worktrees", "modules", "commondir"))
    assert host_git_status(root).returncode == 0


async def test_git_cannot_be_replaced_by_a_gitdir_file(site: Site, sandbox: Sandbox) -> None:
    root = site.workspace.root
    marker = site.root / "fsmonitor-ran"
    bash = site.bash(sandbox)
    await run(bash, evil_repository(marker))
    for command in (
        "mv .git .git-old && echo 'gitdir: evil' > .git",
        "mv .git/config .git/config.old; echo 'gitdir: ../evil' > .git/config",
        # Last: it deletes what is not protected (objects, refs), which breaks the
        # repository, but `.git` itself stays a directory and no program runs.
        "rm -rf .git; echo 'gitdir: evil' > .git",
    ):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
        assert (root / ".git").is_dir()
        assert not (root / ".git-old").exists()
        host_git_status(root)
        assert not marker.exists()


@pytest.mark.xfail(
    strict=True,
    reason="known hole, not closed by the sandbox: a gitlink in the index makes the host's "
    "`git status` recurse into a nested repository the command made, and run its fsmonitor",
)
async def test_a_nested_repository_behind_a_gitlink_runs_nothing(
    site: Site, sandbox: Sandbox
) -> None:
    root = site.workspace.root
    marker = site.root / "fsmonitor-ran"
    await run(
        site.bash(sandbox),
        "git init -q nested && git -C nested commit -q --allow-empty -m n && "
        f"git -C nested config core.fsmonitor 'touch {marker}; false' && "
        "git update-index --add --cacheinfo 160000,$(git -C nested rev-parse HEAD),nested",
    )
    host_git_status(root)
    assert not marker.exists()


async def test_a_broken_head_is_restored_so_the_workspace_never_becomes_a_bare_repository(
    site: Site, sandbox: Sandbox
) -> None:
    """A broken `.git/HEAD` makes git take the workspace for a bare repository."""
    root = site.workspace.root
    marker = site.root / "alias-ran"
    bash = site.bash(sandbox)
    await run(bash, "echo a > a.txt && git add a.txt && git commit -qm one")
    head = (root / ".git" / "HEAD").read_bytes()
    plant = (
        "cp -r .git/objects .git/refs . && cp .git/HEAD HEAD && "
        f"printf '[alias]\\n\\tst = !touch {marker}\\n' > config"
    )
    assert (await run(bash, plant)).startswith("exit code 0")
    for breaking in ("printf 'garbage\\n' > .git/HEAD", "rm .git/HEAD && mkdir .git/HEAD",
                     "rm .git/HEAD && ln -s ../HEAD .git/HEAD"):  # fmt: skip
        out = await run(bash, f"{breaking} && echo planted")
        assert "planted" in out, out
        assert "Baton restored" in out.splitlines()[-1], out
        assert (root / ".git" / "HEAD").read_bytes() == head
        # The operator's alias lookup reads .git/config again, not the planted one.
        host_git(root, "st")
        assert not marker.exists()
    # Broken by hand, the same plant does run the program: the attack is real.
    (root / ".git" / "HEAD").write_text("garbage\n")
    host_git(root, "st")
    assert marker.exists()
    (root / ".git" / "HEAD").write_bytes(head)
    # Changing branch is still git's business: a valid HEAD is left as it is.
    out = await run(bash, "git checkout -q -b feature && cat .git/HEAD")
    assert out == "exit code 0\nref: refs/heads/feature\n"


async def test_git_objects_and_refs_cannot_be_moved_away(site: Site, sandbox: Sandbox) -> None:
    """Without them `.git` is no repository, and the workspace could pass for a bare one."""
    root = site.workspace.root
    marker = site.root / "alias-ran"
    bash = site.bash(sandbox)
    # git still writes in both as usual.
    out = await run(bash, "echo a > a.txt && git add a.txt && git commit -qm one && "
                          "echo b > b.txt && git add b.txt && git commit -qm two && git gc -q "
                          "&& git log --format=%s")  # fmt: skip
    assert out == "exit code 0\ntwo\none\n"
    out = await run(
        bash,
        "mv .git/refs refs; mv .git/objects objects; rm -rf .git/refs; "
        "echo 'ref: refs/heads/main' > HEAD; "
        f"printf '[alias]\\n\\tst = !touch {marker}\\n' > config; ls .git",
    )
    assert "Device or resource busy" in out, out
    # mv copied and emptied them (the command may wreck the repository: it is the
    # workspace's), but `.git` stays a git directory, so git never reads `./config`.
    assert (root / ".git" / "refs").is_dir() and (root / ".git" / "objects").is_dir()
    assert host_git(root, "rev-parse", "--git-dir").stdout.strip() == ".git"
    host_git(root, "st")
    assert not marker.exists()


async def test_a_commondir_is_removed_even_when_another_call_made_it_first(
    site: Site, sandbox: Sandbox
) -> None:
    """Two calls at once: the one that finishes last must not leave the other's plant."""
    commondir = site.workspace.root / ".git" / "commondir"
    commondir.write_text("../evil\n")  # as a call running alongside would have
    out = await run(site.bash(sandbox), "true")
    assert not commondir.exists()
    assert "Baton removed" in out


async def test_a_head_broken_before_the_call_is_not_restored_to_its_broken_self(
    site: Site, sandbox: Sandbox
) -> None:
    head = site.workspace.root / ".git" / "HEAD"
    head.write_text("garbage\n")
    out = await run(site.bash(sandbox), "echo 'ref: refs/heads/main' > .git/HEAD")
    assert out == "exit code 0 (no output)"
    assert head.read_text() == "ref: refs/heads/main\n"


async def test_claude_codes_agent_files_and_skills_stay_unchanged_the_rest_of_claude_not(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """Baton runs `.claude/agents/` and `.claude/skills/` as its own: even an approved
    command cannot plant or change one there; `.claude/settings.json` stays writable."""
    root = tmp_path / "ws"
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / ".claude" / "agents" / "reviewer.md").write_text("---\ndescription: r\n---\nr\n")
    (root / ".claude" / "skills" / "pdf").mkdir(parents=True)
    (root / ".claude" / "skills" / "pdf" / "SKILL.md").write_text("---\nname: pdf\n---\n")
    bash = Bash(Workspace(root), sandbox=sandbox)
    before = {name: tree(root / ".claude" / name) for name in ("agents", "skills")}
    for command in (
        "echo evil > .claude/agents/x.md",
        "echo evil >> .claude/agents/reviewer.md",
        "rm -rf .claude/skills/pdf",
        "mv .claude/agents .claude/a && mkdir .claude/agents && echo x > .claude/agents/x.md",
        "mv .claude .c && mkdir -p .claude/agents && echo evil > .claude/agents/x.md",
    ):
        await run(bash, command)
    assert {name: tree(root / ".claude" / name) for name in before} == before
    assert not (root / ".c").exists() and not (root / ".claude" / "a").exists()
    assert await run(bash, "echo '{}' > .claude/settings.json") == "exit code 0 (no output)"
    assert (root / ".claude" / "settings.json").read_text() == "{}\n"


async def test_two_replicas_on_one_workspace_keep_each_others_placeholders(
    tmp_path: Path,
) -> None:
    """Replicas share the workspaces volume. One replica's call ending must not remove
    a placeholder the other's running sandbox stands on: a mount point removed on the
    host is unmounted in the sandbox, which would let its command plant `.baton/`.
    (Two probed sandboxes are two replicas: each keeps its own count of placeholders.)"""
    root = tmp_path / "ws"
    root.mkdir()
    first = require(await Sandbox.probe(SandboxPolicy.for_workspace(root)))
    second = require(await Sandbox.probe(SandboxPolicy.for_workspace(root)))
    bash_a = Bash(Workspace(root), sandbox=first)
    bash_b = Bash(Workspace(root), sandbox=second)

    async def when(condition: Callable[[], bool]) -> None:
        for _ in range(1500):  # a file a command makes: nothing to wait on but polling
            if condition():
                return
            await asyncio.sleep(0.02)
        raise AssertionError("not within 30 s")

    waits_for = "while [ ! -e {0} ]; do sleep 0.02; done"
    a = asyncio.create_task(run(bash_a, "touch a-started; " + waits_for.format("a-go")))
    await when(lambda: (root / "a-started").exists())
    assert (root / ".baton").is_dir()  # A's placeholder
    b = asyncio.create_task(
        run(
            bash_b,
            "touch b-started; " + waits_for.format("b-go") + "; "
            "mkdir -p .baton/agents && echo evil > .baton/agents/x.md && echo PLANTED",
        )
    )
    await when(lambda: (root / "b-started").exists())
    (root / "a-go").touch()
    assert (await a).startswith("exit code 0")
    assert (root / ".baton").is_dir(), "A removed the placeholder B's sandbox stands on"
    (root / "b-go").touch()
    out = await b
    assert "PLANTED" not in out, out
    assert not (root / ".baton" / "agents").exists()
    # The last holder removes it.
    assert not (root / ".baton").exists()
