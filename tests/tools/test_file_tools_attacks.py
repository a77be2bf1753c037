"""The file tools as an attacker calls them: every way out, every alias of Baton's files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.errors import ToolError, WorkspaceError
from bot.tools import Tool, Workspace, build_workspace_tools
from bot.tools.base import person_approved

WRITE_ARGS = {
    "write_file": '"content": "pwned"',
    "edit_file": '"old_text": "outside", "new_text": "pwned"',
}


async def call(workspace: Workspace, name: str, arguments: str) -> str:
    tool = build_workspace_tools(workspace).get(name)
    assert isinstance(tool, Tool)
    return await tool.run(tool.parse_arguments(arguments))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a file no tool may see."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("outside secret\n")
    return directory


@pytest.fixture
def approved() -> Iterator[None]:
    token = person_approved.set(True)
    yield
    person_approved.reset(token)


@pytest.fixture
def baton_files(tmp_path: Path) -> Workspace:
    """A legacy install: the database and the config inside the workspace."""
    root = tmp_path / "repo"
    (root / ".baton" / "agents").mkdir(parents=True)
    (root / "baton.yaml").write_text("allow: [read_file]\n")
    (root / "baton.db").write_text("SQLite format 3 database\n")
    return Workspace(
        root,
        protected_files=[root / "baton.yaml"],
        private_files=[root / "baton.db", root / "baton.db-wal", root / "baton.db-shm"],
    )


def plant_links(root: Path, outside: Path) -> list[str]:
    """Symlinks out of the workspace in every shape; returns the paths that use them."""
    (root / "sub").mkdir()
    os.symlink(outside / "secret.txt", root / "abs_file")
    os.symlink("../outside/secret.txt", root / "rel_file")
    os.symlink(outside, root / "abs_dir")
    os.symlink("../../outside", root / "sub" / "rel_dir")
    os.symlink("abs_file", root / "chain1")
    os.symlink("sub/../chain1", root / "chain2")
    os.symlink("/proc/self/environ", root / "environ")
    os.symlink(f"{root}/../outside/secret.txt", root / "abs_dotdot")
    return [
        "abs_file",
        "rel_file",
        "abs_dir/secret.txt",
        "sub/rel_dir/secret.txt",
        "chain1",
        "chain2",
        "environ",
        "abs_dotdot",
        f"{outside}/secret.txt",
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        f"{root}/../outside/secret.txt",
    ]


async def test_no_path_out_is_read_or_listed(workspace: Workspace, outside: Path) -> None:
    for path in plant_links(workspace.root, outside):
        with pytest.raises(WorkspaceError, match=r"outside the workspace|escapes"):
            await call(workspace, "read_file", f'{{"path": "{path}"}}')
        with pytest.raises(WorkspaceError):
            await call(workspace, "grep", f'{{"pattern": "secret", "path": "{path}"}}')
        with pytest.raises(WorkspaceError):
            workspace.hard_link_count(path)
    for path in ("abs_dir", "sub/rel_dir", "/", "..", str(outside)):
        with pytest.raises(WorkspaceError):
            await call(workspace, "list_dir", f'{{"path": "{path}"}}')
        with pytest.raises(WorkspaceError):
            await call(workspace, "glob", f'{{"pattern": "*", "path": "{path}"}}')
    assert await call(workspace, "grep", '{"pattern": "secret|HOME|PATH"}') == (
        "no lines match 'secret|HOME|PATH'"
    )
    assert "secret.txt" not in await call(workspace, "glob", '{"pattern": "**/*"}')


async def test_no_path_out_is_written(workspace: Workspace, outside: Path) -> None:
    paths = plant_links(workspace.root, outside)
    paths += ["abs_dir/new.txt", "sub/rel_dir/new.txt", "../outside/new.txt"]
    for name, extra in WRITE_ARGS.items():
        for path in paths:
            with pytest.raises(WorkspaceError):
                await call(workspace, name, f'{{"path": "{path}", {extra}}}')
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "outside secret\n"


async def test_symlinks_that_stay_inside_keep_working(workspace: Workspace) -> None:
    root = workspace.root
    (root / "real").mkdir()
    (root / "real" / "a.txt").write_text("alpha\n")
    os.symlink("real", root / "rel_alias")
    os.symlink(root / "real", root / "abs_alias")
    os.symlink("rel_alias/a.txt", root / "file_alias")
    os.symlink("../real/a.txt", root / "real" / "up_and_back")
    for path in ("rel_alias/a.txt", "abs_alias/a.txt", "file_alias", "real/up_and_back"):
        assert "alpha" in await call(workspace, "read_file", f'{{"path": "{path}"}}')
    out = await call(workspace, "write_file", '{"path": "abs_alias/b.txt", "content": "beta"}')
    assert out == "Created real/b.txt (4 bytes)"
    await call(
        workspace, "edit_file", '{"path": "file_alias", "old_text": "alpha", "new_text": "A"}'
    )
    assert (root / "real" / "a.txt").read_text() == "A\n"
    assert os.readlink(root / "file_alias") == "rel_alias/a.txt"
    assert workspace.resolve("rel_alias/x") == root / "real" / "x"


async def test_a_fifo_neither_hangs_nor_is_used(workspace: Workspace) -> None:
    os.mkfifo(workspace.root / "pipe")
    (workspace.root / "ok.txt").write_text("find me\n")
    with pytest.raises(ToolError, match="not a regular file"):
        await call(workspace, "read_file", '{"path": "pipe"}')
    with pytest.raises(ToolError, match="not a regular file"):
        await call(workspace, "write_file", '{"path": "pipe", "content": "x"}')
    assert await call(workspace, "grep", '{"pattern": "find"}') == "ok.txt:1: find me"
    assert await call(workspace, "grep", '{"pattern": "x", "path": "pipe"}') == "no lines match 'x'"


async def test_a_hard_link_to_an_outside_file_needs_a_person(
    workspace: Workspace, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace.root / "innocent.txt")
    assert workspace.hard_link_count("innocent.txt") == 2
    assert workspace.hard_link_count("missing.txt") == 0
    assert workspace.hard_link_count(".") == 0
    with pytest.raises(ToolError, match=r"has 2 hard links.*reading it needs a person's approval"):
        await call(workspace, "read_file", '{"path": "innocent.txt"}')
    for name, extra in WRITE_ARGS.items():
        with pytest.raises(ToolError, match=r"has 2 hard links.*changing it needs"):
            await call(workspace, name, f'{{"path": "innocent.txt", {extra}}}')
    assert (outside / "secret.txt").read_text() == "outside secret\n"
    out = await call(workspace, "grep", '{"pattern": "secret"}')
    assert "outside secret" not in out
    assert "skipped 1 file(s) with several hard links" in out and "innocent.txt" in out


async def test_a_person_may_approve_a_hard_linked_file(
    workspace: Workspace, outside: Path, approved: None
) -> None:
    os.link(outside / "secret.txt", workspace.root / "shared.txt")
    assert "outside secret" in await call(workspace, "read_file", '{"path": "shared.txt"}')
    await call(
        workspace, "edit_file", '{"path": "shared.txt", "old_text": "secret", "new_text": "x"}'
    )
    assert (outside / "secret.txt").read_text() == "outside x\n"


async def test_baton_database_is_out_of_reach_under_every_name(baton_files: Workspace) -> None:
    root = baton_files.root
    (root / "docs").mkdir()
    os.link(root / "baton.db", root / "docs" / "notes.txt")
    os.symlink("../baton.db", root / "docs" / "db-link")
    for path in (
        "baton.db",
        "./docs/../baton.db",
        "docs/notes.txt",
        "docs/db-link",
        f"{root}/baton.db",
    ):
        with pytest.raises(WorkspaceError, match="Baton's own database"):
            await call(baton_files, "read_file", f'{{"path": "{path}"}}')
        with pytest.raises(WorkspaceError, match="Baton's own database"):
            baton_files.resolve(path)
    for name, extra in WRITE_ARGS.items():
        for path in ("baton.db", "docs/notes.txt", "docs/db-link", "baton.db-wal"):
            with pytest.raises(WorkspaceError, match="Baton's own database"):
                await call(baton_files, name, f'{{"path": "{path}", {extra}}}')
    assert not (root / "baton.db-wal").exists()
    assert "baton.db" not in await call(baton_files, "list_dir", "{}")
    assert await call(baton_files, "list_dir", '{"path": "docs"}') == "db-link@"
    found = (await call(baton_files, "glob", '{"pattern": "**/*"}')).splitlines()
    assert not any("baton.db" in f or "notes" in f or "db-link" in f for f in found)
    out = await call(baton_files, "grep", '{"pattern": "SQLite"}')
    assert out == "no lines match 'SQLite'"
    with pytest.raises(WorkspaceError, match="Baton's own database"):
        await call(baton_files, "grep", '{"pattern": "SQLite", "path": "docs/notes.txt"}')


async def test_the_config_and_baton_dir_are_readable_never_writable(
    baton_files: Workspace, approved: None
) -> None:
    root = baton_files.root
    (root / ".baton" / "agents" / "x.md").write_text("agent\n")
    os.symlink("baton.yaml", root / "cfg-link")
    os.symlink(".baton", root / "sneaky")
    os.link(root / "baton.yaml", root / "cfg-hard")
    os.link(root / ".baton" / "agents" / "x.md", root / "agent-hard")
    assert "allow" in await call(baton_files, "read_file", '{"path": "cfg-link"}')
    blocked = [
        "baton.yaml",
        "cfg-link",
        "cfg-hard",
        "agent-hard",
        ".baton/agents/x.md",
        ".baton/../.baton/agents/x.md",
        "./.baton/agents/new.md",
        "sneaky/agents/evil.md",
        "sneaky/../.baton/skills/s.md",
        f"{root}/.baton/agents/y.md",
    ]
    # Even a person's approval (set by the fixture) does not open these for writing.
    for name, extra in WRITE_ARGS.items():
        for path in blocked:
            with pytest.raises(WorkspaceError, match="protected"):
                await call(baton_files, name, f'{{"path": "{path}", {extra}}}')
    assert (root / "baton.yaml").read_text() == "allow: [read_file]\n"
    assert sorted(os.listdir(root / ".baton" / "agents")) == ["x.md"]
    assert not (root / ".baton" / "skills").exists()
    for path in ("cfg-hard", "agent-hard", "sneaky/agents/x.md"):
        assert baton_files.is_protected(baton_files.resolve(path))


async def test_a_workspace_reached_through_a_symlink(tmp_path: Path, outside: Path) -> None:
    real = tmp_path / "real-ws"
    real.mkdir()
    os.symlink(real, tmp_path / "ws-link")
    workspace = Workspace(tmp_path / "ws-link")
    (real / "a.txt").write_text("alpha\n")
    os.symlink(f"{tmp_path}/ws-link/a.txt", real / "via-link")
    for path in ("a.txt", f"{tmp_path}/ws-link/a.txt", f"{real}/a.txt", "via-link"):
        assert "alpha" in await call(workspace, "read_file", f'{{"path": "{path}"}}')
    with pytest.raises(WorkspaceError):
        await call(
            workspace, "read_file", f'{{"path": "{tmp_path}/ws-link/../outside/secret.txt"}}'
        )
    out = await call(
        workspace, "write_file", f'{{"path": "{tmp_path}/ws-link/b.txt", "content": "b"}}'
    )
    assert out == "Created b.txt (1 bytes)"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("a\x00b", "NUL byte"),
        ("", "empty"),
        ("x" * 300, "too long"),
        ("a/" * 3000, "characters long"),
        ("loop1", "too many symbolic links"),
    ],
)
async def test_odd_paths_are_clear_errors(workspace: Workspace, path: str, message: str) -> None:
    os.symlink("loop2", workspace.root / "loop1")
    os.symlink("loop1", workspace.root / "loop2")
    for name in ("read_file", "write_file"):
        tool = build_workspace_tools(workspace).get(name)
        assert tool is not None
        args = {"path": path} if name == "read_file" else {"path": path, "content": "x"}
        with pytest.raises(WorkspaceError, match=message):
            await tool.run(tool.arguments.model_validate(args))


async def test_glob_never_walks_out_or_loops(workspace: Workspace, outside: Path) -> None:
    root = workspace.root
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("")
    os.symlink(outside, root / "pkg" / "out")
    os.symlink("..", root / "pkg" / "up")
    (outside / "evil.py").write_text("")
    assert (await call(workspace, "glob", '{"pattern": "**/*.py"}')).splitlines() == ["pkg/a.py"]
    assert (
        await call(workspace, "glob", '{"pattern": "pkg/out/*.py"}')
        == "no files match 'pkg/out/*.py'"
    )
    # A named component may pass through a link that stays inside.
    assert await call(workspace, "glob", '{"pattern": "pkg/up/pkg/*.py"}') == "pkg/up/pkg/a.py"
    with pytest.raises(ToolError, match="stay inside"):
        await call(workspace, "glob", f'{{"pattern": "{outside}/*"}}')


@pytest.mark.usefixtures("approved")
async def test_git_hooks_and_configuration_are_readable_never_writable(
    workspace: Workspace,
) -> None:
    """What makes git run programs for the next person stays as it is, approved or not."""
    git = workspace.root / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (git / "config").write_text("[core]\n\tbare = false\n")
    (git / "modules" / "lib").mkdir(parents=True)
    (git / "modules" / "lib" / "config").write_text("[core]\n")
    (workspace.root / "gh").symlink_to(".git/hooks")
    (workspace.root / "gc").symlink_to(".git/config")
    before = {p: p.read_bytes() for p in git.rglob("*") if p.is_file()}
    attempts = [
        ("edit_file", '{"path": ".git/config", "old_text": "[core]", '
                      '"new_text": "[core]\\n\\tfsmonitor = \\"touch /tmp/x\\""}'),
        ("write_file", '{"path": ".git/hooks/post-checkout", "content": "#!/bin/sh\\n"}'),
        ("write_file", '{"path": "gh/pre-commit", "content": "#!/bin/sh\\n"}'),
        ("write_file", '{"path": "gc", "content": "[core]\\n"}'),
        ("write_file", '{"path": ".git/commondir", "content": "../evil\\n"}'),
        ("write_file", '{"path": ".git/HEAD", "content": "garbage\\n"}'),
        ("write_file", '{"path": ".git/config.worktree", "content": "[core]\\n"}'),
        ("write_file", '{"path": ".git/modules/lib/config", "content": "[core]\\n"}'),
        ("write_file", '{"path": ".git/worktrees/x/gitdir", "content": "/tmp\\n"}'),
        ("write_file", '{"path": "./src/../.git/hooks/../config", "content": "x"}'),
    ]  # fmt: skip
    for name, arguments in attempts:
        with pytest.raises(WorkspaceError, match="git's hooks and configuration"):
            await call(workspace, name, arguments)
    assert {p: p.read_bytes() for p in git.rglob("*") if p.is_file()} == before
    assert not (git / "commondir").exists() and not (git / "worktrees").exists()
    assert "bare = false" in await call(workspace, "read_file", '{"path": ".git/config"}')
    # The rest of .git is git's own working space, like the work tree.
    assert "Created" in await call(
        workspace, "write_file", '{"path": ".git/info/exclude", "content": "*.log\\n"}'
    )
