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


class AppServer(FakeServer):
    """A fake served by one aiohttp application on loopback, from `start` to `stop`.

    Subclasses call `super().__init__()` and say how their runner is made (`runner`)
    and what their base URL adds to `http://127.0.0.1:PORT` (`url_suffix`).
    """

    url_suffix = ""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    @abstractmethod
    def runner(self) -> web.AppRunner:
        """The application's runner, its routes made."""

    async def start(self) -> None:
        """Listen on 127.0.0.1 on a port the kernel picks."""
        if self._runner is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        runner = self.runner()
        self._url = await listen_on_loopback(runner) + self.url_suffix
        self._runner = runner

    async def stop(self) -> None:
        """Stop serving (idempotent): from now on its port refuses connections."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def url(self) -> str:
        """The base URL (`http://127.0.0.1:PORT` and the suffix, no trailing slash)."""
        if self._url is None:
            raise RuntimeError(f"{type(self).__name__} not started")
        return self._url
