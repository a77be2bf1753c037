"""Posting text to a thread within Slack's limits: split, or uploaded as a file.

An answer is never given up for a rate limit: posts wait out HTTP 429 (beyond the
client's own retries) for a bounded time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.text import MESSAGE_TEXT_LIMIT, AnswerFile, AnswerMessage, plan_answer, split_text

logger = logging.getLogger(__name__)

RATE_LIMIT_PATIENCE_S = 300.0

T = TypeVar("T")


def retry_after(exc: SlackApiError) -> float:
    headers = getattr(exc.response, "headers", None) or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(1.0, float(value))
    except (TypeError, ValueError):
        return 1.0


async def patiently(
    call: Callable[[], Awaitable[T]], *, patience_s: float = RATE_LIMIT_PATIENCE_S
) -> T:
    """Run a Web API call, waiting out rate limits for up to `patience_s` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    while True:
        try:
            return await call()
        except SlackApiError as exc:
            wait = retry_after(exc)
            if exc.response.status_code != 429 or loop.time() + wait > deadline:
                raise
            logger.info("rate limited by Slack; trying again in %.0f s", wait)
            await asyncio.sleep(wait)


async def post_text(client: AsyncWebClient, *, channel: str, thread_ts: str, text: str) -> None:
    """A plain message, split when needed, posted through rate limits."""
    for chunk in split_text(text, MESSAGE_TEXT_LIMIT) or [text]:
        await patiently(
            lambda chunk=chunk: client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=chunk
            )
        )


async def post_messages(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str,
    messages: list[AnswerMessage],
    file: AnswerFile | None = None,
) -> None:
    """Post planned messages (and a file) in order; nothing Slack refuses is lost."""
    for message in messages:
        try:
            await patiently(
                lambda message=message: client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, text=message.text, blocks=message.blocks
                )
            )
        except SlackApiError as exc:
            if exc.response.get("error") not in {"invalid_blocks", "invalid_blocks_format"}:
                raise
            # Never lose an answer to a rendering problem: send it as plain text.
            logger.warning("Slack refused the blocks (%s); posting text", exc.response["error"])
            await post_text(client, channel=channel, thread_ts=thread_ts, text=message.text)
    if file is None:
        return
    try:
        await patiently(
            lambda: client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                content=file.content,
                filename=file.filename,
                title=file.title,
            )
        )
    except SlackApiError as exc:
        # Uploads can be switched off or forbidden: the whole text still gets through.
        logger.warning("file upload failed (%s); posting the text", exc.response.get("error"))
        await post_text(client, channel=channel, thread_ts=thread_ts, text=file.content)


async def post_answer(
    client: AsyncWebClient, *, channel: str, thread_ts: str, markdown: str
) -> None:
    """Post a run's final answer as its own message(s), whole."""
    plan = plan_answer(markdown)
    await post_messages(
        client, channel=channel, thread_ts=thread_ts, messages=plan.messages, file=plan.file
    )


__all__ = ["patiently", "post_answer", "post_messages", "post_text", "retry_after"]
