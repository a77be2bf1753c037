"""`baton mcp`: the operator's listing of the servers, their tools and failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.mcp.conftest import DEMO, HERE

ROOT = HERE.parents[1]


def baton_mcp(tmp_path: Path, servers: dict[str, object]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ws").mkdir(exist_ok=True)
    config = tmp_path / "baton.yaml"
    config.write_text(yaml.safe_dump({"model": "m", "mcp_servers": servers}))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "BATON_CONFIG": str(config),
        "BATON_WORKSPACE": str(tmp_path / "ws"),
        "BATON_STATE_DIR": str(tmp_path / "state"),
        "TRACKER_TOKEN": "tok-from-env",
    }
    return subprocess.run(
        [sys.executable, "-m", "bot", "--log-level", "ERROR", "mcp"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.usefixtures("sandbox")
def test_lists_each_server_with_its_tools_and_exits_0_when_all_are_up(tmp_path: Path) -> None:
    demo = {
        "command": [sys.executable, str(DEMO)],
        "paths": [sys.prefix, sys.base_prefix, str(HERE)],
        "env": {"TOKEN": "${TRACKER_TOKEN}"},
    }
    done = baton_mcp(tmp_path, {"tracker": demo})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"tracker (stdio {sys.executable} {DEMO}): up, ")
    assert "  mcp__tracker__search_issues  Search the issue tracker." in lines
    assert "tok-from-env" not in done.stdout


def test_a_failing_server_is_named_with_its_reason_and_exits_1(tmp_path: Path) -> None:
    servers = {
        "wiki": {"command": ["/nonexistent/wiki-server"]},
        "tracker": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "${TRACKER_TOKEN}"}},
    }
    done = baton_mcp(tmp_path, servers)
    assert done.returncode == 1
    assert "wiki (stdio /nonexistent/wiki-server): FAILED: " in done.stdout
    assert "tracker (http http://127.0.0.1:9/mcp): FAILED: " in done.stdout
    assert "tok-from-env" not in done.stdout


def test_no_servers_configured(tmp_path: Path) -> None:
    done = baton_mcp(tmp_path, {})
    assert done.returncode == 0
    assert done.stdout == "No MCP servers are configured (mcp_servers in baton.yaml).\n"


def test_baton_agents_shows_mcp_tools_of_configured_servers_and_flags_others(
    tmp_path: Path,
) -> None:
    from bot.cli import render_agents
    from bot.config import McpServerConfig
    from tests.conftest import make_settings

    settings = make_settings(
        tmp_path, "http://127.0.0.1:9/v1", mcp_servers={"tracker": McpServerConfig(url="http://a")}
    )
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "triage.md").write_text(
        "---\nname: triage\ndescription: Triage.\n"
        "tools: read_file, mcp__tracker__*, mcp__wiki__search\n---\nbody\n"
    )
    line = next(x for x in render_agents(settings).splitlines() if x.startswith("triage"))
    assert "read_file + mcp__tracker__*, mcp__wiki__search (while its MCP server is up)" in line
    assert "(unknown, ignored: mcp__wiki__search)" in line
