"""The MCP servers of `mcp_servers`, connected once and shared by every run.

Each server has one owner task (the SDK's transports must be entered and left in the
same task): it connects, lists the tools, then keeps the session, pinging it, until the
connection is lost; then it retries, waiting longer each time. Runs call tools on the
shared session concurrently. A server that fails is reported once per failure (log,
`status()` for `baton mcp` and App Home), its tools leave the next runs' tool lists,
and a call to one already held gets a clear tool error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Protocol

import anyio
import httpx2
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
)
from mcp_types import Tool as RemoteTool

from bot.config import McpServerConfig
from bot.errors import BatonError, ToolError
from bot.mcp.launch import Opener
from bot.mcp.results import error_text, result_output
from bot.mcp.stderr import StderrCapture
from bot.mcp.tools import McpTool, usable_schema
from bot.redaction import Redactor
from bot.sandbox import Sandbox
from bot.tools.base import ToolOutput

logger = logging.getLogger(__name__)

# Connecting: the handshake and the tool list, each request within this.
CONNECT_TIMEOUT_S = 30.0
# While up, the session is pinged this often; a ping unanswered this long is a loss.
PING_EVERY_S = 15.0
PING_TIMEOUT_S = 10.0
# Waits between attempts after a failure; the last one repeats.
RETRY_DELAYS_S = (2.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0)
# Pages of tools read from one server at most (a server paging for ever stops here).
MAX_PAGES = 50
# Tools offered from all servers together: Chat Completions takes 128 in all, and
# Baton's own need room.
MAX_TOOLS = 96
# Lines of a stdio server's stderr quoted when it fails.
STDERR_LINES = 3

# A server up this long has recovered: its next failure is reported again, and retried
# after the first delay. A shorter stay does not reset the waits (a crash loop).
STABLE_S = 60.0
# Errors of the connection itself (as opposed to an answer Baton cannot read).
TRANSPORT_ERRORS = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
    httpx2.TransportError,
)

State = Literal["connecting", "up", "failed"]


# The SDK itself (`mcp`) is imported by what connects and calls, not with this module:
# it brings its server side along (Starlette, uvicorn), about 25 MB that a replica
# without MCP servers need not hold. Its wire types come from the standalone
# `mcp_types`, which the SDK re-exports (the same classes).
class Session(Protocol):
    """What Baton asks of the SDK's `mcp.ClientSession`."""

    async def send_request(
        self,
        request: CallToolRequest,
        result_type: type[CallToolResult],
        request_read_timeout_seconds: float | None = None,
    ) -> CallToolResult: ...

    async def send_ping(self) -> object: ...

    async def list_tools(
        self, *, params: PaginatedRequestParams | None = None
    ) -> ListToolsResult: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStatus:
    """What a person is told about one server."""

    name: str
    transport: Literal["stdio", "http"]
    state: State
    # Why it is not up (the last failure), when it is not.
    reason: str | None = None
    tools: tuple[str, ...] = ()
    # Tools the server listed that are not offered, each with why.
    skipped: tuple[str, ...] = ()


