"""Serving Slack: HTTP mode (`POST /slack/events`) or Socket Mode, and in both modes
`GET /healthz` and `GET /metrics` on PORT."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot import metrics
from bot.app import Baton, build_baton
from bot.config import Settings
from bot.errors import BatonError
from bot.heap import freeze_start_up_heap
from bot.slack.acks_first import AcksFirst
from bot.slack.listeners import is_message_event
from bot.slack.parts import SlackParts
from bot.slack.surface import SlackSurface
from bot.store.approvals import ApprovalStore
from bot.store.feedback import FeedbackStore
from bot.store.rate import rate_store_for
from bot.store.schedules import ScheduleStore
from bot.store.thread_inbox import ThreadMessage
from bot.store.windows import TriggerWindows

logger = logging.getLogger(__name__)

GITHUB_EVENTS_PATH = "/github/events"
HOOKS_PATH = "/hooks/{name}"
EVENTS_PATH = "/slack/events"
# While draining, what a 503 for an event asks of Slack: send it again (elsewhere) soon.
DRAINING_RETRY_AFTER_S = 1
# How long one auth.test answer stands for Slack's side of /healthz.
SLACK_CHECK_TTL_S = 10.0
# A check that hangs answers as a failure, well within a prober's usual timeout.
CHECK_TIMEOUT_S = 5.0
# What auth.test answers when the token itself is no good (not a passing outage).
BAD_TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}
)


class HealthCheck:
    """What `/healthz` reports: still accepting work, the database, and Slack's auth.

    Slack's answer is kept for `slack_ttl_s`, so a prober polling every second costs
    Slack one `auth.test` per TTL, not one per probe; the database is asked each time.
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        client: AsyncWebClient,
        accepting: Callable[[], bool],
        slack_ttl_s: float = SLACK_CHECK_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.client = client
        self.accepting = accepting
        self.slack_ttl_s = slack_ttl_s
        self._clock = clock
        self._slack: tuple[float, str] | None = None  # (when, answer)
        self._slack_lock = asyncio.Lock()

    async def report(self) -> dict[str, Any]:
        """``{"ok": bool, "slack": "ok"|reason, "database": "ok"|reason, ...}``."""
        slack, database = await asyncio.gather(self.slack(), self.database())
        report: dict[str, Any] = {"ok": True, "slack": slack, "database": database}
        if not self.accepting():
            report["shutting_down"] = True
        report["ok"] = slack == "ok" and database == "ok" and "shutting_down" not in report
        return report

    async def database(self) -> str:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S), self.engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except TimeoutError:
            return "timeout"
        except (SQLAlchemyError, OSError) as exc:
            logger.warning("health: the database failed: %s", _first_line(exc))
            return f"unreachable ({type(_cause(exc)).__name__})"
        return "ok"

    async def slack(self) -> str:
        async with self._slack_lock:
            if self._slack is not None and self._clock() - self._slack[0] < self.slack_ttl_s:
                return self._slack[1]
            answer = await self._ask_slack()
            self._slack = (self._clock(), answer)
            return answer

    async def _ask_slack(self) -> str:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await self.client.auth_test()
        except TimeoutError:
            return "timeout"
        except SlackApiError as exc:
            return str(exc.response.get("error") or f"http_{exc.response.status_code}")
        except (aiohttp.ClientError, OSError) as exc:
            logger.warning("health: Slack is unreachable: %s", _first_line(exc))
            return "unreachable"
        return "ok"


