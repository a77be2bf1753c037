"""Posting text to a thread within Slack's limits: split, or uploaded as a file."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.text import MESSAGE_TEXT_LIMIT, AnswerFile, AnswerMessage, plan_answer, split_text

logger = logging.getLogger(__name__)


async def post_messages(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str,
    messages: list[AnswerMessage],
    file: AnswerFile | None = None,
) -> None:
    """Post planned messages (and a file) in order; a block Slack refuses falls back to text."""
    for message in messages:
        try:
            await client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=message.text, blocks=message.blocks
            )
        except SlackApiError as exc:
            if exc.response.get("error") not in {"invalid_blocks", "invalid_blocks_format"}:
                raise
            # Never lose an answer to a rendering problem: send it as plain text.
            logger.warning("Slack refused the blocks (%s); posting text", exc.response["error"])
            for chunk in split_text(message.text, MESSAGE_TEXT_LIMIT):
                await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=chunk)
    if file is not None:
        await client.files_upload_v2(
            channel=channel,
            thread_ts=thread_ts,
            content=file.content,
            filename=file.filename,
            title=file.title,
        )


async def post_answer(
    client: AsyncWebClient, *, channel: str, thread_ts: str, markdown: str
) -> None:
    """Post a run's final answer as its own message(s), whole."""
    plan = plan_answer(markdown)
    await post_messages(
        client, channel=channel, thread_ts=thread_ts, messages=plan.messages, file=plan.file
    )