class McpServer:
    """One configured server: its connection, kept by `run`, and its tools."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        open_transport: Opener,
        log_dir: Path,
        redact: Redactor,
        retry_delays: Sequence[float] = RETRY_DELAYS_S,
    ) -> None:
        self.name = name
        self.config = config
        self.open_transport = open_transport
        self.log_path = log_dir / f"mcp-{name}.log"
        self.redact = redact
        self.retry_delays = tuple(retry_delays)
        self.state: State = "connecting"
        self.reason: str | None = None
        self.tools: tuple[McpTool, ...] = ()
        self.skipped: tuple[str, ...] = ()
        self._session: Session | None = None
        # Set when a call finds the connection gone: one event per connection, so a late
        # failure of an old one cannot end the next.
        self._lost = asyncio.Event()
        self._stderr: StderrCapture | None = None
        self._reported: str | None = None
        self._up_since = 0.0
        # Where stdio servers run: set by `McpServers.start`.
        self.sandbox = Sandbox.unavailable("not started")
        # Set once the first attempt has ended (up or failed): `baton mcp` waits for it.
        self.settled = asyncio.Event()

    def status(self) -> ServerStatus:
        return ServerStatus(
            name=self.name,
            transport=self.config.transport,
            state=self.state,
            reason=self.reason,
            tools=tuple(tool.name for tool in self.tools),
            skipped=self.skipped,
        )

    async def run(self) -> None:
        """Keep the server connected until cancelled."""
        failures = 0
        while True:
            try:
                await self._connect_and_keep()
                reason = "the connection was lost"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = self.redact(_describe(exc))
            if self.state == "up" and self._stable():
                failures = 0
            self._down(reason + self._stderr_tail(), again=failures > 0)
            delay = self.retry_delays[min(failures, len(self.retry_delays) - 1)]
            failures += 1
            await asyncio.sleep(delay)

    def _stable(self) -> bool:
        return asyncio.get_running_loop().time() - self._up_since >= STABLE_S

    async def call(self, tool: str, arguments: dict[str, object]) -> ToolOutput:
        """Call one of the server's tools; a `ToolError` saying why when it cannot."""
        session, lost = self._session, self._lost
        if session is None or self.state != "up":
            raise ToolError(
                f"the MCP server {self.name} is not connected ({self.reason or 'connecting'}); "
                "Baton keeps trying to reconnect it, its tools are unavailable meanwhile"
            )
        from mcp import MCPError

        try:
            # Not `call_tool`: it checks results against the tool's output schema with
            # jsonschema on the event loop, and a hostile pattern would freeze the bot
            # (Baton reads the content, never validates structured output).
            result = await session.send_request(
                CallToolRequest(params=CallToolRequestParams(name=tool, arguments=arguments)),
                CallToolResult,
                request_read_timeout_seconds=self.config.timeout_s,
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolError(
                    f"the MCP server {self.name} did not answer within "
                    f"{self.config.timeout_s:g} s; the call was cancelled"
                ) from None
            if exc.code == CONNECTION_CLOSED:
                lost.set()
                raise ToolError(
                    f"the MCP server {self.name} closed the connection during the call; "
                    "Baton reconnects it"
                ) from None
            raise ToolError(
                f"the MCP server {self.name} refused the call: {self.redact(exc.message)}"
            ) from None
        except TRANSPORT_ERRORS as exc:
            lost.set()
            raise ToolError(
                f"the connection to the MCP server {self.name} failed during the call: "
                f"{self.redact(_describe(exc))}; Baton reconnects it"
            ) from None
        except Exception as exc:  # an answer it cannot read: the connection stays
            raise ToolError(
                f"the MCP server {self.name} sent an answer Baton cannot read: "
                f"{self.redact(_describe(exc))[:300]}"
            ) from None
        if result.is_error:
            raise ToolError(f"{tool} (MCP server {self.name}): {error_text(result)}")
        return result_output(f"mcp__{self.name}__{tool}", result)

    async def _connect_and_keep(self) -> None:
        from mcp import ClientSession

        stdio = self.config.transport == "stdio"
        self._stderr = StderrCapture(self.log_path) if stdio else None
        try:
            errlog = await self._stderr.open() if self._stderr is not None else None
            async with self.open_transport(errlog, self.sandbox) as (read, write):
                if self._stderr is not None:
                    self._stderr.started()
                async with ClientSession(
                    read, write, read_timeout_seconds=CONNECT_TIMEOUT_S
                ) as session:
                    await session.initialize()
                    remote = await _list_tools(session)
                    self._up(session, remote)
                    try:
                        await self._keep(session)
                    finally:
                        self._session = None
        finally:
            if self._stderr is not None:
                await self._stderr.close()

    async def _keep(self, session: Session) -> None:
        """Return when the connection is lost: a call saw it close, or a ping failed;
        a stdio server whose stderr ends (its process ended) is pinged at once."""
        from mcp import MCPError

        lost = self._lost
        ended = self._stderr.ended if self._stderr is not None else asyncio.Event()
        while True:
            waits = [asyncio.ensure_future(lost.wait()), asyncio.ensure_future(ended.wait())]
            try:
                done, _ = await asyncio.wait(
                    waits, timeout=PING_EVERY_S, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiting in waits:
                    waiting.cancel()
            if lost.is_set():
                return
            try:
                async with asyncio.timeout(PING_TIMEOUT_S):
                    await session.send_ping()
            except (MCPError, TimeoutError):
                return
            if done:
                # Its stderr ended but it still answers (it closed stderr itself): from
                # here the pings alone watch it.
                ended = asyncio.Event()

    def _up(self, session: Session, remote: Sequence[RemoteTool]) -> None:
        tools: list[McpTool] = []
        skipped: list[str] = []
        names: set[str] = set()
        for item in remote:
            parameters, why = usable_schema(item)
            if parameters is None:
                skipped.append(f"{_clip(item.name, 80)}: {why}")
                continue
            tool = McpTool(self, item, parameters)
            if tool.name in names:
                skipped.append(f"{_clip(item.name, 80)}: another of its tools has the same name")
                continue
            names.add(tool.name)
            tools.append(tool)
        if len(tools) > MAX_TOOLS:
            skipped.append(f"{len(tools) - MAX_TOOLS} more tools: at most {MAX_TOOLS} are offered")
            tools = tools[:MAX_TOOLS]
        if skipped:
            logger.warning("MCP server %s: tools not offered: %s", self.name, "; ".join(skipped))
        self.tools, self.skipped = tuple(tools), tuple(skipped)
        self._lost = asyncio.Event()
        self._session = session
        self._up_since = asyncio.get_running_loop().time()
        self.state, self.reason = "up", None
        self.settled.set()
        logger.info("MCP server %s is up with %d tools", self.name, len(tools))

    def _down(self, reason: str, *, again: bool) -> None:
        """Mark the server down. Said once: not at each retry, nor at each turn of a
        crash loop (a server that never stays up long), unless the reason changes."""
        if not again or reason != self._reported:
            logger.warning("MCP server %s is not available: %s", self.name, reason)
            self._reported = reason
        else:
            logger.debug("MCP server %s: still not available: %s", self.name, reason)
        self.state, self.reason = "failed", reason
        self._session = None
        self.tools = ()
        self.settled.set()

    def _stderr_tail(self) -> str:
        if self._stderr is None or self.config.transport != "stdio":
            return ""
        tail = [_clip(line, 200) for line in self._stderr.tail(STDERR_LINES)]
        return f" (its stderr: {self.redact(' | '.join(tail))})" if tail else ""


class McpServers:
    """Every configured server, started together and shared by all runs.

    What all their tools add to each request is bounded: at most `MAX_TOOLS` tools and
    `schema_budget` characters of names, descriptions and schemas (a share of the
    context window); tools past either are not offered, and their server's status says
    so.
    """

    def __init__(self, servers: Sequence[McpServer], *, schema_budget: int = 64_000) -> None:
        self.servers = tuple(servers)
        self.schema_budget = schema_budget
        self._tasks: list[asyncio.Task[None]] = []
        self._left_out: dict[str, int] = {}

    def start(self, sandbox: Sandbox) -> None:
        """Start connecting every server in the background (stdio ones in `sandbox`);
        returns at once."""
        if self._tasks:
            return
        for server in self.servers:
            server.sandbox = sandbox
        self._tasks = [
            asyncio.create_task(server.run(), name=f"mcp-{server.name}") for server in self.servers
        ]

    async def settle(self) -> None:
        """Wait until every server's first attempt has ended (up or failed)."""
        for server in self.servers:
            await server.settled.wait()

    def settled(self) -> bool:
        """Whether every server's first attempt has ended (up or failed)."""
        return all(server.settled.is_set() for server in self.servers)

    def tools(self) -> list[McpTool]:
        """The tools of every server that is up now, within the bounds."""
        offered: list[McpTool] = []
        left_out: dict[str, int] = {}
        spent = 0
        for server in self.servers:
            if server.state != "up":
                continue
            for tool in server.tools:
                if len(offered) >= MAX_TOOLS or spent + tool.size > self.schema_budget:
                    left_out[server.name] = left_out.get(server.name, 0) + 1
                    continue
                offered.append(tool)
                spent += tool.size
        if left_out != self._left_out:
            for name, count in left_out.items():
                logger.warning(
                    "MCP server %s: %d tools not offered: all servers' tools together may "
                    "take at most %d tools and %d characters of each request",
                    name,
                    count,
                    MAX_TOOLS,
                    self.schema_budget,
                )
            self._left_out = left_out
        return offered

    def status(self) -> list[ServerStatus]:
        statuses = []
        for server in self.servers:
            status = server.status()
            if count := self._left_out.get(server.name):
                note = f"{count} tools: over the limit of what all servers' tools may take"
                status = replace(status, skipped=(*status.skipped, note))
            statuses.append(status)
        return statuses

    async def close(self) -> None:
        """Disconnect every server (stdio servers are stopped)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


async def _list_tools(session: Session) -> list[RemoteTool]:
    tools: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """One line for an exception, unwrapping the groups the SDK's task groups raise."""
    from mcp import MCPError

    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        if not inner:
            break
        exc = inner[0]
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, BatonError):
        return str(exc)
    text = str(exc).strip()
    kind = type(exc).__name__
    return f"{kind}: {text}" if text else kind


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
