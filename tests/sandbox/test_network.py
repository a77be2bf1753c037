"""`sandbox.network: false` means no connection at all, loopback included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bot.sandbox import Sandbox
from bot.tools.shell import BashArgs
from tests.sandbox.conftest import Site


class Listener:
    """A TCP server on the host's loopback that counts the connections it receives."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listening = Listener()
    server = await asyncio.start_server(listening._accept, "127.0.0.1", 0)
    listening.port = server.sockets[0].getsockname()[1]
    async with server:
        yield listening


def attempts(port: int) -> list[str]:
    return [
        f"echo hi > /dev/tcp/127.0.0.1/{port}",
        f"echo hi > /dev/tcp/localhost/{port}",
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=2)'",
    ]


async def test_no_network_by_default(site: Site, sandbox: Sandbox, listener: Listener) -> None:
    bash = site.bash(sandbox)
    for command in attempts(listener.port):
        out = await bash.run(BashArgs(command=command, timeout_s=10))
        assert not out.startswith("exit code 0"), (command, out)
    await asyncio.sleep(0.2)
    assert listener.connections == 0
    interfaces = await bash.run(
        BashArgs(command="ls /sys/class/net 2>/dev/null; cat /proc/net/dev")
    )
    assert "eth" not in interfaces


async def test_network_true_shares_the_hosts(
    site: Site, sandbox: Sandbox, listener: Listener
) -> None:
    bash = site.bash(sandbox, network=True)
    out = await bash.run(BashArgs(command=attempts(listener.port)[0], timeout_s=10))
    assert out.startswith("exit code 0"), out
    for _ in range(50):
        if listener.connections:
            break
        await asyncio.sleep(0.02)
    assert listener.connections == 1
