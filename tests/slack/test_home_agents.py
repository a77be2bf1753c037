"""App Home's agents laid out within Slack's limits, whatever the agent files say."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.slack.blocks import HOME_AGENT_BLOCKS, home_agents_blocks, home_view
from bot.slack.text import SECTION_TEXT_LIMIT, VIEW_BLOCKS_LIMIT

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=UTC)


def summary(workspaces: int, agents: int, line: str = "") -> str:
    lines = []
    for w in range(workspaces):
        lines.append(f"Agents in /srv/ws{w}: {agents}")
        lines += [f"• `agent-{a}` · builtin · tools: none · model: m {line}" for a in range(agents)]
        lines.append(f"⚠ refused /srv/ws{w}/.claude/agents/bad.md: {line}")
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("workspaces", "agents", "line"),
    [
        (1, 3, ""),
        (1, 100, "note " * 100),
        (1, 40, "&" * 2_000),  # each & grows five-fold when escaped
        (25, 30, "<!channel> " * 80),
        (200, 1, ""),
    ],
)
def test_every_section_fits_and_what_is_left_is_counted(
    workspaces: int, agents: int, line: str
) -> None:
    blocks = home_agents_blocks(summary(workspaces, agents, line))
    assert 1 <= len(blocks) <= HOME_AGENT_BLOCKS + 1
    texts = []
    for block in blocks:
        text = block["text"]["text"] if block["type"] == "section" else block["elements"][0]["text"]
        assert len(text) <= SECTION_TEXT_LIMIT
        texts.append(text)
    joined = "\n".join(texts)
    assert "<!channel>" not in joined
    shown = joined.count("• `agent-")
    if shown < workspaces * agents:
        left = blocks[-1]["elements"][0]["text"]
        assert left.startswith("… and ") and "`baton agents`" in left
        assert f"{workspaces * agents - shown:,} more agent" in left
    else:
        assert "… and " not in joined
    view = home_view(running=0, done=0, tasks=[], now=NOW, agents=summary(workspaces, agents))
    assert len(view["blocks"]) <= VIEW_BLOCKS_LIMIT


def test_no_agents_no_blocks() -> None:
    assert home_agents_blocks(None) == [] and home_agents_blocks("") == []
