"""A team's Claude Code agent files, in `.claude/agents/`, run in Slack as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import ALICE, SlackHarness, start_harness, until

REVIEWER_MARK = "TEAM-REVIEWER-7731"
# As Claude Code's wizard writes it: a description strict YAML refuses (": " and quotes
# inside a plain value), Claude Code's tool names, its model alias, keys Baton ignores.
DESCRIPTION = (
    'Use this agent when the user asks: "review my change". Examples: <example>Context: '
    'a pull request is ready. user: "review it" assistant: "I\'ll use the code-reviewer '
    'agent"</example>'
)
TEAM_REVIEWER = f"""---
name: code-reviewer
description: {DESCRIPTION}
tools: Read, Grep, Glob, Bash, WebFetch
model: sonnet
color: red
---
You are the team's code reviewer. {REVIEWER_MARK}
"""


def is_reviewer(request: RecordedRequest) -> bool:
    return REVIEWER_MARK in json.dumps(request.messages[:1])


def team_workspace(tmp_path: Path) -> None:
    """The team's reviewer in `.claude/agents/`, and one of the same name further down
    the roots (in `agent_dirs`), which loses to it."""
    workspace = tmp_path / "ws"
    (workspace / ".claude" / "agents").mkdir(parents=True)
    (workspace / ".claude" / "agents" / "code-reviewer.md").write_text(TEAM_REVIEWER)
    (workspace / "app.py").write_text("print('hello')\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "code-reviewer.md").write_text(
        "---\ndescription: The shipped reviewer.\n---\nYou are the shipped reviewer.\n"
    )


async def test_a_teams_claude_code_reviewer_runs_with_mapped_tools_and_aliased_model(
    tmp_path: Path,
) -> None:
    team_workspace(tmp_path)
    aliases = {"sonnet": "provider-sonnet-large"}
    async for harness in start_harness(tmp_path, model_aliases=aliases):
        await review(harness)
        await assert_ran_as_the_team_wrote_it(harness)


async def review(harness: SlackHarness) -> None:
    """`@code-reviewer` reads app.py with Claude Code's `Read`, then answers."""
    replies = [
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "app.py"}, id="r1")]),
        Reply(text="Reviewed app.py: it prints hello. LGTM."),
    ]

    async def respond(request: RecordedRequest) -> Reply:
        assert is_reviewer(request), "only the team's reviewer should be asked"
        return replies.pop(0)

    harness.llm.responder = respond
    ts = await harness.mention("@code-reviewer review app.py")
    await until(lambda: "LGTM" in json.dumps(harness.thread("C1", ts)))
    await harness.settle()


async def assert_ran_as_the_team_wrote_it(harness: SlackHarness) -> None:
    requests = [r for r in harness.llm.requests if is_reviewer(r)]
    assert len(requests) == 2
    # The alias is never sent: the provider's model is.
    assert {r.model for r in requests} == {"provider-sonnet-large"}
    # Claude Code's tool names, as Baton's; WebFetch (no alias configured) left out.
    offered = set(requests[0].tools)
    assert {"read_file", "grep", "glob", "bash"} <= offered
    assert not offered & {"Read", "Grep", "Glob", "Bash", "WebFetch", "write_file", "edit_file"}
    # The mapped read_file really ran on the workspace.
    assert "print('hello')" in json.dumps(requests[1].messages)
    registry = harness.baton.default_site.agents
    reviewer = registry.get("code-reviewer")
    assert reviewer is not None and reviewer.source.endswith(".claude/agents/code-reviewer.md")
    assert any("WebFetch" in note and "tool_aliases" in note for note in reviewer.notes)
    assert any("sonnet → provider-sonnet-large" in note for note in reviewer.notes)
    assert reviewer.extra == {"color": "red"}
    shadowed = [s.shadowed_by for s in registry.shadowed if s.name == "code-reviewer"]
    assert shadowed == [reviewer.source]


async def test_an_unmapped_alias_runs_on_the_main_model_and_says_why(tmp_path: Path) -> None:
    team_workspace(tmp_path)
    async for harness in start_harness(tmp_path):
        await look_on_the_main_model(harness)


async def look_on_the_main_model(harness: SlackHarness) -> None:
    harness.llm.responder = lambda request: Reply(text="Looked. LGTM.")
    ts = await harness.mention("@code-reviewer look")
    await until(lambda: "LGTM" in json.dumps(harness.thread("C1", ts)))
    await harness.settle()
    models = {r.model for r in harness.llm.requests if is_reviewer(r)}
    assert models == {harness.baton.settings.model}
    reviewer = harness.baton.default_site.agents.get("code-reviewer")
    assert reviewer is not None and reviewer.model is None
    assert any("sonnet" in note and "parent's model" in note for note in reviewer.notes)


