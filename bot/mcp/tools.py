"""An MCP server's tool as a Baton tool: `mcp__<server>__<tool>`, the server's own
description and JSON schema, run by calling the server.

It is never read-only for the rules (a server's `readOnlyHint` is its own claim): it
runs without asking only when an allow rule names it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Protocol

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from mcp_types import Tool as RemoteTool
from pydantic import ConfigDict

from bot.tools.base import MCP_PREFIX, Tool, ToolArguments, ToolOutput

# Chat Completions' limits on a function: its name, and what we let a description be.
MAX_NAME = 64
MAX_DESCRIPTION = 2_000
# A schema larger than this (as JSON) would crowd every request: the tool is not offered.
MAX_SCHEMA_CHARS = 20_000
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class ToolServer(Protocol):
    """What a tool needs of its server (`bot.mcp.servers.McpServer`): its name, and a
    call to one of its tools."""

    name: str

    async def call(self, tool: str, arguments: dict[str, object]) -> ToolOutput:
        """The tool's result; a `ToolError` saying why when it cannot be called."""
        ...


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


def usable_schema(remote: RemoteTool) -> tuple[dict[str, Any] | None, str]:
    """The tool's input schema as a function's parameters, or None and why it cannot be
    one. A schema the provider would refuse would fail every request that offers it."""
    schema = remote.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None, "its input schema is not a JSON object schema"
    try:
        size = len(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError):
        return None, "its input schema is not plain JSON"
    if size > MAX_SCHEMA_CHARS:
        return None, f"its input schema is too large ({size:,} characters)"
    try:
        validators.validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        return None, f"its input schema is not valid JSON Schema ({exc.message[:200]})"
    return {"type": "object", "properties": {}, **schema}, ""


class McpTool(Tool):
    """One tool of a connected MCP server."""

    arguments = McpArguments
    read_only = False
    main_argument = None

    def __init__(self, server: ToolServer, remote: RemoteTool, parameters: dict[str, Any]) -> None:
        self.server = server
        self.remote_name = remote.name
        self.name = tool_name(server.name, remote.name)  # type: ignore[misc]
        text = (remote.description or remote.title or "").strip() or "(no description)"
        self.description = text[:MAX_DESCRIPTION]  # type: ignore[misc]
        self.parameters = parameters
        # What offering it costs every request, in characters (name, text, schema).
        self.size = len(self.name) + len(self.description) + len(json.dumps(parameters))

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