def _cause(exc: BaseException) -> BaseException:
    # SQLAlchemy wraps the driver's error; its type says more (ConnectionRefusedError).
    return getattr(exc, "orig", None) or exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class HttpServer:
    """Listens on PORT: `/healthz` and `/metrics`, and in HTTP mode Slack's `/slack/events`."""

    def __init__(
        self,
        surface: SlackSurface,
        *,
        host: str = "0.0.0.0",
        port: int = 3000,
        events: bool = True,
        health: HealthCheck | None = None,
    ) -> None:
        self.surface = surface
        self.host = host
        self.port = port
        self.health = health or HealthCheck(
            engine=surface.parts.engine,
            client=surface.client,
            accepting=lambda: surface.turns.accepting,
        )
        self.web_app = web.Application()
        routes = [
            web.get("/healthz", self.handle_health),
            web.get("/readyz", self.handle_ready),
            web.get("/metrics", self.handle_metrics),
        ]
        if events:
            # Socket Mode gets events over its WebSocket; nothing may post them here.
            routes.append(web.post(EVENTS_PATH, self.handle_events))
        if surface.forge_hooks is not None:
            # The forge's webhooks, in either mode (Socket Mode's port serves health too).
            routes.append(web.post(GITHUB_EVENTS_PATH, self.handle_github_events))
        # Webhooks of baton.yaml, in either mode; a reload may add some, so always.
        routes.append(web.post(HOOKS_PATH, self.handle_hook))
        self.web_app.add_routes(routes)
        self._runner: web.AppRunner | None = None
        # Messages taken in a burst start their work once the burst is answered.
        self.starts: AcksFirst[ThreadMessage] = AcksFirst(surface.listeners.dispatch)

    async def handle_events(self, request: web.Request) -> web.StreamResponse:
        with self.starts.answering():
            return await self._answer_event(request)

    async def _answer_event(self, request: web.Request) -> web.StreamResponse:
        # While shutting down, an event (which could start a run) is answered 503, so
        # Slack delivers it again, to a replica that takes work; clicks and commands are
        # still dispatched: a click approves or cancels a run that is finishing here.
        payload = await self._signed_event(request)
        if payload is not None:
            if not self.surface.turns.accepting:
                return web.json_response(
                    {"ok": False, "error": "shutting_down"},
                    status=503,
                    headers={"Retry-After": str(DRAINING_RETRY_AFTER_S)},
                )
            event = payload.get("event")
            if not isinstance(event, dict):
                # Signed, so Slack's, yet no event: nothing to do (Bolt would fail on it).
                logger.warning("ignored a signed delivery without an event: %r", event)
                return web.Response(status=200)
            if is_message_event(event):
                return await self._take_message(payload, event)
        bolt_request = await to_bolt_request(request)
        bolt_response = await self.surface.app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)

    async def _take_message(self, payload: dict[str, Any], event: dict[str, Any]) -> web.Response:
        """A signed message event, taken as Bolt's listeners would take it (stored before
        Slack hears back, then handed to the turn machine) without Bolt's per-request
        work, which was most of what an ack cost. 500 when it cannot be stored: Slack
        sends it again."""
        listeners = self.surface.listeners
        try:
            message = await listeners.take(payload, event)
        except Exception:
            return web.Response(status=500)  # logged by take
        if message is not None:
            self.starts.defer(message)
        return web.Response(status=200)

    async def handle_github_events(self, request: web.Request) -> web.Response:
        """A GitHub webhook delivery: verified, claimed, acted on (`bot.forge.webhooks`).
        aiohttp refuses a body over 1 MiB with 413 before it is read."""
        hooks = self.surface.forge_hooks
        assert hooks is not None
        if not self.surface.turns.accepting:
            return web.Response(status=503, text="shutting down")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text="the delivery is over 1 MiB")
        try:
            answer = await hooks.handle(request.headers, body)
        except Exception:
            logger.exception("could not act on a GitHub delivery")
            return web.Response(status=500, text="Baton could not act on the delivery")
        return web.Response(status=answer.status, text=answer.text)

    async def handle_hook(self, request: web.Request) -> web.Response:
        """A delivery of a webhook of baton.yaml (`bot.triggers.webhooks`): verified,
        deduplicated, its run started. aiohttp reads no body over 1 MiB: 413 (404 for a
        name not listed), counted as Baton's other refusals are."""
        if not self.surface.turns.accepting:
            return web.Response(status=503, text="shutting down")
        hooks, name = self.surface.triggers.hooks, request.match_info["name"]
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            answer = hooks.too_large(name)  # 404 for a name not listed; counted
            return web.Response(status=answer.status, text=answer.text)
        try:
            answer = await hooks.handle(name, request.headers, body)
        except Exception:
            logger.exception("could not act on a webhook delivery")
            return web.Response(status=500, text="Baton could not act on the delivery")
        return web.Response(status=answer.status, text=answer.text)

    async def _signed_event(self, request: web.Request) -> dict[str, Any] | None:
        """The Events API delivery in `request`, if Slack signed it (anything else goes
        to Bolt, which refuses unsigned requests as it always does)."""
        if request.content_type != "application/json":
            return None  # commands and interactivity are form-encoded
        body = await request.text()  # aiohttp keeps it: Bolt reads it again
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        if not isinstance(payload, dict) or payload.get("type") != "event_callback":
            return None  # url_verification and the like are answered as usual
        secret = self.surface.parts.settings.slack_signing_secret
        if not secret or not SignatureVerifier(secret).is_valid_request(
            body, dict(request.headers)
        ):
            return None
        return payload

    async def handle_health(self, request: web.Request) -> web.Response:
        report = await self.health.report()
        report["runs"] = self.surface.turns.running
        return web.json_response(report, status=200 if report["ok"] else 503)

    async def handle_ready(self, request: web.Request) -> web.Response:
        """`/healthz`, and every MCP server connected or given up (its first attempt
        ended), or `READY_WITHIN_S` past since start-up: until then, a load balancer
        sends this replica nothing, so no one is answered without tools it will have."""
        parts = self.surface.parts
        report = await self.health.report()
        report["mcp"] = {status.name: status.state for status in parts.mcp_status()}
        settled = parts.tools_settled()
        if not settled:
            report["waiting_for"] = "MCP servers still connecting"
        report["ok"] = report["ok"] and settled
        return web.json_response(report, status=200 if report["ok"] else 503)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE_LATEST}
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
        self.starts.flush()  # stored already: their work is the turn machine's to end
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def slack_parts(baton: Baton) -> SlackParts:
    """What the Slack surface needs of `baton`: the one place that composes the two."""
    database = baton.database
    return SlackParts(
        settings=baton.settings,
        engine=database.engine,
        rates=rate_store_for(database),
        approvals=ApprovalStore(database),
        feedback=FeedbackStore(database),
        schedules=ScheduleStore(database),
        windows=TriggerWindows(database),
        events=baton.events,
        signals=baton.signals,
        instances=baton.instances,
        tracker=baton.tracker,
        budgets=baton.budgets,
        redact=baton.redact,
        turn_parts=baton.turn_parts(),
        forge=baton.forge,
        agent_names=lambda channel: baton.site_for(channel).agents.names(),
        merge_task=baton.merge_task,
        discard_task=baton.discard_task,
        sandbox_notice=lambda: baton.sandbox_notice,
        mcp_status=baton.mcp.status,
        tools_settled=baton.tools_settled,
        agents_summary=lambda: baton.agents_summary,
        instructions_line=baton.instructions_line,
        pulls_line=baton.pulls_line,
        start_heartbeat=baton.start_heartbeat,
        recover_worktrees=baton.recover_worktrees,
        recover_tasks=baton.recover_tasks,
    )


