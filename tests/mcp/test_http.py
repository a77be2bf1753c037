"""Streamable HTTP MCP servers: Baton calls them itself, with the configured headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import McpServerConfig
from bot.errors import ToolError
from bot.sandbox import Sandbox
from tests.mcp.conftest import HttpDemo, make_server, started, until
from tests.ports import free_port


async def test_listing_calling_and_headers_with_variables(
    tmp_path: Path, http_demo: HttpDemo
) -> None:
    config = McpServerConfig(
        url=http_demo.url,
        headers={"Authorization": "Bearer ${TRACKER_TOKEN}", "X-Team": "platform"},
    )
    server = make_server("tracker", config, tmp_path, environ={"TRACKER_TOKEN": "tok-42"})
    # No sandbox is needed: Baton makes these calls itself.
    group = await started([server], Sandbox.unavailable("none here"))
    try:
        assert server.status().state == "up"
        assert server.status().transport == "http"
        assert "mcp__tracker__create_issue" in {tool.name for tool in group.tools()}
        assert (await server.call("add", {"a": 2, "b": 3})).text == "5"
        seen = (await server.call("header", {"name": "authorization"})).text
        team = (await server.call("header", {"name": "x-team"})).text
        with pytest.raises(ToolError, match=r"failed because over http"):
            await server.call("fail", {"reason": "over http"})
    finally:
        await group.close()
    assert seen == "Bearer tok-42"
    assert team == "platform"


async def test_a_server_that_stops_is_reported_and_its_calls_fail_clearly(
    tmp_path: Path, http_demo: HttpDemo
) -> None:
    server = make_server("tracker", McpServerConfig(url=http_demo.url), tmp_path)
    group = await started([server], Sandbox.unavailable("none here"))
    try:
        await http_demo.stop()
        with pytest.raises(ToolError, match=r"MCP server tracker"):
            await server.call("add", {"a": 1})
        await until(lambda: server.state == "failed")
        assert group.tools() == []
        with pytest.raises(ToolError, match=r"not connected"):
            await server.call("add", {"a": 1})
    finally:
        await group.close()


async def test_nothing_listening_fails_the_server_with_the_reason(tmp_path: Path) -> None:
    port = free_port()
    config = McpServerConfig(url=f"http://127.0.0.1:{port}/mcp", headers={"X-Token": "${TOK}"})
    server = make_server("tracker", config, tmp_path, environ={"TOK": "secret-tok"})
    group = await started([server], Sandbox.unavailable("none here"))
    await group.close()
    status = server.status()
    assert status.state == "failed"
    assert "ConnectError" in (status.reason or "") or "connect" in (status.reason or "").lower()
    assert "secret-tok" not in (status.reason or "")