async def test_app_home_lists_each_agent_with_its_source_tools_model_and_notes(
    tmp_path: Path,
) -> None:
    team_workspace(tmp_path)
    claude = tmp_path / "ws" / ".claude" / "agents"
    (claude / "broken.md").write_text("no frontmatter at all\n")
    (tmp_path / "ws" / "AGENTS.md").write_text("Run `make test` before you answer.\n")
    async for harness in start_harness(tmp_path, model_aliases={"sonnet": "provider-sonnet"}):
        await open_home(harness)
        [call] = harness.slack.calls_to("views.publish")
        text = home_text(call.params["view"])
    workspace = tmp_path / "ws"
    assert f"Agents in {workspace.resolve()}: " in text and "1 agent file refused" in text
    assert "runs read AGENTS.md (35 bytes)" in text
    reviewer = next(line for line in text.splitlines() if "`code-reviewer`" in line)
    assert ".claude/agents/code-reviewer.md" in reviewer
    assert "tools: read_file, glob, grep, bash" in reviewer
    assert "model: provider-sonnet" in reviewer
    assert "model sonnet → provider-sonnet (model_aliases)" in reviewer
    assert "tool WebFetch: Baton has no such tool" in reviewer
    assert f"shadows {tmp_path / 'agents' / 'code-reviewer.md'}" in reviewer
    explore = next(line for line in text.splitlines() if "`explore`" in line)
    assert "builtin" in explore and "model: inherits: fake-model" in explore
    refused = next(line for line in text.splitlines() if line.startswith("⚠ refused"))
    assert ".claude/agents/broken.md" in refused and "no YAML frontmatter" in refused


def home_text(view: dict[str, Any]) -> str:
    """The text of App Home's agents, as people read it (each block's text, in order)."""
    texts = []
    for block in view["blocks"]:
        if block.get("type") == "section":
            texts.append(block["text"]["text"])
        elif block.get("type") == "context":
            texts += [element.get("text", "") for element in block["elements"]]
    return "\n".join(texts)


async def test_app_home_with_a_hundred_agents_stays_within_slacks_limits(tmp_path: Path) -> None:
    """100 agents, each with long notes, markup in what their files say, and a refused
    file whose name is markup: the view Slack gets is valid, nothing pings anyone, and
    what does not fit is counted, pointing to `baton agents`."""
    claude = tmp_path / "ws" / ".claude" / "agents"
    claude.mkdir(parents=True)
    tools = ", ".join(
        ["Read", "Grep", "<!channel>", "*bold*", "WebFetch"] + [f"T{i}" for i in range(60)]
    )
    for i in range(100):
        (claude / f"agent-{i:03d}.md").write_text(
            f"---\ndescription: Agent {i}.\ntools: {tools}\nmodel: sonnet\ncolor: red\n"
            f"hooks: x\n---\nYou are agent {i}.\n"
        )
    (claude / "<!here>.md").write_text("---\ndescription: x\n---\nbody\n")
    async for harness in start_harness(tmp_path):
        await open_home(harness)
        [call] = harness.slack.calls_to("views.publish")
        view = call.params["view"]
        # The fake refuses what Slack refuses; this one was published.
        assert harness.slack.home_views[ALICE]["blocks"] == view["blocks"]
    blocks = view["blocks"]
    assert len(blocks) <= 100
    for block in blocks:
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= 3_000
    published = json.dumps(view)
    assert "<!channel>" not in published and "<!here>" not in published
    assert "&lt;!channel&gt;" in published
    text = home_text(view)
    assert "Agents in " in text and ": 102 · 1 agent file refused" in text  # 2 built in
    listed = [line for line in text.splitlines() if line.startswith("• `")]
    assert 10 <= len(listed) < 100 and listed[0].startswith("• `agent-000`")
    left = next(line for line in text.splitlines() if line.startswith("… and "))
    assert f"{102 - len(listed):,} more agents" in left
    assert "refused agent file" in left and "`baton agents`" in left


async def open_home(harness: SlackHarness) -> None:
    event = {"type": "app_home_opened", "user": "UALICE", "channel": "D1", "tab": "home",
             "event_ts": "1.1"}  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    await until(lambda: bool(harness.slack.calls_to("views.publish")))


async def test_tasks_says_which_project_instructions_the_channels_runs_read(
    tmp_path: Path,
) -> None:
    async for harness in start_harness(tmp_path):
        await show_tasks_with_and_without_instructions(harness)


async def show_tasks_with_and_without_instructions(harness: SlackHarness) -> None:
    assert await harness.command() == 200
    await until(lambda: len(harness.slack.ephemerals) == 1)
    assert "Project instructions" not in json.dumps(harness.slack.ephemerals[0]["blocks"])
    (harness.baton.settings.workspace / "CLAUDE.md").write_text("Use tabs.\n")
    assert await harness.command() == 200
    await until(lambda: len(harness.slack.ephemerals) == 2)
    panel = json.dumps(harness.slack.ephemerals[1]["blocks"])
    assert "Project instructions: each run here reads CLAUDE.md (10 bytes)" in panel
