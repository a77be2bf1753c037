"""The shape of the Slack message events Baton acts on, checked before anything is stored.

Slack signs what it sends, but a field missing, of another type or longer than the
database keeps would otherwise fail the store, and a failed store answers Slack 500:
it would send the same event again and again. An event that does not fit is logged
and left alone instead.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from bot.ids import SLACK_ID_CHARS, SlackId

logger = logging.getLogger(__name__)


def channel_of(body: dict[str, Any]) -> str | None:
    """The channel of an interaction payload (a click on a message, or in a view)."""
    channel = (body.get("channel") or {}).get("id")
    return channel or (body.get("container") or {}).get("channel_id")


class MessageEvent(BaseModel):
    """A message or app_mention event from a person, as far as Baton reads it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    channel: SlackId
    ts: SlackId
    user: SlackId
    text: StrictStr = ""
    thread_ts: SlackId | None = None
    channel_type: StrictStr | None = None
    team: SlackId | None = None
    user_team: SlackId | None = None
    files: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("text", mode="before")
    @classmethod
    def _no_text(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("files", mode="before")
    @classmethod
    def _files_as_sent(cls, value: object) -> object:
        # Files that are not a list of objects are left out; the message still counts.
        if not isinstance(value, list):
            if value is not None:
                logger.warning("ignored the files of a message event: not a list")
            return []
        return [entry for entry in value if isinstance(entry, dict)]


def parse_message_event(event: dict[str, Any]) -> MessageEvent | None:
    """`event` as a MessageEvent; None (logged, without its text) if it does not fit."""
    try:
        return MessageEvent.model_validate(event)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in error["loc"]) for error in exc.errors()})
        logger.warning("ignored a message event that does not fit: %s", ", ".join(fields))
        return None


def slack_id_or_none(value: object) -> str | None:
    """A team or enterprise id from the envelope, if it is one (else None)."""
    return value if isinstance(value, str) and 0 < len(value) <= SLACK_ID_CHARS else None
