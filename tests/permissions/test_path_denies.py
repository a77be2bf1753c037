"""A deny rule on a file tool holds for the commands that name its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.engine import HookDecision
from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.tools import Workspace, build_workspace_tools

RULES = PermissionRules.parse(
    allow=["bash(cat *)", "bash(grep *)", "bash(ls*)", "bash(cp *)", "bash(echo *)", "read_file"],
    deny=["read_file(**/appsettings*)", "write_file(generated/**)", "list_dir(private/**)"],
)


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    (root / "config").mkdir(parents=True)
    (root / "config" / "appsettings.Production.json").write_text("{}")
    (root / "appsettings.json").write_text("{}")
    (root / "generated").mkdir()
    (root / "private" / "x").mkdir(parents=True)
    (root / "README.md").write_text("# repo\n")
    (root / "link.json").symlink_to("appsettings.json")
    return Workspace(root)


def decide(workspace: Workspace, tool: str, arguments: dict[str, str]) -> HookDecision:
    hook = PermissionHook(RULES, workspace)
    found = build_workspace_tools(workspace).get(tool)
    assert found is not None
    return hook.check(found, found.parse_arguments(json.dumps(arguments)))


@pytest.mark.parametrize(
    "command",
    [
        "cat appsettings.json",
        "cat ./appsettings.json",
        "cat config/appsettings.Production.json",
        "cat src/../appsettings.json",
        "cat link.json",
        "cat app*",
        "cat config/*.json",
        "cat README.md appsettings.json",
        "grep -n key appsettings.json",
        "grep --file=appsettings.json x",
        "cp README.md generated/out.txt",
        "echo x > generated/new.py",
        "echo x >> generated/new.py",
        "ls private/x",
        "xargs cat appsettings.json",
        "taskset -c 0 cat appsettings.json",
    ],
)
def test_a_command_naming_a_denied_file_is_denied(repo: Workspace, command: str) -> None:
    decision = decide(repo, "bash", {"command": command})
    assert decision.action == "deny", (command, decision.reason)
    assert "the rule deny:" in decision.reason


def test_a_word_that_only_looks_like_the_pattern_asks(repo: Workspace) -> None:
    decision = decide(repo, "bash", {"command": "grep -rn appsettings ."})
    assert decision.action == "ask"
    assert "may name a file the rule deny: read_file(**/appsettings*) forbids" in decision.reason


@pytest.mark.parametrize(
    "command", ["cat README.md", "grep -rn key config", "ls generated", "cp README.md notes.md"]
)
def test_other_files_stay_allowed(repo: Workspace, command: str) -> None:
    assert decide(repo, "bash", {"command": command}).action == "allow", command


def test_the_file_tools_keep_their_own_denies(repo: Workspace) -> None:
    assert decide(repo, "read_file", {"path": "appsettings.json"}).action == "deny"
    assert decide(repo, "read_file", {"path": "README.md"}).action == "allow"
