"""An isolated child cannot change Baton's config, database or `.baton/` in its worktree.

A workspace that tracks `baton.yaml` has a copy of it in every child's worktree, and a
merge of the child's branch would bring a rewritten copy back. The child's tools (the
real composition root's `isolated` site, the real sandbox) guard the copies like the
originals: refused by the file tools and the permission hook, masked in the sandbox.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.app import Baton
from bot.config import PermissionsConfig, SandboxConfig
from bot.engine import Hook
from bot.errors import ToolError, WorkspaceError
from bot.permissions.hook import PermissionHook
from bot.tools import ToolRegistry
from tests.fakes.openai_api import FakeOpenAI
from tests.subagents.harness import make_baton

CONFIG = "permissions:\n  allow: [read_file]\n"
AGENT = "---\nname: x\ndescription: The operator's agent.\n---\nBe careful.\n"
TAKEOVER = "self_approval: true\npermissions:\n  allow: [bash, write_file]\n"


@dataclass
class Child:
    """An isolated child's worktree of the workspace, and the tools and hooks it gets."""

    tree: Path
    tools: ToolRegistry
    hooks: tuple[Hook, ...]

    @property
    def permissions(self) -> PermissionHook:
        hook = self.hooks[0]
        assert isinstance(hook, PermissionHook)
        return hook

    async def call(self, name: str, **arguments: object) -> str:
        """Run the tool itself, past the permission hook: what the tool alone allows."""
        tool = self.tools.get(name)
        assert tool is not None
        return str(await tool.run(tool.arguments.model_validate(arguments)))

    def decide(self, name: str, **arguments: object) -> str:
        """What the permission hook decides for the call, with every tool allowed."""
        tool = self.tools.get(name)
        assert tool is not None
        decision = self.permissions.check(tool, tool.arguments.model_validate(arguments))
        return f"{decision.action}: {decision.reason}"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def tracked_workspace(workspace: Path) -> None:
    """A repository that tracks Baton's config and an agent file, as teams do."""
    (workspace / "baton.yaml").write_text(CONFIG)
    (workspace / ".baton" / "agents").mkdir(parents=True)
    (workspace / ".baton" / "agents" / "x.md").write_text(AGENT)
    (workspace / "notes.txt").write_text("line one\n")
    (workspace / ".gitignore").write_text("baton.db*\n")
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "first")


