"""A site's agents as the composition root builds them: the roots in order, baton.yaml's
aliases reaching every file, tools that name nothing here said, `baton agents`' notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import render_agents
from bot.config import McpServerConfig
from bot.sites import agent_registry
from bot.subagents import AgentRegistry
from bot.tools import Workspace, build_workspace_tools
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI
from tests.subagents.harness import make_baton


def agent_file(directory: Path, name: str, frontmatter: str, body: str = "You work.") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.md").write_text(f"---\n{frontmatter}\n---\n{body}\n")


async def site_agents(tmp_path: Path, fake: FakeOpenAI, **settings: object) -> AgentRegistry:
    baton = await make_baton(tmp_path, fake, **settings)
    await baton.close()
    return baton.default_site.agents


async def test_baton_agents_beat_claude_agents_which_beat_agent_dirs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    workspace = tmp_path / "ws"
    agent_file(workspace / ".baton" / "agents", "reviewer", "description: Baton's.")
    agent_file(workspace / ".claude" / "agents", "reviewer", "description: Claude's.")
    agent_file(workspace / ".claude" / "agents", "tester", "description: Claude's tester.")
    agent_file(tmp_path / "agents", "tester", "description: Shipped tester.")
    agents = await site_agents(tmp_path, fake_llm)
    reviewer, tester = agents.get("reviewer"), agents.get("tester")
    assert reviewer is not None and reviewer.description == "Baton's."
    assert tester is not None and tester.description == "Claude's tester."
    shadowed = {(s.source, s.shadowed_by) for s in agents.shadowed}
    assert (str(workspace / ".claude/agents/reviewer.md"), reviewer.source) in shadowed
    assert (str(tmp_path / "agents/tester.md"), tester.source) in shadowed


async def test_agent_dirs_naming_the_workspaces_claude_agents_reads_them_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The set-up a team tries first: `agent_dirs` pointed at `.claude/agents`. Its files
    load once, and none is said to shadow itself."""
    claude = tmp_path / "ws" / ".claude" / "agents"
    agent_file(claude, "code-reviewer", "description: Reviews.\ntools: Read, Grep")
    agents = await site_agents(tmp_path, fake_llm, agent_dirs=(claude, tmp_path / "agents"))
    reviewer = agents.get("code-reviewer")
    assert reviewer is not None and reviewer.source == str(claude / "code-reviewer.md")
    assert agents.shadowed == ()
    assert all("shadow" not in note for note in reviewer.notes)


async def test_baton_yamls_aliases_reach_the_sites_agents_in_any_case(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    claude = tmp_path / "ws" / ".claude" / "agents"
    agent_file(claude, "fetcher", "description: x\ntools: WebFetch, Read\nmodel: Sonnet")
    agent_file(claude, "thinker", "description: x\nmodel: OPUS")
    agent_file(claude, "quick", "description: x\nmodel: haiku")
    agent_file(claude, "house", "description: x\nmodel: house-model")
    agent_file(claude, "planner", "description: x\nmodel: opusplan")
    agents = await site_agents(
        tmp_path,
        fake_llm,
        tool_aliases={"webfetch": "grep"},
        model_aliases={"sonnet": "big-one", "Opus": "o3", "HAIKU": "small-one",
                       "house-model": "provider/house-7b"},
    )  # fmt: skip
    models = {name: agents.get(name) for name in ("fetcher", "thinker", "quick", "house")}
    assert {name: d.model for name, d in models.items() if d} == {
        "fetcher": "big-one", "thinker": "o3", "quick": "small-one", "house": "provider/house-7b",
    }  # fmt: skip
    fetcher = models["fetcher"]
    assert fetcher is not None and fetcher.tools == ("grep", "read_file")
    assert "model Sonnet → big-one (model_aliases)" in fetcher.notes
    assert not any("no tool of that name" in note for note in fetcher.notes)
    # One of Claude Code's aliases nobody mapped is never sent: the parent's model runs.
    planner = agents.get("planner")
    assert planner is not None and planner.model is None
    assert any("opusplan" in note and "parent's model" in note for note in planner.notes)


def test_a_sites_agents_are_told_which_tools_are_not_here(tmp_path: Path) -> None:
    """The site's own tools and the configured MCP servers' are known; others are said.
    (Built as `build_site` builds it, without starting the MCP servers.)"""
    settings = make_settings(
        tmp_path, "http://127.0.0.1:9/v1",
        mcp_servers={"web": McpServerConfig(url="http://127.0.0.1:9/mcp")},
    )  # fmt: skip
    agent_file(
        settings.workspace / ".claude" / "agents",
        "lead",
        "description: x\ntools: Read, TeamCreate, mcp__jira__search, mcp__web__fetch",
    )
    tools = build_workspace_tools(Workspace(settings.workspace), environment={})
    agents = agent_registry(settings, settings.workspace, tool_names=tools.names())
    lead = agents.get("lead")
    assert lead is not None
    assert any(n.startswith("tool TeamCreate: Baton has no tool of that name") for n in lead.notes)
    assert any(n.startswith("tool mcp__jira__search: no such MCP server") for n in lead.notes)
    assert not any("mcp__web__fetch" in note for note in lead.notes)


@pytest.mark.parametrize("spelling", ["WebFetch", "WEBFETCH"])
def test_baton_agents_says_what_loading_changed_for_each_agent(
    tmp_path: Path, spelling: str
) -> None:
    settings = make_settings(
        tmp_path, "http://127.0.0.1:9/v1", tool_aliases={spelling: "read_file"},
        model_aliases={"sonnet": "big-one"},
    )  # fmt: skip
    agent_file(
        settings.workspace / ".claude" / "agents",
        "reviewer",
        "description: x\ntools: Read, WebFetch, TeamCreate\nmodel: sonnet\ncolor: red\n"
        "skills: [pdf]",
    )
    report = render_agents(settings)
    section = report.split("What loading mapped, left out or kept unused:\n", 1)[1]
    reviewer = section.split("\n\n", 1)[0]
    assert reviewer.splitlines()[0].startswith("  reviewer (")
    for said in (
        "- tools: Read → read_file, WebFetch → read_file (tool_aliases)",
        "- tool TeamCreate: Baton has no tool of that name",
        "- model sonnet → big-one (model_aliases)",
        "- unused keys kept: color",
        "- skills pdf: its tools leave out the skill tool",
    ):
        assert said in reviewer, reviewer
