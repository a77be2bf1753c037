"""What a sandboxed command can read and write, checked against the real bwrap."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from bot.sandbox import Sandbox, SandboxPolicy
from bot.tools.shell import Bash, BashArgs
from bot.tools.workspace import Workspace
from tests.sandbox.conftest import Site, make_site


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
    assert await run(bash, "wc -c < /etc/shadow") == "exit code 0\n0\n"


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