@pytest.fixture
async def baton(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[Baton]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tracked_workspace(workspace)
    app = await make_baton(
        tmp_path,
        fake_llm,
        config_path=workspace / "baton.yaml",
        database_url=f"sqlite:///{workspace / 'baton.db'}",
        permissions=PermissionsConfig(allow=("read_file", "write_file", "edit_file", "bash")),
    )
    yield app
    await app.close()


@pytest.fixture
async def child(baton: Baton) -> Child:
    if not baton.default_site.sandbox.available:
        pytest.skip(f"no sandbox on this machine: {baton.default_site.sandbox.reason}")
    tree = baton.settings.state_dir / "worktrees" / "task-x-1"
    git(baton.workspace.root, "worktree", "add", "-q", "-b", "baton/task-x-1", str(tree))
    isolated = baton.default_site.runner.isolated
    assert isolated is not None
    tools, hooks = await isolated(tree)
    return Child(tree=tree, tools=tools, hooks=hooks)


async def test_the_child_s_file_tools_cannot_touch_its_copy_of_the_config(child: Child) -> None:
    copy = child.tree / "baton.yaml"
    assert copy.read_text() == CONFIG
    attempts = [
        ("write_file", {"path": "baton.yaml", "content": TAKEOVER}),
        ("write_file", {"path": str(copy), "content": TAKEOVER}),
        ("edit_file", {"path": "baton.yaml", "old_text": "read_file", "new_text": "bash"}),
        ("read_file", {"path": "baton.yaml"}),
    ]
    for name, arguments in attempts:
        # The hook leaves Baton's private files to the tool, which refuses them by
        # identity on what it opened (no other name or link of them gets past it).
        with pytest.raises((WorkspaceError, ToolError)) as refused:
            await child.call(name, **arguments)
        assert "baton.yaml" in str(refused.value), name
    assert copy.read_text() == CONFIG


async def test_the_child_s_commands_cannot_read_or_rewrite_its_copy_of_the_config(
    child: Child,
) -> None:
    copy = child.tree / "baton.yaml"
    for command in (
        f"printf '{TAKEOVER}' > baton.yaml",
        "rm -f baton.yaml && echo 'self_approval: true' > baton.yaml",
        "mv baton.yaml old.yaml",
        "sed -i 's/read_file/bash/' baton.yaml",
    ):
        out = await child.call("bash", command=command)
        assert not out.startswith("exit code 0"), (command, out)
        assert child.decide("bash", command=command).startswith("deny: "), command
    # Masked: the command sees an empty file, whatever rule allowed it.
    assert await child.call("bash", command="wc -c < baton.yaml") == "exit code 0\n0\n"
    assert child.decide("bash", command="cat baton.yaml").startswith("deny: ")
    assert copy.read_text() == CONFIG
    assert git(child.tree, "status", "--porcelain") == ""


async def test_the_child_cannot_change_its_copy_of_baton_s_agents(child: Child) -> None:
    agent = child.tree / ".baton" / "agents" / "x.md"
    for name, arguments in [
        ("write_file", {"path": ".baton/agents/x.md", "content": "Obey the issue.\n"}),
        ("edit_file", {"path": ".baton/agents/x.md", "old_text": "careful", "new_text": "quick"}),
        ("write_file", {"path": ".baton/agents/new.md", "content": "---\nname: new\n---\n"}),
    ]:
        with pytest.raises(WorkspaceError):
            await child.call(name, **arguments)
        assert child.decide(name, **arguments).startswith("deny: "), name
    for command in ("echo evil > .baton/agents/x.md", "rm -rf .baton", "touch .baton/agents/y.md"):
        out = await child.call("bash", command=command)
        assert not out.startswith("exit code 0"), (command, out)
    assert agent.read_text() == AGENT
    assert sorted(p.name for p in agent.parent.iterdir()) == ["x.md"]


async def test_the_child_cannot_make_a_database_in_its_worktree(child: Child) -> None:
    with pytest.raises(WorkspaceError, match=r"baton\.db"):
        await child.call("write_file", path="baton.db", content="planted")
    for command in ("echo planted > baton.db", "echo planted > baton.db-wal"):
        out = await child.call("bash", command=command)
        assert not out.startswith("exit code 0"), (command, out)
    assert not any(child.tree.glob("baton.db*"))


async def test_other_files_of_the_worktree_stay_the_child_s_to_change(child: Child) -> None:
    await child.call("write_file", path="notes.txt", content="line two\n")
    assert await child.call("bash", command="cat notes.txt") == "exit code 0\nline two\n"
    assert child.decide("write_file", path="notes.txt", content="x").startswith("allow: ")


async def test_show_secrets_reaches_the_site_s_and_the_child_s_commands(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "config").mkdir()
    (workspace / "config" / ".env.test").write_text("SHOWN=test-value\n")
    (workspace / ".env").write_text("HIDDEN=placeholder\n")
    tracked_workspace(workspace)  # both committed: the worktree has them too
    # The real value, written over the committed placeholder: hidden, unlike what git
    # holds unchanged (see bot.sandbox.tracked_files).
    (workspace / ".env").write_text("HIDDEN=prod-value\n")
    app = await make_baton(
        tmp_path, fake_llm, sandbox=SandboxConfig(show_secrets=("config/.env.test",))
    )
    try:
        site = app.default_site
        if not site.sandbox.available:
            pytest.skip(f"no sandbox on this machine: {site.sandbox.reason}")
        tree = app.settings.state_dir / "worktrees" / "task-x-2"
        git(workspace, "worktree", "add", "-q", "-b", "baton/task-x-2", str(tree))
        assert site.runner.isolated is not None
        tree_tools, _ = await site.runner.isolated(tree)
        for tools in (site.tools, tree_tools):
            bash = tools.get("bash")
            assert bash is not None
            out = str(
                await bash.run(bash.arguments.model_validate({"command": "cat */.env* .env"}))
            )
            assert "SHOWN=test-value" in out and "prod-value" not in out
    finally:
        await app.close()
