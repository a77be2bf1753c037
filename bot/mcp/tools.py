"""An MCP server's tool as a Baton tool: `mcp__<server>__<tool>`, the server's own
description and JSON schema, run by calling the server.

It is never read-only for the rules (a server's `readOnlyHint` is its own claim): it
runs without asking only when an allow rule names it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from mcp.types import Tool as RemoteTool
from pydantic import ConfigDict

from bot.tools.base import MCP_PREFIX, Tool, ToolArguments, ToolOutput

if TYPE_CHECKING:
    from bot.mcp.servers import McpServer

# Chat Completions' limits on a function: its name, and what we let a description be.
MAX_NAME = 64
MAX_DESCRIPTION = 2_000
# A schema larger than this (as JSON) would crowd every request: the tool is not offered.
MAX_SCHEMA_CHARS = 20_000
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class McpArguments(ToolArguments):
    """Whatever object the model sends: the server checks it against its schema."""

    model_config = ConfigDict(extra="allow")


def tool_name(server: str, remote: str) -> str:
    """`mcp__<server>__<remote>`, made a valid function name: other characters become
    `_`, and a name too long (or changed) ends with a short hash of the original, so two
    tools never share one."""
    name = f"{MCP_PREFIX}{server}__{remote}"
    if _NAME.fullmatch(name) and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(remote.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    return f"{cleaned[: MAX_NAME - 9]}_{digest}"


def usable_schema(remote: RemoteTool) -> dict[str, Any] | None:
    """The tool's input schema as a function's parameters; None if it cannot be one."""
    schema = remote.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None
    if len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARS:
        return None
    return {"type": "object", "properties": {}, **schema}


class McpTool(Tool):
    """One tool of a connected MCP server."""

    arguments = McpArguments
    read_only = False
    main_argument = None

    def __init__(self, server: McpServer, remote: RemoteTool, parameters: dict[str, Any]) -> None:
        self.server = server
        self.remote_name = remote.name
        self.name = tool_name(server.name, remote.name)  # type: ignore[misc]
        text = (remote.description or remote.title or "").strip() or "(no description)"
        self.description = text[:MAX_DESCRIPTION]  # type: ignore[misc]
        self.parameters = parameters

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def unruled_reason(self) -> str:
        return (
            f"{self.name} is a tool of the MCP server {self.server.name}: it runs without "
            "asking only when an allow rule names it"
        )

    async def run(self, args: McpArguments) -> ToolOutput:
        return await self.server.call(self.remote_name, args.model_dump())
