"""The workspace jail: every way out is refused, protected paths are never writable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bot.errors import WorkspaceError
from bot.tools import Workspace, build_workspace_tools


def test_relative_and_absolute_paths_inside_resolve(workspace: Workspace) -> None:
    (workspace.root / "src").mkdir()
    assert workspace.resolve("src") == workspace.root / "src"
    assert (
        workspace.resolve(str(workspace.root / "src" / "new.py")) == workspace.root / "src/new.py"
    )
    assert workspace.resolve("src/../src/a.py") == workspace.root / "src/a.py"
    assert workspace.resolve(".") == workspace.root


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "absolute path outside the workspace"),
        ("../outside.txt", "escapes the workspace through '..'"),
        ("src/../../outside.txt", "escapes the workspace through '..'"),
        ("~/.bashrc", None),
    ],
)
def test_escapes_are_refused(workspace: Workspace, path: str, reason: str | None) -> None:
    if reason is None:
        # '~' is not expanded: it is a directory named '~' inside the workspace.
        assert workspace.resolve(path) == workspace.root / "~" / ".bashrc"
        return
    with pytest.raises(WorkspaceError, match=reason):
        workspace.resolve(path)


def test_symlinks_leading_out_are_refused(workspace: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key").write_text("s3cret")
    os.symlink(outside, workspace.root / "link")
    os.symlink(outside / "key", workspace.root / "keylink")
    os.symlink(tmp_path / "missing", workspace.root / "dangling")
    for path in ("link/key", "keylink", "link", "dangling"):
        with pytest.raises(WorkspaceError, match="through a symbolic link"):
            workspace.resolve(path)


def test_symlinks_inside_are_followed(workspace: Workspace) -> None:
    (workspace.root / "real").mkdir()
    os.symlink(workspace.root / "real", workspace.root / "alias")
    assert workspace.resolve("alias/x") == workspace.root / "real" / "x"


@pytest.mark.parametrize("path", ["", "   ", "a\x00b"])
def test_empty_and_nul_paths_are_refused(workspace: Workspace, path: str) -> None:
    with pytest.raises(WorkspaceError):
        workspace.resolve(path)


def test_protected_paths_are_readable_but_never_writable(
    workspace: Workspace, tmp_path: Path
) -> None:
    (workspace.root / ".baton" / "agents").mkdir(parents=True)
    assert workspace.resolve(".baton/agents/x.md")
    for path in (".baton", ".baton/agents/x.md", "./.baton/../.baton/skills/y.md"):
        with pytest.raises(WorkspaceError, match="protected"):
            workspace.resolve_for_write(path)
    os.symlink(workspace.root / ".baton", workspace.root / "sneaky")
    with pytest.raises(WorkspaceError, match="protected"):
        workspace.resolve_for_write("sneaky/agents/evil.md")


def test_claude_codes_agent_files_and_skills_are_readable_but_never_writable(
    workspace: Workspace,
) -> None:
    """Baton runs them as its own agents and skills: a planted one would steer later runs.
    The rest of .claude/ (settings, commands) stays the team's to change."""
    (workspace.root / ".claude" / "agents").mkdir(parents=True)
    assert workspace.resolve(".claude/agents/x.md")
    for path in (
        ".claude/agents/x.md",
        ".claude/skills/pdf/SKILL.md",
        ".claude/skills",
        "./.claude/../.claude/agents/y.md",
    ):
        with pytest.raises(WorkspaceError, match=r"\.claude/agents/ or \.claude/skills/"):
            workspace.resolve_for_write(path)
    os.symlink(workspace.root / ".claude", workspace.root / "sneaky")
    with pytest.raises(WorkspaceError, match=r"protected|agent files and skills"):
        workspace.resolve_for_write("sneaky/agents/evil.md")
    assert workspace.resolve_for_write(".claude/settings.json")


def test_the_config_file_inside_the_workspace_is_protected(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    config = root / "baton.yaml"
    workspace = Workspace(root, protected_files=[config])
    with pytest.raises(WorkspaceError, match="protected"):
        workspace.resolve_for_write("baton.yaml")
    os.symlink(config, root / "cfg-link")
    with pytest.raises(WorkspaceError, match="protected"):
        workspace.resolve_for_write("cfg-link")
    assert workspace.resolve_for_write("other.yaml") == root / "other.yaml"


def test_a_missing_workspace_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a directory"):
        Workspace(tmp_path / "nope")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/", "src"),
        ("src/./a.py", "src/a.py"),
        ("alias/../src/a.py", "src/a.py"),
        ("new/../src/a.py", "src/a.py"),
        ("deep/new/dir/x.txt", "deep/new/dir/x.txt"),
        ("up/a.py", "src/a.py"),
    ],
)
def test_paths_resolve_component_by_component(
    workspace: Workspace, path: str, expected: str
) -> None:
    (workspace.root / "src").mkdir()
    (workspace.root / "src" / "a.py").write_text("")
    os.symlink("src", workspace.root / "alias")
    os.symlink("src/../src", workspace.root / "up")
    assert workspace.resolve(path) == workspace.root / expected


