"""What the fake servers share: listening on loopback, and `async with`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

from aiohttp import web


async def listen_on_loopback(runner: web.AppRunner) -> str:
    """Set `runner` up and serve it on 127.0.0.1 at a port the kernel picks; its base
    URL (`http://127.0.0.1:PORT`, no trailing slash). Cleaned up again if it fails."""
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = runner.addresses[0][:2]
    return f"http://{host}:{port}"


class FakeServer(ABC):
    """A fake that `start`s and `stop`s; `async with fake:` does both."""

    @abstractmethod
    async def start(self) -> None:
        """Start serving."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop serving (idempotent)."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
