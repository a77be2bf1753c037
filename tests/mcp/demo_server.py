"""A real MCP server, written with the SDK's server API, for the tests.

`python demo_server.py` serves it over stdio (Baton starts it in the sandbox);
`demo.streamable_http_app()` serves it over Streamable HTTP (tests/mcp/conftest.py).
It imports only the SDK, so the sandbox needs nothing but the interpreter's prefix
and this directory.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import uuid
import zlib
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import AudioContent, EmbeddedResource, TextResourceContents, ToolAnnotations


def png() -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def build_demo() -> MCPServer:
    """A fresh server (an HTTP app can serve one test only)."""
    demo = MCPServer("demo", version="1.0", log_level="WARNING")
    name = uuid.uuid4().hex

    @demo.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int = 2) -> int:
        """Add two integers."""
        return a + b

    @demo.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search_issues(query: str) -> str:
        """Search the issue tracker."""
        return f"3 issues match {query!r}"

    @demo.tool()
    def create_issue(title: str) -> str:
        """Create an issue in the tracker."""
        return f"created issue {title!r}"

    @demo.tool()
    def environment() -> dict[str, str]:
        """The server process's environment variables."""
        return dict(os.environ)

    @demo.tool()
    def read_path(path: str) -> str:
        """Read a file on the server's machine, or say why it cannot."""
        try:
            return Path(path).read_text()[:2000]
        except OSError as exc:
            return f"cannot read: {type(exc).__name__}"

    @demo.tool()
    def write_path(path: str, text: str) -> str:
        """Write a file on the server's machine, or say why it cannot."""
        try:
            Path(path).write_text(text)
        except OSError as exc:
            return f"cannot write: {type(exc).__name__}"
        return "written"

    @demo.tool()
    def connect(host: str, port: int) -> str:
        """Open a TCP connection, or say why it cannot."""
        try:
            with socket.create_connection((host, port), timeout=2):
                return "connected"
        except OSError as exc:
            return f"cannot connect: {type(exc).__name__}"

    @demo.tool()
    def fail(reason: str) -> str:
        """Fail with a message the caller sees."""
        raise ToolError(f"failed because {reason}")

    @demo.tool()
    async def slow(seconds: float) -> str:
        """Answer after `seconds`."""
        await asyncio.sleep(seconds)
        return "done"

    @demo.tool()
    def big(size: int) -> str:
        """`size` characters of output."""
        return "x" * size

    @demo.tool()
    def image() -> Image:
        """A 1x1 PNG."""
        return Image(data=png(), format="png")

    @demo.tool()
    def media() -> list[object]:
        """A text, an embedded text resource and an audio clip."""
        return [
            "some text",
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///notes.txt", text="the notes"),
            ),
            AudioContent(
                type="audio", data=base64.b64encode(b"RIFF0000").decode(), mime_type="audio/wav"
            ),
        ]

    @demo.tool()
    def instance() -> str:
        """This server process's own random name (each start has another)."""
        return name

    @demo.tool()
    def exit_now() -> str:
        """End the server process at once (a crash)."""
        os._exit(3)

    @demo.tool()
    def header(name: str, ctx: Context) -> str:
        """A header of the HTTP request that carried this call ("<stdio>" over stdio)."""
        request = ctx.request_context.request
        if request is None:
            return "<stdio>"
        return request.headers.get(name, "<missing>")

    return demo


if __name__ == "__main__":
    build_demo().run()
