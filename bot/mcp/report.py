"""What people are told about the MCP servers: the `baton mcp` listing, App Home's line."""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.config import McpServerConfig
from bot.mcp.servers import ServerStatus
from bot.mcp.tools import McpTool

# What a server sends (descriptions, stderr in failure reasons) may hold terminal escapes.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
NONE_CONFIGURED = "No MCP servers are configured (mcp_servers in baton.yaml)."


def where(config: McpServerConfig) -> str:
    """How a server is reached, without its headers or env (they may hold tokens)."""
    if config.url is not None:
        return f"http {config.url.split('?')[0]}"
    assert config.command is not None
    return "stdio " + " ".join(config.command)


def listing(
    statuses: Sequence[ServerStatus],
    configs: dict[str, McpServerConfig],
    tools: Sequence[McpTool],
) -> str:
    """The `baton mcp` report: each server, how it is reached, its state and its tools."""
    if not statuses:
        return NONE_CONFIGURED + "\n"
    lines: list[str] = []
    for status in statuses:
        head = f"{status.name} ({where(configs[status.name])}): "
        if status.state == "up":
            lines.append(head + f"up, {len(status.tools)} tools")
            for tool in tools:
                if tool.server.name == status.name:
                    first = (tool.description.splitlines() or [""])[0]
                    lines.append(f"  {tool.name}  {first[:100]}")
            lines += [f"  not offered: {skipped}" for skipped in status.skipped]
        elif status.state == "failed":
            lines.append(head + f"FAILED: {status.reason}")
        else:
            lines.append(head + "still connecting")
    return "\n".join(_CONTROL.sub("?", line) for line in lines) + "\n"


def summary(statuses: Sequence[ServerStatus]) -> str | None:
    """One line for App Home (None without servers): which servers are up, which not and why."""
    if not statuses:
        return None
    parts = []
    for status in statuses:
        if status.state == "up":
            parts.append(f"{status.name}: up ({len(status.tools)} tools)")
        elif status.state == "failed":
            parts.append(f"{status.name}: not available ({status.reason})")
        else:
            parts.append(f"{status.name}: connecting")
    return "MCP servers · " + " · ".join(parts)
