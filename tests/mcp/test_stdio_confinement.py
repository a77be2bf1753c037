"""stdio MCP servers are confined like commands: the seccomp filter and the minimal /etc."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

import pytest

from bot.sandbox import Sandbox
from tests.mcp.conftest import HERE, make_server, started, stdio_config

MODES = stdio_config(command=(sys.executable, str(HERE / "modes_server.py")))


async def test_a_server_cannot_set_a_setuid_or_setgid_bit(tmp_path: Path, sandbox: Sandbox) -> None:
    if sandbox.seccomp_filter is None:
        pytest.skip(f"no seccomp filter here: {sandbox.reason}")
    server = make_server("modes", MODES, tmp_path)
    group = await started([server], sandbox)
    try:
        assert server.status().state == "up", server.status().reason
        plain = (await server.call("set_mode", {"mode": 0o755})).text
        setuid = (await server.call("set_mode", {"mode": 0o4755})).text
        setgid = (await server.call("set_mode", {"mode": 0o2755})).text
        # Still serving after the refusals.
        again = (await server.call("set_mode", {"mode": 0o640})).text
    finally:
        await group.close()
    assert plain == "mode 755"
    assert setuid == "refused: errno 1"  # EPERM, from the filter
    assert setgid == "refused: errno 1"
    assert again == "mode 640"


async def test_without_a_filter_the_server_runs_as_commands_do_and_it_is_said(
    tmp_path: Path, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    """Where libseccomp is missing the sandbox has no filter: the server starts anyway."""
    sandbox.seccomp_filter = None
    sandbox.reason += "; no seccomp filter against setuid files (test)"
    server = make_server("modes", MODES, tmp_path)
    with caplog.at_level(logging.WARNING, logger="bot.mcp.launch"):
        group = await started([server], sandbox)
        try:
            setuid = (await server.call("set_mode", {"mode": 0o4755})).text
        finally:
            await group.close()
    # Nothing refuses the bit then (the file is in the server's own /tmp, gone with it).
    assert setuid == "mode 4755"
    warned = [
        r.getMessage() for r in caplog.records if "without a seccomp filter" in r.getMessage()
    ]
    assert warned and "no seccomp filter against setuid files" in warned[0]


async def test_a_server_sees_the_minimal_etc(tmp_path: Path, sandbox: Sandbox) -> None:
    server = make_server("tracker", stdio_config(), tmp_path)
    group = await started([server], sandbox)
    try:
        seen = {
            name: (await server.call("read_path", {"path": f"/etc/{name}"})).text
            for name in ("passwd", "group", "hosts", "hostname", "shadow", "fstab")
        }
        written = (await server.call("write_path", {"path": "/etc/x", "text": "x"})).text
    finally:
        await group.close()
    users = [line.split(":")[0] for line in seen["passwd"].splitlines()]
    assert users[:2] == ["root", "nobody"]
    assert set(users) <= {"root", "nobody", "sandbox"}
    assert seen["hostname"] == "sandbox\n"
    host = socket.gethostname()
    if host not in ("localhost", "sandbox"):  # else there is nothing to tell apart
        assert host not in seen["hosts"] and host not in seen["hostname"]
    assert seen["shadow"] == "cannot read: FileNotFoundError"
    assert seen["fstab"] == "cannot read: FileNotFoundError"
    assert written.startswith("cannot write: ")
