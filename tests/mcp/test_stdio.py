"""stdio MCP servers: listed, called, and contained by the sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from bot.config import McpServerConfig
from bot.errors import ToolError
from bot.mcp import McpServers
from bot.mcp.stderr import StderrCapture
from bot.sandbox import Sandbox
from tests.mcp.conftest import DEMO, HERE, make_server, started, stdio_config, until

# A file of the repository outside the paths the demo server is given.
OUTSIDE = HERE.parents[1] / "pyproject.toml"


async def test_a_stdio_server_offers_its_tools_with_its_descriptions_and_schemas(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    server = make_server("tracker", stdio_config(), tmp_path)
    group = await started([server], sandbox)
    try:
        assert server.status().state == "up"
        tools = {tool.name: tool for tool in group.tools()}
        assert "mcp__tracker__search_issues" in tools
        schema = tools["mcp__tracker__add"].schema()["function"]
        assert schema["description"] == "Add two integers."
        assert schema["parameters"]["properties"]["a"]["type"] == "integer"
        assert schema["parameters"]["required"] == ["a"]
        output = await tools["mcp__tracker__add"].run(
            tools["mcp__tracker__add"].parse_arguments('{"a": 40}')
        )
        assert output.text == "42"
    finally:
        await group.close()


async def test_the_server_gets_its_env_and_path_home_lang_and_nothing_of_batons(
    tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Baton's own process environment, as the SDK would read it too.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-baton-secret-value")
    monkeypatch.setenv("DATABASE_URL", "postgresql://baton:db-password@db/baton")
    environ = {
        "PATH": "/opt/baton/bin:/usr/bin",
        "HOME": "/root",
        "LANG": "en_US.UTF-8",
        "OPENAI_API_KEY": "sk-baton-secret-value",
        "SLACK_BOT_TOKEN": "xoxb-baton-secret",
        "TRACKER_TOKEN": "tracker-token-123",
        "USER": "baton",
    }
    config = stdio_config(env={"TOKEN": "${TRACKER_TOKEN}", "LOG_LEVEL": "info"})
    server = make_server(
        "tracker",
        config,
        tmp_path,
        environ=environ,
        secrets=["sk-baton-secret-value", "xoxb-baton-secret"],
    )
    group = await started([server], sandbox)
    try:
        seen = json.loads((await server.call("environment", {})).text)
        # The sandbox's first process (bwrap's) keeps the environment bwrap started with.
        first = (await server.call("read_path", {"path": "/proc/1/environ"})).text
    finally:
        await group.close()
    assert "HOME=/home/sandbox" in first  # it could be read: the check below means something
    for secret in ("sk-baton-secret-value", "xoxb-baton-secret", "db-password"):
        assert secret not in first
        assert secret not in json.dumps(seen)
    assert seen.pop("PWD", None) in (None, "/home/sandbox")
    # Python's own locale coercion (PEP 538) in the server, not Baton's environment.
    assert seen.pop("LC_CTYPE", None) in (None, "C.UTF-8")
    assert seen == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/home/sandbox",
        "LANG": "en_US.UTF-8",
        "TOKEN": "tracker-token-123",
        "LOG_LEVEL": "info",
    }


async def test_a_value_holding_a_baton_secret_is_refused(tmp_path: Path, sandbox: Sandbox) -> None:
    # The name is refused when the config is read; a value is refused whatever its name.
    config = stdio_config(env={"TOKEN": "${INNOCENT}"})
    server = make_server(
        "tracker",
        config,
        tmp_path,
        environ={"INNOCENT": "sk-baton-secret-value"},
        secrets=["sk-baton-secret-value"],
    )
    group = await started([server], sandbox)
    await group.close()
    status = server.status()
    assert status.state == "failed"
    assert "holds one of Baton's own secrets" in (status.reason or "")
    assert "sk-baton-secret-value" not in (status.reason or "")


async def test_an_unset_variable_fails_the_server_saying_which(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    server = make_server("tracker", stdio_config(env={"T": "${NOT_SET_ANYWHERE}"}), tmp_path)
    group = await started([server], sandbox)
    await group.close()
    assert server.status().state == "failed"
    assert "${NOT_SET_ANYWHERE}, which is not set" in (server.status().reason or "")
    assert group.tools() == []


async def test_the_server_sees_only_its_paths_read_only(tmp_path: Path, sandbox: Sandbox) -> None:
    outside = OUTSIDE
    server = make_server("tracker", stdio_config(), tmp_path)
    group = await started([server], sandbox)
    try:
        own = (await server.call("read_path", {"path": str(DEMO)})).text
        hidden = (await server.call("read_path", {"path": str(outside)})).text
        shadow = (await server.call("read_path", {"path": "/etc/shadow"})).text
        written = (await server.call("write_path", {"path": str(DEMO), "text": "evil"})).text
        scratch = (await server.call("write_path", {"path": "/tmp/x", "text": "ok"})).text
    finally:
        await group.close()
    assert "build_demo" in own
    assert hidden == "cannot read: FileNotFoundError"
    assert shadow == "cannot read: FileNotFoundError"  # the sandbox's /etc is Baton's
    assert written.startswith("cannot write: ")
    assert "build_demo" in DEMO.read_text()
    assert scratch == "written"  # its own empty /tmp, gone with it


async def test_batons_state_and_config_stay_hidden_inside_a_given_path(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "baton.db").write_text("the database")
    config_file = tmp_path / "baton.yaml"
    config_file.write_text("model: secret-model")
    (tmp_path / "data.txt").write_text("server data")
    config = stdio_config(paths=(*stdio_config().paths, tmp_path))
    server = make_server("tracker", config, tmp_path / "logs", masked=[state, config_file])
    (tmp_path / "logs").mkdir()
    group = await started([server], sandbox)
    try:
        data = (await server.call("read_path", {"path": str(tmp_path / "data.txt")})).text
        database = (await server.call("read_path", {"path": str(state / "baton.db")})).text
        yaml = (await server.call("read_path", {"path": str(config_file)})).text
    finally:
        await group.close()
    assert data == "server data"
    assert "the database" not in database
    assert "secret-model" not in yaml


async def test_no_network_unless_the_config_says_so(tmp_path: Path, sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    closed = make_server("closed", stdio_config(), tmp_path)
    open_ = make_server("open", stdio_config(network=True), tmp_path)
    group = await started([closed, open_], sandbox)
    try:
        refused = (await closed.call("connect", {"host": "127.0.0.1", "port": port})).text
        reached = (await open_.call("connect", {"host": "127.0.0.1", "port": port})).text
    finally:
        await group.close()
        listener.close()
    assert refused.startswith("cannot connect")
    assert reached == "connected"


async def test_tool_errors_timeouts_and_odd_content(tmp_path: Path, sandbox: Sandbox) -> None:
    server = make_server("tracker", stdio_config(timeout_s=0.5), tmp_path)
    group = await started([server], sandbox)
    try:
        with pytest.raises(ToolError, match=r"fail \(MCP server tracker\): .*failed because boom"):
            await server.call("fail", {"reason": "boom"})
        with pytest.raises(ToolError, match=r"did not answer within 0\.5 s"):
            await server.call("slow", {"seconds": 5})
        # The session is still usable after a timeout.
        assert (await server.call("add", {"a": 1, "b": 1})).text == "2"
        with pytest.raises(ToolError, match=r"Unknown tool|unknown"):
            await server.call("no_such_tool", {})
        with pytest.raises(ToolError, match=r"validation|Field required|missing"):
            await server.call("add", {"b": "not a number"})
        media = await server.call("media", {})
        image = await server.call("image", {})
    finally:
        await group.close()
    assert media.text.splitlines() == [
        "some text",
        "[resource file:///notes.txt]",
        "the notes",
        "[audio (audio/wav, 8 bytes): not passed to the model]",
    ]
    assert len(image.images) == 1
    assert image.images[0].media_type == "image/png"
    assert "shown below" in image.text


async def test_a_server_that_dies_is_reported_and_reconnected(
    tmp_path: Path, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server("tracker", stdio_config(), tmp_path)
    group = await started([server], sandbox)
    try:
        first = (await server.call("instance", {})).text
        with pytest.raises(ToolError, match=r"closed the connection|failed"):
            await server.call("exit_now", {})
        await until(lambda: server.state == "failed")
        assert group.tools() == []  # not offered while it is down
        with pytest.raises(ToolError, match=r"not connected"):
            await server.call("instance", {})
        await until(lambda: server.state == "up")
        assert (await server.call("instance", {})).text != first
    finally:
        await group.close()
    assert any("MCP server tracker is not available" in r.message for r in caplog.records)


async def test_a_server_that_cannot_start_is_reported_once_and_retried(
    tmp_path: Path, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    config = stdio_config(command=(sys.executable, str(HERE / "missing_server.py")))
    server = make_server("broken", config, tmp_path)
    group = McpServers([server])
    group.start(sandbox)
    try:
        await asyncio.wait_for(group.settle(), 30)
        tries = []
        # Several attempts go by (the retry delays are short in the tests).
        for _ in range(3):
            await until(lambda: server.state == "failed")
            tries.append(server.reason)
            await asyncio.sleep(0.3)
    finally:
        await group.close()
    assert group.tools() == []
    reason = server.status().reason or ""
    assert "missing_server.py" in reason  # its stderr, quoted
    warnings = [r for r in caplog.records if "MCP server broken is not available" in r.message]
    assert len(warnings) == 1
    with pytest.raises(ToolError, match=r"MCP server broken is not connected"):
        await server.call("add", {"a": 1})


async def test_no_sandbox_no_stdio_server(tmp_path: Path) -> None:
    server = make_server("tracker", stdio_config(), tmp_path)
    group = await started([server], Sandbox.unavailable("bwrap is not installed"))
    await group.close()
    assert server.status().state == "failed"
    assert "only in the OS sandbox" in (server.status().reason or "")
    assert "bwrap is not installed" in (server.status().reason or "")


async def test_a_missing_path_is_named(tmp_path: Path, sandbox: Sandbox) -> None:
    config = stdio_config(paths=(tmp_path / "nowhere",))
    server = make_server("tracker", config, tmp_path)
    group = await started([server], sandbox)
    await group.close()
    assert f"{tmp_path / 'nowhere'} does not exist" in (server.status().reason or "")


async def test_a_flood_on_stderr_is_capped_on_disk_and_its_last_line_quoted(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    flood = "import sys; sys.stderr.write('x' * 3_000_000 + '\\nlast words\\n'); sys.exit(1)"
    config = stdio_config(command=(sys.executable, "-c", flood))
    server = make_server("noisy", config, tmp_path)
    group = await started([server], sandbox)
    await group.close()
    assert "(its stderr: " in (server.status().reason or "")
    assert "last words" in (server.status().reason or "")
    log = (tmp_path / "mcp-noisy.log").read_bytes()
    assert 1024 * 1024 <= len(log) < 1024 * 1024 + 200
    assert log.endswith(b"[Baton: the rest of this start's stderr is not kept]\n")


def hostile(*args: str) -> McpServerConfig:
    return stdio_config(command=(sys.executable, str(HERE / "hostile_server.py"), *args))


async def test_a_hostile_server_cannot_freeze_break_or_poison_the_tool_list(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    server = make_server("evil", hostile(), tmp_path)
    group = await started([server], sandbox)
    try:
        status = server.status()
        assert status.tools == ("mcp__evil__ok", "mcp__evil__redos", "mcp__evil__garble")
        assert any("bad: its input schema is not valid JSON Schema" in s for s in status.skipped)
        # An output schema whose pattern would take ages to match is never evaluated.
        async with asyncio.timeout(5):
            assert (await server.call("redos", {})).text == "redos"
        # A line of invalid UTF-8 does not stop the reader: the answer after it arrives.
        assert (await server.call("garble", {})).text == "garble"
        assert (await server.call("ok", {})).text == "fine"
        assert server.state == "up" and server.status().reason is None
    finally:
        await group.close()


async def test_a_crash_loop_is_reported_once_and_waits_longer_each_time(
    tmp_path: Path, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.mcp.servers")
    # Up for a moment each time: that is no recovery, so the waits keep growing to the
    # last one (an hour here) instead of starting over at the first.
    server = make_server("loop", hostile("crash"), tmp_path, retry_delays=(0.05, 0.1, 3600))
    group = await started([server], sandbox)

    def ups() -> int:
        return sum("MCP server loop is up" in r.message for r in caplog.records)

    try:
        await until(lambda: ups() == 3 and server.state == "failed", within=30)
        await asyncio.sleep(0.5)  # the next try would come within 0.1 s had it started over
        assert ups() == 3
    finally:
        await group.close()
    warnings = [r for r in caplog.records if "MCP server loop is not available" in r.message]
    assert len(warnings) == 1


async def test_batons_config_in_a_system_directory_is_hidden_too(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    # Every sandbox shows /etc and /opt: a baton.yaml kept there is masked in them.
    if not os.access("/opt", os.W_OK):
        pytest.skip("/opt is not writable here")
    directory = Path(tempfile.mkdtemp(prefix="baton-test-", dir="/opt"))
    try:
        config_file = directory / "baton.yaml"
        config_file.write_text("mcp_servers: {wiki: {headers: {X: literal-token}}}")
        server = make_server("tracker", stdio_config(), tmp_path, masked=[config_file])
        group = await started([server], sandbox)
        try:
            seen = (await server.call("read_path", {"path": str(config_file)})).text
        finally:
            await group.close()
    finally:
        shutil.rmtree(directory)
    assert "literal-token" not in seen


async def test_a_path_inside_batons_state_is_refused(tmp_path: Path, sandbox: Sandbox) -> None:
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    config = stdio_config(paths=(*stdio_config().paths, state / "logs"))
    server = make_server("tracker", config, tmp_path, masked=[state])
    group = await started([server], sandbox)
    await group.close()
    assert server.status().state == "failed"
    assert f"lies in {state}, which is Baton's own" in (server.status().reason or "")


async def test_what_all_servers_tools_take_of_each_request_is_bounded(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    first = make_server("first", stdio_config(), tmp_path)
    second = make_server("second", stdio_config(), tmp_path)
    group = McpServers([first, second], schema_budget=2_500)
    group.start(sandbox)
    try:
        await asyncio.wait_for(group.settle(), 30)
        offered = group.tools()
        statuses = {s.name: s for s in group.status()}
    finally:
        await group.close()
    assert 0 < sum(t.size for t in offered) <= 2_500
    assert {t.server.name for t in offered} == {"first"}
    assert any("over the limit" in note for note in statuses["second"].skipped)


@pytest.mark.parametrize("yields", [0, 1, 2, 3])
async def test_a_start_cancelled_while_its_log_opens_leaves_no_file_open(
    tmp_path: Path, yields: int
) -> None:
    """A group closing while a server starts cancels the start at any point of opening
    its stderr; the log file opened in a thread is closed all the same (a leaked file
    is an unraisable ResourceWarning, which these tests turn into an error)."""
    capture = StderrCapture(tmp_path / "mcp-x.log")
    opening = asyncio.ensure_future(capture.open())
    for _ in range(yields):
        await asyncio.sleep(0)
    opening.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await opening
    await capture.close()
    await asyncio.sleep(0.2)  # the thread's open lands after close
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        gc.collect()
    assert capture._log is None
