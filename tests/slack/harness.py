"""Drive the real Bolt app over HTTP, signed as Slack signs, against the local fakes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from bot.app import Baton, build_baton
from bot.slack.rate_budget import RateBudget
from bot.slack.server import EVENTS_PATH, HttpServer, slack_parts
from bot.slack.surface import SlackSurface
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from tests.conftest import harness_database_kind, make_settings
from tests.databases import fresh_postgres
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlackAPI

SIGNING_SECRET = "test-signing-secret"
TEAM = "T0001"
BOT = "UBOT"
# How long a wait for something to happen may take before the test fails: a cap, not a
# timing (tests run on parallel workers, often more of them than cores).
PATIENCE_S = 30.0
# How long the harness lets runs and tasks still going finish when a test ends: many
# tests leave a child waiting forever on purpose, and nothing is checked after the end.
TEARDOWN_GRACE_S = 0.5
ALICE = "UALICE"
BOB = "UBOB"
MAIN_MARK = "You are Baton"
# How much faster than Slack's limits the harness paces its calls by default.
TEST_BUDGET_SPEED = 100.0

_counter = itertools.count(1)


def sign(body: str, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """Headers exactly as Slack sends them: v0 HMAC-SHA256 over `v0:{ts}:{body}`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def next_ts() -> str:
    return f"{1_700_000_000 + next(_counter)}.{next(_counter):06d}"


def click_body(
    action_id: str, value: str, *, user: str, channel: str = "C1",
    message_ts: str | None = None, view: dict[str, Any] | None = None,
) -> str:  # fmt: skip
    """The form body Slack posts for a button click (block_actions)."""
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "ABATON",
        "token": "legacy",
        "trigger_id": f"{next(_counter)}.trigger",
        "team": {"id": TEAM, "domain": "baton-test"},
        "actions": [
            {
                "action_id": action_id,
                "block_id": "b",
                "value": value,
                "type": "button",
                "action_ts": str(time.time()),
            }
        ],
    }
    if view is not None:
        payload["container"] = {"type": "view", "view_id": view["id"]}
        payload["view"] = view
    else:
        payload["container"] = {
            "type": "message", "message_ts": message_ts or "0", "channel_id": channel,
            "is_ephemeral": message_ts is None,
        }  # fmt: skip
        payload["channel"] = {"id": channel, "name": "general"}
        payload["response_url"] = "https://hooks.slack.com/actions/T0001/1/x"
    return urlencode({"payload": json.dumps(payload)})


