"""Real MCP servers for the tests: the demo server over stdio (in the real sandbox) and
over Streamable HTTP (uvicorn in this process, on a loopback port)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from bot.config import McpServerConfig
from bot.mcp import McpServer, McpServers
from bot.mcp.launch import opener, secret_values
from bot.redaction import Redactor
from bot.sandbox import Sandbox, SandboxPolicy
from tests.mcp.demo_server import build_demo
from tests.sandbox.conftest import require

HERE = Path(__file__).resolve().parent
DEMO = HERE / "demo_server.py"
# Fast retries: a test waits for a reconnect in well under a second.
QUICK_RETRIES = (0.05, 0.1)


def stdio_config(**overrides: Any) -> McpServerConfig:
    """The demo server over stdio: the interpreter's prefixes and this directory."""
    values: dict[str, Any] = {
        "command": (sys.executable, str(DEMO)),
        "paths": (Path(sys.prefix), Path(sys.base_prefix), HERE),
    }
    values.update(overrides)
    return McpServerConfig(**values)


@pytest.fixture(scope="session")
def sandbox_policy(tmp_path_factory: pytest.TempPathFactory) -> SandboxPolicy:
    return SandboxPolicy.for_workspace(tmp_path_factory.mktemp("mcp-ws"))


@pytest.fixture
async def sandbox(sandbox_policy: SandboxPolicy) -> Sandbox:
    """The real sandbox, probed as Baton probes it (a skip, or in CI a failure, where
    this machine cannot make one)."""
    return require(await Sandbox.probe(sandbox_policy))


def make_server(
    name: str,
    config: McpServerConfig,
    log_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
    masked: Sequence[Path] = (),
    retry_delays: Sequence[float] = QUICK_RETRIES,
) -> McpServer:
    return McpServer(
        name,
        config,
        open_transport=opener(name, config, environ=environ, secrets=secrets, masked=masked),
        log_dir=log_dir,
        redact=Redactor([*secrets, *secret_values(config, environ or {})]),
        retry_delays=retry_delays,
    )


async def started(servers: Sequence[McpServer], sandbox: Sandbox) -> McpServers:
    group = McpServers(servers)
    group.start(sandbox)
    await asyncio.wait_for(group.settle(), 30)
    return group


async def until(condition: Any, within: float = 15.0) -> None:
    """Poll `condition` until it holds; fail the test after `within` seconds."""
    async with asyncio.timeout(within):
        # Polling is the point: the condition is a server's state, with no event to wait on.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


class HttpDemo:
    """The demo server over Streamable HTTP on a loopback port."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        self.server = uvicorn.Server(
            uvicorn.Config(build_demo().streamable_http_app(), log_level="warning")
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        await until(lambda: self.server.started)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task


@pytest.fixture
async def http_demo() -> AsyncIterator[HttpDemo]:
    demo = HttpDemo()
    await demo.start()
    yield demo
    await demo.stop()
