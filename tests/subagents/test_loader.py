"""Agent files: parsing, validation, roots and precedence, shadowing, `baton agents`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import render_agents
from bot.errors import AgentDefinitionError
from bot.subagents import BUILTIN_AGENTS, AgentRegistry
from bot.subagents.loader import parse_agent_file, parse_agent_text
from bot.tools import ToolRegistry, Workspace, build_workspace_tools
from tests.conftest import make_settings

REPO_AGENTS = Path(__file__).resolve().parents[2] / "agents"


def agent_file(directory: Path, filename: str, frontmatter: str, body: str = "Do it well.") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(f"---\n{frontmatter}\n---\n{body}\n")
    return path


@pytest.mark.parametrize(
    "tools_line",
    ["tools: read_file, bash", "tools: [read_file, bash]", "tools:\n  - read_file\n  - bash"],
)
def test_list_fields_accept_a_yaml_list_or_a_comma_separated_string(
    tmp_path: Path, tools_line: str
) -> None:
    path = agent_file(tmp_path, "auditor.md", f"description: Audits.\n{tools_line}")
    definition = parse_agent_file(path)
    assert definition.tools == ("read_file", "bash")
    assert definition.name == "auditor"  # the file name supplies a missing name
    assert definition.source == str(path)
    assert definition.system_prompt == "Do it well."


def test_every_field_is_read(tmp_path: Path) -> None:
    path = agent_file(
        tmp_path,
        "x.md",
        "name: security-auditor\ndescription: Finds holes.\ntools: read_file, bash\n"
        "disallowed_tools: [bash]\nmodel: openai/gpt-4o\nmax_turns: 30\nskills: review, owasp",
        body="You audit.\n\nTwo paragraphs.",
    )
    d = parse_agent_file(path)
    assert (d.name, d.description, d.model, d.max_turns) == (
        "security-auditor",
        "Finds holes.",
        "openai/gpt-4o",
        30,
    )
    assert d.disallowed_tools == ("bash",) and d.skills == ("review", "owasp")
    assert d.system_prompt == "You audit.\n\nTwo paragraphs."


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("no frontmatter here", "no YAML frontmatter"),
        ("---\ndescription: x\n", "no YAML frontmatter"),
        ("---\n  description: [unclosed\n---\nbody", "not valid YAML"),
        ("---\n- a\n- b\n---\nbody", "must be a mapping"),
        ("---\nname: a/b\ndescription: x\n---\nbody", "name: must be lowercase"),
        ("---\nname: -lead\ndescription: x\n---\nbody", "name: must be lowercase"),
        ("---\nname: ok\n---\nbody", "description: Field required"),
        ("---\ndescription: x\n---\n   \n", "body (the system prompt)"),
        ("---\ndescription: x\nmax_turns: -1\n---\nbody", "max_turns"),
        ("---\ndescription: x\ntools: [1, 2]\n---\nbody", "tools"),
    ],
)
def test_invalid_files_say_why(text: str, reason: str) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        parse_agent_text(text, "agents/x.md", default_name="x")
    assert caught.value.source == "agents/x.md"
    assert reason in caught.value.reason


def test_what_was_refused_before_now_loads_with_a_note() -> None:
    unknown = parse_agent_text("---\ndescription: x\ntool: bash\n---\nbody", "x.md", "x")
    assert unknown.extra == {"tool": "bash"} and unknown.tools is None
    assert unknown.notes == ("unused keys kept: tool",)
    capitals = parse_agent_text("---\nname: Bad_Name\ndescription: x\n---\nbody", "x.md", "x")
    assert capitals.name == "bad_name"
    assert capitals.notes == ("name Bad_Name written as bad_name",)
    unclosed = parse_agent_text("---\ndescription: [unclosed\n---\nbody", "x.md", "x")
    assert unclosed.description == "[unclosed"
    assert unclosed.notes[0].startswith("description read as Claude Code reads it")


def test_precedence_workspace_then_agent_dirs_then_builtins(tmp_path: Path) -> None:
    workspace_root = tmp_path / ".baton" / "agents"
    team_root = tmp_path / "team"
    agent_file(workspace_root, "explore.md", "description: Workspace explore.")
    agent_file(team_root, "explore.md", "description: Team explore.")
    agent_file(team_root, "reviewer.md", "description: Team reviewer.")
    registry = AgentRegistry([workspace_root, team_root], BUILTIN_AGENTS)
    explore = registry.get("explore")
    assert explore is not None and explore.description == "Workspace explore."
    assert registry.get("reviewer") is not None
    assert registry.get("general-purpose") is not None
    shadowed = {(s.name, s.source, s.shadowed_by) for s in registry.shadowed}
    assert shadowed == {
        ("explore", str(team_root / "explore.md"), str(workspace_root / "explore.md")),
        ("explore", "builtin", str(workspace_root / "explore.md")),
    }


def test_an_invalid_file_is_skipped_and_does_not_reserve_its_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = tmp_path / "first"
    second = tmp_path / "second"
    broken = agent_file(first, "reviewer.md", "name: reviewer")  # no description
    agent_file(second, "reviewer.md", "description: The valid one.")
    registry = AgentRegistry([first, second], BUILTIN_AGENTS)
    reviewer = registry.get("reviewer")
    assert reviewer is not None and reviewer.description == "The valid one."
    assert [(i.path, "description" in i.reason) for i in registry.invalid] == [(str(broken), True)]
    assert registry.shadowed == ()
    assert str(broken) in caplog.text and "skipping agent file" in caplog.text


def test_the_registry_sees_files_added_and_fixed_after_start(tmp_path: Path) -> None:
    root = tmp_path / "agents"
    root.mkdir()
    registry = AgentRegistry([root], BUILTIN_AGENTS)
    assert registry.get("docs-writer") is None
    path = agent_file(root, "docs-writer.md", "name: docs-writer")
    assert registry.get("docs-writer") is None and len(registry.invalid) == 1
    path.write_text("---\ndescription: Writes docs.\n---\nWrite docs.\n")
    assert registry.get("docs-writer") is not None and registry.invalid == ()


def test_tools_are_narrowed_from_the_parent(workspace: Workspace) -> None:
    parent = build_workspace_tools(workspace)
    cases = [
        ("description: x", set(parent.names())),
        ("description: x\ntools: read_file, bash, web_fetch", {"read_file", "bash"}),
        ("description: x\ntools: read_file, bash\ndisallowed_tools: bash", {"read_file"}),
        (
            "description: x\ndisallowed_tools: bash, write_file",
            set(parent.names()) - {"bash", "write_file"},
        ),
        ("description: x\ntools: task, read_file", {"read_file"}),
    ]
    for frontmatter, expected in cases:
        definition = parse_agent_text(f"---\n{frontmatter}\n---\nbody", "x.md", "x")
        assert set(definition.resolve_tools(parent).names()) == expected, frontmatter
    assert definition.resolve_tools(ToolRegistry()).names() == []


def test_shipped_agents_are_valid_and_read_only() -> None:
    registry = AgentRegistry([REPO_AGENTS], BUILTIN_AGENTS)
    assert registry.invalid == ()
    for name in ("code-reviewer", "security-auditor"):
        definition = registry.get(name)
        assert definition is not None and definition.source.endswith(f"{name}.md")
        assert {"write_file", "edit_file"} <= set(definition.disallowed_tools)
        assert len(definition.system_prompt) > 500
    assert {"general-purpose", "explore"} <= set(registry.names())


def test_builtin_prompts_tell_the_child_it_has_no_other_context() -> None:
    for definition in BUILTIN_AGENTS:
        assert "cannot see its conversation" in definition.system_prompt
        assert "could not establish" in definition.system_prompt
    explore = next(d for d in BUILTIN_AGENTS if d.name == "explore")
    assert set(explore.tools) == {"read_file", "list_dir", "glob", "grep", "bash"}


def test_render_agents_lists_agents_invalid_files_and_shadowing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1")
    agent_file(settings.workspace / ".baton" / "agents", "explore.md", "description: Mine.")
    agent_file(tmp_path / "agents", "broken.md", "name: broken")
    agent_file(
        tmp_path / "agents", "tester.md",
        "description: Runs tests.\ntools: bash, read_file, web_fetch\nmodel: small-model\n"
        "max_turns: 7",
    )  # fmt: skip
    agent_file(
        tmp_path / "agents", "lead.md",
        "description: Leads.\nisolation: worktree\nmemory: project\n"
        "allowed_subagents: explore, tester",
    )  # fmt: skip
    report = render_agents(settings)
    lines = report.splitlines()
    tester = next(line for line in lines if line.startswith("tester"))
    assert (
        "read_file, bash" in tester
        and "small-model" in tester
        and tester.split()[-2:] == ["7", "-"]
    )
    lead = next(line for line in lines if line.startswith("lead"))
    assert lead.endswith("worktree; memory; delegates to explore, tester")
    assert "(unknown, ignored: web_fetch)" in tester
    explore = next(line for line in lines if line.startswith("explore"))
    assert ".baton/agents/explore.md" in explore
    assert "Invalid agent files (skipped):" in report
    assert "broken.md: description: Field required" in report
    assert "explore from builtin is shadowed by" in report


def test_baton_agents_command(tmp_path: Path) -> None:
    # A project directory of its own: the home directory is never a workspace.
    project = tmp_path / "project"
    project.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "bot", "agents"],
        cwd=project, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in ("general-purpose", "explore", "code-reviewer", "security-auditor"):
        assert name in result.stdout