async def serve(settings: Settings) -> None:
    """Run the bot until SIGTERM or SIGINT, then shut down gracefully.

    Raises:
        BatonError: Start-up failed in a way the operator must fix (the database
            cannot be reached, Slack refuses the token), in one line.
    """
    try:
        baton = await build_baton(settings)
    except (SQLAlchemyError, OSError) as exc:
        raise BatonError(
            f"cannot open the database (DATABASE_URL): {_first_line(_cause(exc))}"
        ) from exc
    surface = SlackSurface(slack_parts(baton))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    with contextlib.suppress(NotImplementedError):
        # SIGHUP reads baton.yaml's schedules, webhooks and watched channels again.
        loop.add_signal_handler(signal.SIGHUP, surface.triggers.reload)
    http: HttpServer | None = None
    socket_handler: AsyncSocketModeHandler | None = None
    try:
        await _identify(surface, settings)
        await surface.start()
        http = HttpServer(surface, port=settings.port, events=not settings.socket_mode)
        freeze_start_up_heap()  # before the first event: no full pass walks it again
        port = await _listen(http)
        if settings.socket_mode:
            socket_handler = AsyncSocketModeHandler(surface.app, settings.slack_app_token)
            await _connect_socket(socket_handler)
            logger.info(
                "Baton is connected to Slack in Socket Mode; port %s serves GET /healthz and "
                "GET /metrics",
                port,
            )
        else:
            logger.info(
                "Baton listens on port %s (POST %s, GET /healthz, GET /metrics)", port, EVENTS_PATH
            )
        await stop.wait()
        logger.info(
            "stopping: no new work; waiting up to %.0f s for runs and tasks",
            settings.shutdown_grace_s,
        )
    finally:
        await _shut_down(surface, settings, socket_handler, http)
        await baton.close()


async def _shut_down(
    surface: SlackSurface,
    settings: Settings,
    socket_handler: AsyncSocketModeHandler | None,
    http: HttpServer | None,
) -> None:
    """Stop taking work, let what runs finish for the grace period, end the rest as
    interrupted by a restart, then close the connections."""
    if socket_handler is not None:
        # Disconnected first: Slack sends new events, and clicks, to the other
        # connections (approvals and cancels reach this process through the database).
        try:
            await socket_handler.close_async()
        except Exception:
            logger.exception("could not close the Socket Mode connection")
    surface.turns.accepting = False  # HTTP events now get 503, and /healthz says so
    if http is not None:
        http.starts.flush()  # messages taken already: their runs drain with the rest
    # The HTTP port stays open through the grace period, for the clicks of runs
    # that are finishing; it closes after.
    await surface.stop(settings.shutdown_grace_s)
    if http is not None:
        await http.stop()


async def _identify(surface: SlackSurface, settings: Settings) -> None:
    """auth.test at start: a token Slack refuses, or no Slack at all, is a BatonError."""
    try:
        await surface.threads.identify()
    except SlackApiError as exc:
        error = exc.response.get("error")
        if error in BAD_TOKEN_ERRORS:
            raise BatonError(
                f"Slack refused SLACK_BOT_TOKEN ({error}): set a valid bot token (xoxb-…) "
                "of an installed app"
            ) from exc
        raise BatonError(f"Slack's auth.test failed at start: {error}") from exc
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise BatonError(
            f"cannot reach Slack at {settings.slack_api_url} (SLACK_API_URL): {_first_line(exc)}"
        ) from exc


async def _listen(http: HttpServer) -> int:
    try:
        return await http.start()
    except OSError as exc:
        raise BatonError(f"cannot listen on PORT {http.port}: {exc.strerror or exc}") from exc


async def _connect_socket(handler: AsyncSocketModeHandler) -> None:
    try:
        await handler.connect_async()
    except SlackApiError as exc:
        error = exc.response.get("error")
        raise BatonError(
            f"Slack refused SLACK_APP_TOKEN ({error}): set an app-level token (xapp-…) "
            "with the connections:write scope"
        ) from exc