@pytest.mark.parametrize(
    ("link", "reason"),
    [
        ("..", "through a symbolic link"),
        ("src/../..", "through a symbolic link"),
        ("/etc", "through a symbolic link"),
        ("a.txt/x", "not a directory"),
    ],
)
def test_links_that_climb_out_are_refused(workspace: Workspace, link: str, reason: str) -> None:
    (workspace.root / "src").mkdir()
    (workspace.root / "a.txt").write_text("")
    os.symlink(link, workspace.root / "bad")
    with pytest.raises(WorkspaceError, match=reason):
        workspace.resolve("bad/x")


def test_hard_link_count_reads_the_object(workspace: Workspace, tmp_path: Path) -> None:
    (workspace.root / "one.txt").write_text("")
    os.link(workspace.root / "one.txt", workspace.root / "two.txt")
    os.symlink("two.txt", workspace.root / "link")
    assert workspace.hard_link_count("one.txt") == 2
    assert workspace.hard_link_count("link") == 2
    assert workspace.hard_link_count("nothing") == 0
    assert workspace.hard_link_count(".") == 0
    os.symlink(tmp_path, workspace.root / "out")
    with pytest.raises(WorkspaceError, match="symbolic link"):
        workspace.hard_link_count("out/x")


def test_protection_follows_identity_not_name(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".baton").mkdir(parents=True)
    (root / "baton.yaml").write_text("")
    workspace = Workspace(root, protected_files=[root / "baton.yaml"])
    os.link(root / "baton.yaml", root / "copy.yaml")
    assert workspace.is_protected(workspace.resolve("copy.yaml"))
    with pytest.raises(WorkspaceError, match="protected"):
        workspace.resolve_for_write("copy.yaml")
    assert not workspace.is_protected(workspace.resolve("free.yaml"))


async def write(workspace: Workspace, path: str, content: str = "x\n") -> str:
    tool = build_workspace_tools(workspace).get("write_file")
    assert tool is not None
    return await tool.run(tool.parse_arguments(json.dumps({"path": path, "content": content})))


async def test_refusals_name_the_config_and_the_database_for_what_they_are(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    config, database = root / "baton.yaml", root / "baton.db"
    config.write_text("permissions: {}\n")
    database.write_text("SQLite format 3\n")
    os.link(config, root / "cfg-hard")
    os.symlink("baton.db", root / "db-link")
    # As the app builds it: the config is protected and, like the database, private.
    both = Workspace(root, protected_files=[config], private_files=[database, config])
    for path in ("baton.yaml", "./baton.yaml", "cfg-hard"):
        with pytest.raises(WorkspaceError) as refused:
            await write(both, path)
        assert str(refused.value) == f"{path!r} is Baton's configuration; no tool may use it"
        with pytest.raises(WorkspaceError, match="Baton's configuration"):
            both.resolve(path)
    for path in ("baton.db", "db-link"):
        with pytest.raises(WorkspaceError) as refused:
            await write(both, path)
        assert "Baton's own database" in str(refused.value), path
    # Protected only (readable, never writable): still named as the configuration.
    protected = Workspace(root, protected_files=[config])
    for path in ("baton.yaml", "cfg-hard"):
        with pytest.raises(WorkspaceError) as refused:
            await write(protected, path)
        assert "protected: it is Baton's configuration" in str(refused.value), path
    assert config.read_text() == "permissions: {}\n"


async def test_git_s_in_progress_state_is_never_written_by_a_tool(workspace: Workspace) -> None:
    git = workspace.root / ".git"
    (git / "rebase-merge").mkdir(parents=True)
    (git / "rebase-merge" / "git-rebase-todo").write_text("pick abc one\n")
    os.symlink(".git/rebase-merge", workspace.root / "todo-dir")
    for path in (
        ".git/rebase-merge/git-rebase-todo",
        "todo-dir/git-rebase-todo",
        ".git/rebase-apply/patch",
        ".git/sequencer/todo",
        "./src/../.git/sequencer/head",
    ):
        with pytest.raises(WorkspaceError) as refused:
            await write(workspace, path, "exec touch PWNED\n")
        assert "git's in-progress rebase, cherry-pick or revert state" in str(refused.value)
        assert workspace.is_protected(workspace.resolve(path))
    assert (git / "rebase-merge" / "git-rebase-todo").read_text() == "pick abc one\n"
    assert not (git / "rebase-apply").exists() and not (git / "sequencer").exists()
    # The hooks and config are still named as such.
    with pytest.raises(WorkspaceError, match="git's hooks and configuration"):
        await write(workspace, ".git/hooks/pre-commit")
    with pytest.raises(WorkspaceError, match=r"in \.baton/, Baton's own directory"):
        await write(workspace, ".baton/agents/x.md")