@dataclass
class SlackHarness:
    """The bot as deployed, with Slack and the model replaced by local fakes."""

    slack: FakeSlackAPI
    llm: FakeOpenAI
    baton: Baton
    surface: SlackSurface
    server: HttpServer
    http: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def post(
        self, body: str, *, content_type: str, headers: dict[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        all_headers = {"Content-Type": content_type, **sign(body), **(headers or {})}
        async with self.http.post(f"{self.url}{EVENTS_PATH}", data=body, headers=all_headers) as r:
            await r.read()
            return r

    async def send_event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry: int | None = None
    ) -> aiohttp.ClientResponse:
        payload = {
            "token": "legacy",
            "team_id": TEAM,
            "api_app_id": "ABATON",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(_counter)}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM, "user_id": BOT, "is_bot": True}],
        }
        headers = (
            {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
            if retry
            else None
        )
        return await self.post(
            json.dumps(payload), content_type="application/json", headers=headers
        )

    async def mention(
        self, text: str, *, channel: str = "C1", user: str = ALICE, thread_ts: str | None = None,
        ts: str | None = None,
    ) -> str:  # fmt: skip
        """Send an app_mention (as Slack would, with the bot mention in the text); its ts."""
        ts = ts or next_ts()
        self.slack.add_message(channel, f"<@{BOT}> {text}", user, ts=ts, thread_ts=thread_ts)
        event = {
            "type": "app_mention", "user": user, "text": f"<@{BOT}> {text}", "ts": ts,
            "channel": channel, "event_ts": ts, "team": TEAM,
        }  # fmt: skip
        if thread_ts:
            event["thread_ts"] = thread_ts
        response = await self.send_event(event)
        assert response.status == 200
        return ts

    async def command(self, text: str = "", *, channel: str = "C1", user: str = ALICE) -> int:
        body = urlencode(
            {
                "token": "legacy", "team_id": TEAM, "team_domain": "baton-test",
                "channel_id": channel, "channel_name": "general", "user_id": user,
                "user_name": user.lower(), "command": "/tasks", "text": text,
                "api_app_id": "ABATON", "trigger_id": f"{next(_counter)}.trigger",
                "response_url": "https://hooks.slack.com/commands/T0001/1/x",
            }
        )  # fmt: skip
        response = await self.post(body, content_type="application/x-www-form-urlencoded")
        return response.status

    async def click(
        self, action_id: str, value: str, *, user: str, channel: str = "C1",
        message_ts: str | None = None, view: dict[str, Any] | None = None,
    ) -> int:  # fmt: skip
        """A button click (block_actions), built from a button the bot posted."""
        body = click_body(
            action_id, value, user=user, channel=channel, message_ts=message_ts, view=view
        )
        response = await self.post(body, content_type="application/x-www-form-urlencoded")
        return response.status

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return self.slack.thread_messages(channel, thread_ts)

    def bot_texts(self, channel: str, thread_ts: str) -> list[str]:
        return [m.get("text", "") for m in self.thread(channel, thread_ts) if m.get("user") == BOT]

    def find_button(self, channel: str, thread_ts: str, action_id: str) -> dict[str, Any] | None:
        """The newest message in a thread with a button `action_id`, and that button."""
        for message in reversed(self.thread(channel, thread_ts)):
            for block in message.get("blocks") or ():
                for element in block.get("elements") or ():
                    if element.get("action_id") == action_id:
                        return {"message": message, "button": element}
        return None

    def main_requests(self) -> list[Any]:
        return [r for r in self.llm.requests if str(r.messages[0]["content"]).startswith(MAIN_MARK)]

    async def settle(self, within: float = PATIENCE_S) -> None:
        """Wait until every run, task and notification in flight has finished (benchmarks
        at Slack's real pace give it longer than tests)."""
        await until(lambda: not any(not t.done() for t in self.surface.turns._tasks), within)
        await self.baton.tracker.wait_for_children()
        await until(lambda: not any(not t.done() for t in self.surface.turns._tasks), within)


async def until(condition: Callable[[], bool], within: float = PATIENCE_S) -> None:
    """Poll `condition` until it holds; fail the test after `within` seconds."""
    async with asyncio.timeout(within):
        # Polling is the point: the condition is state in fakes, with no event to wait on.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def start_harness(
    tmp_path: Path,
    *,
    rate_budget: RateBudget | None = None,
    trigger_clock: Clock = SYSTEM_CLOCK,
    reveal_after_s: float = 0.0,
    **overrides: Any,
) -> AsyncIterator[SlackHarness]:
    """The bot on the fakes. Slack calls are paced by `rate_budget`: by default Slack's
    limits a hundred times as fast (the fake does not enforce limits unless asked;
    tests of pacing and the benchmarks pass a real `RateBudget()`). Schedules' fire
    times are computed with `trigger_clock` (tests of schedules pass one they drive).
    Runs show their progress message after `reveal_after_s` (production: 2 s).

    The database is SQLite in `tmp_path`, or with BATON_TEST_DATABASE=postgresql a fresh
    PostgreSQL database of its own, dropped afterwards (unless `database_url` is given)."""
    async with contextlib.AsyncExitStack() as stack:
        if "database_url" not in overrides and harness_database_kind() == "postgresql":
            overrides["database_url"] = await stack.enter_async_context(fresh_postgres())
        async for harness in _start_harness(
            tmp_path,
            rate_budget=rate_budget,
            trigger_clock=trigger_clock,
            reveal_after_s=reveal_after_s,
            **overrides,
        ):
            yield harness


async def _start_harness(
    tmp_path: Path,
    *,
    rate_budget: RateBudget | None,
    trigger_clock: Clock,
    reveal_after_s: float,
    **overrides: Any,
) -> AsyncIterator[SlackHarness]:
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="Alice")
        slack.add_user(BOB, "bob", real_name="Bob Dylan", display_name="Bob")
        settings = make_settings(
            tmp_path, llm.url,
            slack_bot_token="xoxb-test", slack_signing_secret=SIGNING_SECRET,
            slack_api_url=slack.url, **overrides,
        )  # fmt: skip
        async with contextlib.AsyncExitStack() as cleanup:
            # Each part is stopped even when stopping another failed (or a start did):
            # a database left open here would be collected during a later test.
            baton = await build_baton(settings)
            cleanup.push_async_callback(baton.close)
            surface = SlackSurface(
                slack_parts(baton),
                approval_poll_s=0.05,
                rate_budget=rate_budget or RateBudget.scaled(TEST_BUDGET_SPEED),
                trigger_clock=trigger_clock,
            )
            # Runs show their progress message (Cancel) at once, as tests click it;
            # tests of the delay itself start the harness with `reveal_after_s`.
            surface.threads.reveal_after_s = reveal_after_s
            await surface.start()
            cleanup.push_async_callback(surface.stop, TEARDOWN_GRACE_S)
            server = HttpServer(surface, host="127.0.0.1", port=0)
            await server.start()
            cleanup.push_async_callback(server.stop)
            http = await cleanup.enter_async_context(aiohttp.ClientSession())
            yield SlackHarness(
                slack=slack, llm=llm, baton=baton, surface=surface, server=server, http=http
            )
