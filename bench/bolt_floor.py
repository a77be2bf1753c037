"""The floor `bench.memory` measures Baton against: a minimal Bolt app, as a process.

Not a benchmark: `bench.memory` starts it with `python -m bench.bolt_floor` and the
environment it gives `python -m bot` (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET,
SLACK_API_URL, PORT). It serves Slack as Baton does in HTTP mode (an aiohttp server,
`POST /slack/events` through Bolt's aiohttp adapter, `GET /healthz`), with one
listener: a mention "question N" is answered "Answer to N." in its thread. It imports
nothing of Baton's and nothing of the tests, so its RSS is Bolt's, aiohttp's and
Python's own.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

QUESTION = re.compile(r"question (-?\d+)")


def build_app() -> AsyncApp:
    """The Bolt app: one `app_mention` listener that posts one message in the thread."""
    # Slack's own answer to HTTP 429 (wait Retry-After, try again), as any app needs.
    client = AsyncWebClient(
        token=os.environ["SLACK_BOT_TOKEN"],
        base_url=os.environ["SLACK_API_URL"],
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=100)],
    )
    app = AsyncApp(client=client, signing_secret=os.environ["SLACK_SIGNING_SECRET"])

    @app.event("app_mention")
    async def answer_mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        asked = QUESTION.findall(event.get("text") or "")
        await client.chat_postMessage(
            channel=event["channel"],
            thread_ts=event.get("thread_ts") or event["ts"],
            text=f"Answer to {asked[-1] if asked else '?'}.",
        )

    return app


async def serve() -> None:
    app = build_app()

    async def handle_events(request: web.Request) -> web.StreamResponse:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    async def handle_health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    web_app = web.Application()
    web_app.add_routes(
        [web.post("/slack/events", handle_events), web.get("/healthz", handle_health)]
    )
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(os.environ.get("PORT", "3000"))).start()
    try:
        await asyncio.Event().wait()  # until the bench kills the process
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve())
