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

from bot.slack.text import (
    MESSAGE_BLOCKS_LIMIT,
    MESSAGE_TEXT_LIMIT,
    AnswerFile,
    AnswerMessage,
    plan_answer,
    split_text,
)

logger = logging.getLogger(__name__)

RATE_LIMIT_PATIENCE_S = 300.0
# The notification text of a message that carries only an answer's footer.
FOOTER_TEXT = "Was this answer useful?"

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


async def post_text(
    client: AsyncWebClient, *, channel: str, thread_ts: str | None, text: str
) -> None:
    """A plain message, split when needed, posted through rate limits."""
    for chunk in split_text(text, MESSAGE_TEXT_LIMIT) or [text]:
        await patiently(
            lambda chunk=chunk: client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=chunk
            )
        )


def _refused_blocks(exc: SlackApiError) -> bool:
    return exc.response.get("error") in {"invalid_blocks", "invalid_blocks_format"}


async def _post_blocks(
    client: AsyncWebClient, *, channel: str, thread_ts: str | None, text: str, blocks: list[dict]
) -> bool:
    """Post one message with blocks; False (nothing posted) if Slack refused the blocks."""
    try:
        await patiently(
            lambda: client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=text, blocks=blocks
            )
        )
    except SlackApiError as exc:
        if not _refused_blocks(exc):
            raise
        logger.warning("Slack refused the blocks (%s)", exc.response["error"])
        return False
    return True


async def post_messages(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str | None,
    messages: list[AnswerMessage],
    file: AnswerFile | None = None,
    footer: list[dict] | None = None,
) -> None:
    """Post planned messages (and a file) in order; nothing Slack refuses is lost.

    `footer` blocks (an answer's feedback buttons) end the answer: they go on its
    last message when it has room for them, else (after a file, a full last message
    or a message Slack refused) in a short message of their own at the end. Slack
    refusing the footer itself costs only the footer.
    """
    footer = footer or []
    on_last = (
        bool(footer)
        and file is None
        and bool(messages)
        and len(messages[-1].blocks) + len(footer) <= MESSAGE_BLOCKS_LIMIT
    )
    footer_posted = not footer
    for number, message in enumerate(messages, start=1):
        where = {"channel": channel, "thread_ts": thread_ts, "text": message.text}
        if on_last and number == len(messages):
            if await _post_blocks(client, **where, blocks=message.blocks + footer):
                footer_posted = True
                continue
            # Either part may be at fault: the answer goes on alone, the footer after it.
        if not await _post_blocks(client, **where, blocks=message.blocks):
            # Never lose an answer to a rendering problem: send it as plain text.
            await post_text(client, channel=channel, thread_ts=thread_ts, text=message.text)
    if file is not None:
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
    if not footer_posted and not await _post_blocks(
        client, channel=channel, thread_ts=thread_ts, text=FOOTER_TEXT, blocks=footer
    ):
        logger.warning("the answer's footer was refused; the answer went without it")


async def post_answer(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str,
    markdown: str,
    footer: list[dict] | None = None,
) -> None:
    """Post a run's final answer as its own message(s), whole, `footer` at its end."""
    plan = plan_answer(markdown)
    await post_messages(
        client,
        channel=channel,
        thread_ts=thread_ts,
        messages=plan.messages,
        file=plan.file,
        footer=footer,
    )


__all__ = ["FOOTER_TEXT", "patiently", "post_answer", "post_messages", "post_text", "retry_after"]
