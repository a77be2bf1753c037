"""Tools from MCP servers (`mcp_servers` in baton.yaml), named `mcp__<server>__<tool>`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from bot.config import Settings
from bot.mcp.launch import opener, secret_values
from bot.mcp.servers import McpServer, McpServers, ServerStatus
from bot.mcp.tools import McpTool
from bot.redaction import Redactor

__all__ = ["McpServer", "McpServers", "McpTool", "ServerStatus", "build_servers"]


def build_servers(
    settings: Settings,
    *,
    environ: Mapping[str, str] | None = None,
    masked: Sequence[Path] = (),
) -> McpServers:
    """The servers of `settings.mcp_servers`, not yet connected (`McpServers.start`).

    Baton's state directory and `masked` (its config and database files) stay hidden
    from stdio servers, even inside a path they are given. The first megabyte of each
    start's stderr goes to `<state dir>/logs/mcp-<name>.log`.
    """
    environment = dict(os.environ if environ is None else environ)
    log_dir = settings.state_dir / "logs"
    if settings.mcp_servers:
        log_dir.mkdir(parents=True, exist_ok=True)
    servers = []
    for name, config in settings.mcp_servers.items():
        servers.append(
            McpServer(
                name,
                config,
                open_transport=opener(
                    name,
                    config,
                    environ=environment,
                    secrets=settings.secret_values,
                    masked=[settings.state_dir, *masked],
                ),
                log_dir=log_dir,
                redact=Redactor([*settings.secret_values, *secret_values(config, environment)]),
            )
        )
    # Their tools may take about a seventh of the context window (at ~3 characters a
    # token) in every request.
    return McpServers(servers, schema_budget=settings.context_window * 3 // 7)
