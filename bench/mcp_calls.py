"""MCP calls: what Baton adds to one tool call of an MCP server.

Run: `make bench` or `.venv/bin/python -m bench.mcp_calls [--calls N]`.
The demo server of the tests (tests/mcp/demo_server.py), over stdio and over Streamable
HTTP: N calls of its `add` tool through Baton's connection (stdio in the sandbox, the
result turned into the model's text) against the same calls with a bare SDK session
(stdio unsandboxed). Prints the median and p90 per call, and the time from starting a
server to its tools being offered.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx2
import uvicorn
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from bot.config import McpServerConfig
from bot.mcp import McpServer, McpServers
from bot.mcp.launch import opener
from bot.redaction import Redactor
from bot.sandbox import Sandbox, SandboxPolicy
from tests.mcp.demo_server import build_demo

DEMO = Path(__file__).resolve().parents[1] / "tests" / "mcp" / "demo_server.py"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def timed(calls: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    await call()  # warm
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def line(label: str, times: list[float]) -> str:
    return (
        f"{label:<34} median {statistics.median(times):6.2f} ms   "
        f"p90 {percentile(times, 0.9):6.2f} ms"
    )


async def through_baton(config: McpServerConfig, sandbox: Sandbox, calls: int) -> list[str]:
    with tempfile.TemporaryDirectory() as directory:
        server = McpServer(
            "demo",
            config,
            open_transport=opener("demo", config, secrets=[], masked=[]),
            log_dir=Path(directory),
            redact=Redactor(),
        )
        group = McpServers([server])
        started = time.perf_counter()
        group.start(sandbox)
        await group.settle()
        ready = (time.perf_counter() - started) * 1000
        if server.state != "up":
            raise SystemExit(f"the demo server did not start: {server.reason}")
        try:
            times = await timed(calls, lambda: server.call("add", {"a": 1, "b": 2}))
        finally:
            await group.close()
    return [line(f"Baton, {config.transport}", times), f"  started to tools offered {ready:.0f} ms"]


async def bare_stdio(calls: int) -> str:
    parameters = StdioServerParameters(command=sys.executable, args=[str(DEMO)])
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        times = await timed(calls, lambda: session.call_tool("add", {"a": 1, "b": 2}))
    return line("bare SDK, stdio (no sandbox)", times)


async def bare_http(url: str, calls: int) -> str:
    async with (
        httpx2.AsyncClient() as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        times = await timed(calls, lambda: session.call_tool("add", {"a": 1, "b": 2}))
    return line("bare SDK, http", times)


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        sandbox = await Sandbox.probe(SandboxPolicy.for_workspace(Path(directory)))
    stdio = McpServerConfig(
        command=(sys.executable, str(DEMO)),
        paths=(Path(sys.prefix), Path(sys.base_prefix), DEMO.parent),
    )
    print(f"{calls} calls of the demo server's `add` tool, one at a time")
    print(await bare_stdio(calls))
    if sandbox.available:
        print("\n".join(await through_baton(stdio, sandbox, calls)))
    else:
        print(f"Baton, stdio: no sandbox here ({sandbox.reason})")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    app = build_demo().streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn says so with a flag, no event)
        await asyncio.sleep(0.01)
    try:
        print(await bare_http(url, calls))
        print("\n".join(await through_baton(McpServerConfig(url=url), sandbox, calls)))
    finally:
        server.should_exit = True
        await serving


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    asyncio.run(main(parser.parse_args().calls))
