"""Socket Mode (SLACK_APP_TOKEN set): the same app over Slack's WebSocket protocol."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from sqlalchemy import text as text_sql

from bot.app import Baton, build_baton
from bot.slack.server import slack_parts
from bot.slack.surface import SlackSurface
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, Reply
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.socket_mode import FakeSocketMode
from tests.slack.harness import ALICE, BOT, next_ts, until


@dataclass
class SocketBot:
    slack: FakeSlackAPI
    llm: FakeOpenAI
    socket: FakeSocketMode
    baton: Baton


@contextlib.asynccontextmanager
async def socket_bot(tmp_path: Path) -> AsyncIterator[SocketBot]:
    """The bot connected over the fake Socket Mode WebSocket, on the fakes."""
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        async with FakeSocketMode(slack) as socket:
            settings = make_settings(
                tmp_path, llm.url, slack_bot_token="xoxb-test", slack_app_token="xapp-test",
                slack_signing_secret=None, slack_api_url=slack.url,
            )  # fmt: skip
            assert settings.socket_mode
            baton = await build_baton(settings)
            surface = SlackSurface(slack_parts(baton))
            await surface.start()
            handler = AsyncSocketModeHandler(surface.app, settings.slack_app_token)
            try:
                await handler.connect_async()
                await socket.wait_connected()
                yield SocketBot(slack=slack, llm=llm, socket=socket, baton=baton)
            finally:
                await handler.close_async()
                await surface.stop(5)
                await baton.close()


def mention_envelope(text: str, ts: str, event_id: str) -> dict[str, Any]:
    return {
        "type": "event_callback", "team_id": "T0001", "event_id": event_id,
        "event_time": int(time.time()),
        "event": {"type": "app_mention", "user": ALICE, "text": text, "ts": ts,
                  "channel": "C1", "event_ts": ts},
    }  # fmt: skip


async def test_a_mention_over_socket_mode_is_acked_and_answered(tmp_path: Path) -> None:
    async with socket_bot(tmp_path) as bot:
        bot.llm.script(Reply(text="Answered over the socket."))
        ts = next_ts()
        text = f"<@{BOT}> hello over the socket"
        bot.slack.add_message("C1", text, ALICE, ts=ts)
        envelope = await bot.socket.send("events_api", mention_envelope(text, ts, "EvSock"))
        await bot.socket.wait_ack(envelope)
        await until(
            lambda: any("Answered over the socket." in str(m)
                        for m in bot.slack.thread_messages("C1", ts))
        )  # fmt: skip
        assert bot.slack.calls_to("apps.connections.open")[0].token == "xapp-test"


async def test_a_message_the_database_cannot_take_is_not_acked_over_socket_mode(
    tmp_path: Path,
) -> None:
    """Unacknowledged, Slack sends the envelope again; the retry, once the database is
    back, is acknowledged and answered (the question is not lost)."""
    async with socket_bot(tmp_path) as bot:
        ts = next_ts()
        text = f"<@{BOT}> are you there?"
        bot.slack.add_message("C1", text, ALICE, ts=ts)
        payload = mention_envelope(text, ts, "EvSockDb")
        async with bot.baton.database.sessions() as db:
            await db.exec(text_sql("ALTER TABLE thread_messages RENAME TO away"))  # type: ignore[call-overload]
            await db.commit()
        first = await bot.socket.send("events_api", payload)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(bot.socket.wait_ack(first), 1.0)
        assert not bot.llm.requests
        async with bot.baton.database.sessions() as db:
            await db.exec(text_sql("ALTER TABLE away RENAME TO thread_messages"))  # type: ignore[call-overload]
            await db.commit()
        bot.llm.script(Reply(text="Here after all."))
        again = await bot.socket.send("events_api", payload)
        await bot.socket.wait_ack(again)
        await until(
            lambda: any("Here after all." in str(m) for m in bot.slack.thread_messages("C1", ts))
        )
