"""A fake Socket Mode endpoint: `apps.connections.open` on the fake Web API, and a WebSocket.

It speaks Slack's Socket Mode protocol to the real slack_sdk client: a `hello`
on connect, envelopes (`events_api`, `slash_commands`, `interactive`) that the
client must acknowledge with their `envelope_id`, and answers to pings.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.serving import FakeServer, listen_on_loopback
from tests.fakes.slack_api import FakeSlackAPI


class FakeSocketMode(FakeServer):
    """Attach to a FakeSlackAPI; `send(...)` pushes an envelope to the connected app."""

    def __init__(self, slack: FakeSlackAPI) -> None:
        self.slack = slack
        self.acks: list[dict[str, Any]] = []
        self.connections = 0
        self._socket: web.WebSocketResponse | None = None
        self._connected = asyncio.Event()
        self._acked: dict[str, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/link", self._handle_socket)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        root = await listen_on_loopback(runner)
        self._runner = runner
        self.url = "ws" + root.removeprefix("http") + "/link"

        def open_connection(params: dict[str, Any]) -> dict[str, Any]:
            return {"ok": True, "url": self.url}

        self.slack.register("apps.connections.open", open_connection)

    async def stop(self) -> None:
        if self._socket is not None and not self._socket.closed:
            await self._socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle_socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._socket = socket
        self.connections += 1
        await socket.send_json(
            {"type": "hello", "num_connections": 1,
             "debug_info": {"host": "fake", "approximate_connection_time": 3600},
             "connection_info": {"app_id": "ABATON"}}
        )  # fmt: skip
        self._connected.set()
        async for message in socket:
            if message.type == WSMsgType.TEXT:
                data = json.loads(message.data)
                if "envelope_id" in data:
                    self.acks.append(data)
                    if event := self._acked.get(data["envelope_id"]):
                        event.set()
        return socket

    async def wait_connected(self) -> None:
        await asyncio.wait_for(self._connected.wait(), 10)

    async def send(self, envelope_type: str, payload: dict[str, Any]) -> str:
        """Push an envelope; returns its id (the app must acknowledge it)."""
        await self.wait_connected()
        assert self._socket is not None
        envelope_id = str(uuid.uuid4())
        self._acked[envelope_id] = asyncio.Event()
        await self._socket.send_json(
            {"envelope_id": envelope_id, "type": envelope_type, "payload": payload,
             "accepts_response_payload": envelope_type != "events_api", "retry_attempt": 0,
             "retry_reason": ""}
        )  # fmt: skip
        return envelope_id

    async def wait_ack(self, envelope_id: str) -> None:
        await asyncio.wait_for(self._acked[envelope_id].wait(), 10)
