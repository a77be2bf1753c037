"""What baton.yaml's `schedules`, `webhooks` and `watch` say, checked when it is read.

A cron expression is checked by the library that computes its fire times (cronsim), a
time zone by the zoneinfo database, a webhook's template by its own grammar and a
watch's `match` by RE2: a mistake is refused when the file is read (at start, or by a
reload, which then keeps what ran), never found at the first fire.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import re2
from cronsim import CronSim, CronSimError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from bot.ids import ChannelId, UserId
from bot.triggers.template import TemplateError, placeholders

# A schedule's or webhook's name: it is part of a URL (`/hooks/<name>`) and of a thread's
# first message.
TriggerName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,47}$")]
# A sub-agent run directly (`@name`), or "" for the main agent.
AgentName = Annotated[
    str, StringConstraints(pattern=r"^(?:[a-z0-9](?:[a-z0-9_-]|\.[a-z0-9_-])*\.?)?$", max_length=64)
]
Prompt = Annotated[str, StringConstraints(min_length=1, max_length=8_000)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
_FIELDS = re.compile(r"\S+")


def check_cron(expression: str) -> str:
    """A 5-field cron expression cronsim reads; raises ValueError naming what is wrong."""
    fields = _FIELDS.findall(expression)
    if len(fields) != 5:
        raise ValueError(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
            f"not {len(fields)}"
        )
    try:
        CronSim(" ".join(fields), datetime.now(UTC))
    except CronSimError as exc:
        raise ValueError(f"not a cron expression cron reads: {exc}") from exc
    return " ".join(fields)


def check_timezone(name: str) -> str:
    """An IANA time zone name (Europe/Berlin, UTC); raises ValueError otherwise."""
    if not name or name.startswith("/") or ".." in name:
        raise ValueError(f"{name!r} is not a time zone name such as Europe/Berlin or UTC")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{name!r} is not a time zone name such as Europe/Berlin or UTC") from exc
    return name


def compile_match(pattern: str) -> object:
    """A watch's `match`, compiled with RE2 (linear time: no message can freeze Baton)."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(
            f"not an RE2 regular expression ({exc!s}); RE2 has no backreferences or lookaround"
        ) from exc


class ScheduleConfig(BaseModel):
    """One entry of `schedules`: a prompt run on a cron schedule, in a channel."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TriggerName
    cron: str
    timezone: str = "UTC"
    channel: ChannelId
    prompt: Prompt
    agent: AgentName = ""
    owner: UserId

    @field_validator("cron")
    @classmethod
    def _cron(cls, expression: str) -> str:
        return check_cron(expression)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, name: str) -> str:
        return check_timezone(name)


class WebhookConfig(BaseModel):
    """One entry of `webhooks`: `POST /hooks/<name>`, signed with the secret in `secret_env`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TriggerName
    secret_env: EnvName
    channel: ChannelId
    prompt: Prompt
    agent: AgentName = ""
    owner: UserId

    @field_validator("prompt")
    @classmethod
    def _template(cls, prompt: str) -> str:
        try:
            placeholders(prompt)
        except TemplateError as exc:
            raise ValueError(str(exc)) from exc
        return prompt


class WatchConfig(BaseModel):
    """One entry of `watch`: every new top-level message of a channel starts a run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: ChannelId
    prompt: Prompt
    include_bots: bool = False
    match: str | None = Field(default=None, max_length=1_000)
    # 0: no cap.
    max_runs_per_hour: NonNegativeInt = 20
    agent: AgentName = ""
    owner: UserId

    @field_validator("match")
    @classmethod
    def _match(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            compile_match(pattern)
        return pattern or None


def check_unique(
    schedules: tuple[ScheduleConfig, ...],
    webhooks: tuple[WebhookConfig, ...],
    watch: tuple[WatchConfig, ...],
) -> None:
    """Raise ValueError when a schedule's or webhook's name, or a watched channel, is
    listed twice."""
    for section, what, keys in (
        ("schedules", "name", [s.name for s in schedules]),
        ("webhooks", "name", [w.name for w in webhooks]),
        ("watch", "channel", [w.channel for w in watch]),
    ):
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise ValueError(f"{section}: the {what} {key!r} is listed twice")
            seen.add(key)


class TriggersConfig(BaseModel):
    """The three sections together, as one reload swaps them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schedules: tuple[ScheduleConfig, ...] = ()
    webhooks: tuple[WebhookConfig, ...] = ()
    watch: tuple[WatchConfig, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> Self:
        check_unique(self.schedules, self.webhooks, self.watch)
        return self

    def schedule(self, name: str) -> ScheduleConfig | None:
        return next((s for s in self.schedules if s.name == name), None)

    def webhook(self, name: str) -> WebhookConfig | None:
        return next((w for w in self.webhooks if w.name == name), None)

    def watched(self, channel_id: str) -> WatchConfig | None:
        return next((w for w in self.watch if w.channel == channel_id), None)
