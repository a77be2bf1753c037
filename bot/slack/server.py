"""Serving Slack: HTTP mode (`POST /slack/events`, `GET /healthz`) or Socket Mode."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from bot.app import build_baton
from bot.config import Settings
from bot.slack.surface import SlackSurface

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
SHUTDOWN_GRACE_S = 30.0


class HttpServer:
    """The HTTP endpoint Slack posts to, plus a health check."""

    def __init__(self, surface: SlackSurface, *, host: str = "0.0.0.0", port: int = 3000) -> None:
        self.surface = surface
        self.host = host
        self.port = port
        self.web_app = web.Application()
        self.web_app.add_routes(
            [web.post(EVENTS_PATH, self.handle_events), web.get("/healthz", self.handle_health)]
        )
        self._runner: web.AppRunner | None = None

    async def handle_events(self, request: web.Request) -> web.StreamResponse:
        # Dispatched even while shutting down: new messages are ignored there, but a
        # click that approves or cancels a run still finishing must get through.
        bolt_request = await to_bolt_request(request)
        bolt_response = await self.surface.app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)

    async def handle_health(self, request: web.Request) -> web.Response:
        accepting = self.surface.threads.accepting
        return web.json_response(
            {"ok": accepting, "runs": len(self.surface.threads.runs)},
            status=200 if accepting else 503,
        )

    async def start(self) -> int:
        """Listen; returns the port (useful when asked for port 0)."""
        self._runner = web.AppRunner(self.web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = site._server.sockets if site._server else ()  # type: ignore[union-attr]
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def serve(settings: Settings) -> None:
    """Run the bot until SIGTERM or SIGINT, then shut down gracefully."""
    baton = await build_baton(settings)
    surface = SlackSurface(baton)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    http: HttpServer | None = None
    socket_handler: AsyncSocketModeHandler | None = None
    try:
        await surface.threads.identify()
        await surface.start()
        if settings.socket_mode:
            socket_handler = AsyncSocketModeHandler(surface.app, settings.slack_app_token)
            await socket_handler.connect_async()
            logger.info("Baton is connected to Slack in Socket Mode")
        else:
            http = HttpServer(surface, port=settings.port)
            port = await http.start()
            logger.info("Baton listens on port %s (POST %s, GET /healthz)", port, EVENTS_PATH)
        await stop.wait()
        logger.info("stopping: no new work; waiting up to %.0f s for runs", SHUTDOWN_GRACE_S)
    finally:
        surface.threads.accepting = False
        # Connections stay open through the grace period, for the clicks of runs
        # that are finishing; they close after.
        await surface.stop(SHUTDOWN_GRACE_S)
        if socket_handler is not None:
            await socket_handler.close_async()
        if http is not None:
            await http.stop()
        await baton.close()
