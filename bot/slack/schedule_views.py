"""Block Kit of schedules: the `/tasks schedule` modal, and the lists of `/tasks schedules`
and App Home with their Pause, Resume and Delete buttons.

Every builder is pure and keeps within Slack's limits. A schedule's prompt is what a
person wrote: it is escaped before it goes into mrkdwn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bot.slack.blocks import Block, button, context_block, section_block
from bot.slack.text import escape_mrkdwn
from bot.triggers.scheduler import ScheduleInfo, slack_date

# The modal: its callback id, and where each field sits in `view.state` (block id and
# action id). An error sentence is shown under the field of its block id.
SCHEDULE_VIEW = "baton_schedule_view"
NAME_BLOCK = "baton_schedule_name"
CRON_BLOCK = "baton_schedule_cron"
TIMEZONE_BLOCK = "baton_schedule_timezone"
CHANNEL_BLOCK = "baton_schedule_channel"
PROMPT_BLOCK = "baton_schedule_prompt"
AGENT_BLOCK = "baton_schedule_agent"
_INPUT = "value"  # the action id of every field: the block id says which one it is

# The buttons of a listed schedule; the value says which (`schedule_value`).
PAUSE_SCHEDULE = "baton_schedule_pause"
RESUME_SCHEDULE = "baton_schedule_resume"
DELETE_SCHEDULE = "baton_schedule_delete"

NAME_CHARS = 48
PROMPT_CHARS = 8_000
AGENT_CHARS = 64
PROMPT_PREVIEW_CHARS = 80
# Two blocks a schedule: an ephemeral message holds 50 blocks, App Home 100 (and more).
LIST_SCHEDULES = 20
HOME_SCHEDULES = 15

_USER = re.compile(r"[UW][A-Z0-9]{1,31}")
_CHANNEL = re.compile(r"[CGD][A-Z0-9]{1,31}")
_SOURCES: dict[str, Literal["baton.yaml", "slack"]] = {"yaml": "baton.yaml", "slack": "slack"}
_VALUE = re.compile(r"(yaml|slack):([a-z0-9][a-z0-9._-]{0,47})")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleForm:
    """What a submitted modal holds, each field as typed ("" when empty)."""

    name: str
    cron: str
    timezone: str
    channel_id: str
    prompt: str
    agent: str


# ----------------------------------------------------------------------- modal


def _text_input(
    block_id: str,
    label: str,
    *,
    max_length: int,
    placeholder: str | None = None,
    hint: str | None = None,
    initial: str | None = None,
    multiline: bool = False,
    optional: bool = False,
) -> Block:
    element: Block = {
        "type": "plain_text_input",
        "action_id": _INPUT,
        "max_length": max_length,
        "multiline": multiline,
    }
    if placeholder:
        element["placeholder"] = {"type": "plain_text", "text": placeholder}
    if initial:
        element["initial_value"] = initial
    block: Block = {
        "type": "input",
        "block_id": block_id,
        "label": {"type": "plain_text", "text": label},
        "element": element,
        "optional": optional,
    }
    if hint:
        block["hint"] = {"type": "plain_text", "text": hint}
    return block


def schedule_modal(*, channel_id: str | None) -> dict[str, Any]:
    """The `/tasks schedule` modal: name, cron, time zone, channel, prompt, agent.

    Args:
        channel_id: The channel the command was typed in, chosen at first (None, or a
            DM, leaves the choice empty: a schedule runs in a channel).
    """
    channel: Block = {
        "type": "conversations_select",
        "action_id": _INPUT,
        "placeholder": {"type": "plain_text", "text": "Where it runs"},
        "filter": {"include": ["public", "private"], "exclude_bot_users": True},
    }
    if channel_id and channel_id[0] in "CG":
        channel["initial_conversation"] = channel_id
    return {
        "type": "modal",
        "callback_id": SCHEDULE_VIEW,
        "title": {"type": "plain_text", "text": "New schedule"},
        "submit": {"type": "plain_text", "text": "Create"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            section_block(
                "Baton runs the prompt at each time of the schedule, in a new thread of the "
                "channel, as you: your access, limits and daily budget apply."
            ),
            _text_input(
                NAME_BLOCK,
                "Name",
                max_length=NAME_CHARS,
                placeholder="deps-report",
                hint="Lowercase letters, digits, dots, dashes and underscores.",
            ),
            _text_input(
                CRON_BLOCK,
                "When (cron)",
                max_length=200,
                placeholder="0 9 * * 1",
                hint="5 fields: minute hour day-of-month month day-of-week.",
            ),
            _text_input(
                TIMEZONE_BLOCK,
                "Time zone",
                max_length=64,
                initial="UTC",
                hint="An IANA name such as Europe/Berlin or America/New_York.",
            ),
            {
                "type": "input",
                "block_id": CHANNEL_BLOCK,
                "label": {"type": "plain_text", "text": "Channel"},
                "element": channel,
            },
            _text_input(
                PROMPT_BLOCK,
                "Prompt",
                max_length=PROMPT_CHARS,
                placeholder="List outdated dependencies and open an issue for each.",
                multiline=True,
            ),
            _text_input(
                AGENT_BLOCK,
                "Agent",
                max_length=AGENT_CHARS,
                placeholder="explore",
                hint="A sub-agent to run directly; empty: the main agent.",
                optional=True,
            ),
        ],
    }


def schedule_form(view: object) -> ScheduleForm:
    """The fields of a submitted modal; a field that is missing or not text is ""."""
    values: Any = {}
    if isinstance(view, dict):
        values = (view.get("state") or {}).get("values") or {}

    def field(block_id: str, key: str = "value") -> str:
        block = values.get(block_id) if isinstance(values, dict) else None
        element = block.get(_INPUT) if isinstance(block, dict) else None
        value = element.get(key) if isinstance(element, dict) else None
        return value.strip() if isinstance(value, str) else ""

    return ScheduleForm(
        name=field(NAME_BLOCK),
        cron=field(CRON_BLOCK),
        timezone=field(TIMEZONE_BLOCK),
        channel_id=field(CHANNEL_BLOCK, "selected_conversation"),
        prompt=field(PROMPT_BLOCK),
        agent=field(AGENT_BLOCK),
    )


# ---------------------------------------------------------------------- lists


def schedule_value(info: ScheduleInfo) -> str:
    """A button's value: where the schedule is set, and its name (`slack:deps-report`)."""
    return f"{'yaml' if info.source == 'baton.yaml' else 'slack'}:{info.name}"


def parse_schedule_value(value: object) -> tuple[Literal["baton.yaml", "slack"], str] | None:
    """A button's value as (source, name); None unless it is what `schedule_value` writes."""
    if not isinstance(value, str):
        return None
    match = _VALUE.fullmatch(value)
    return (_SOURCES[match[1]], match[2]) if match else None


def _person(user_id: str | None) -> str:
    if user_id and _USER.fullmatch(user_id):
        return f"<@{user_id}>"
    return escape_mrkdwn(user_id or "nobody")


def _channel(channel_id: str) -> str:
    return f"<#{channel_id}>" if _CHANNEL.fullmatch(channel_id) else escape_mrkdwn(channel_id)


def schedule_state(info: ScheduleInfo) -> str:
    """ "active", "paused by <@U…>" or "paused after 3 failures in a row" (or "shadowed"
    for one made in Slack whose name baton.yaml now uses)."""
    if info.shadowed:
        return "shadowed"
    if not info.paused:
        return "active"
    if info.paused_by == "failures":
        return f"paused after {info.failures:,} failures in a row"
    return f"paused by {_person(info.paused_by)}" if info.paused_by else "paused"


def _preview(prompt: str) -> str:
    flat = " ".join(prompt.split())
    if len(flat) > PROMPT_PREVIEW_CHARS:
        flat = flat[: PROMPT_PREVIEW_CHARS - 1] + "…"
    return escape_mrkdwn(flat)


def schedule_text(info: ScheduleInfo) -> str:
    """A schedule in mrkdwn: name, when, next fire, state, owner, where it was made."""
    when = f"`{escape_mrkdwn(info.cron)}` {escape_mrkdwn(info.timezone)}"
    if info.shadowed:
        upcoming = "does not run"
    elif info.paused:
        upcoming = "no next run while paused"
    elif info.next_fire is not None:
        upcoming = f"next {slack_date(info.next_fire)}"
    else:
        upcoming = "no next run"
    if info.source == "baton.yaml":
        made = "set in baton.yaml"
    else:
        made = f"made in Slack by {_person(info.created_by or info.owner)}"
    lines = [
        f"⏰ *{escape_mrkdwn(info.name)}* · {when} · {upcoming}",
        f"{schedule_state(info)} · in {_channel(info.channel_id)} · owner "
        f"{_person(info.owner)} · {made}",
        f"“{_preview(info.prompt)}”"
        + (f" · agent {escape_mrkdwn(info.agent)}" if info.agent else ""),
    ]
    if info.shadowed:
        lines.append(
            "⚠ baton.yaml now sets a schedule of this name: this one does not run. Delete it, "
            "or make it again under another name."
        )
    return "\n".join(lines)


def _schedule_buttons(info: ScheduleInfo, index: int) -> Block:
    """Pause or Resume (not for a shadowed one: its name's state is baton.yaml's
    schedule's), and Delete for one made in Slack."""
    value = schedule_value(info)
    elements: list[Block] = []
    if info.shadowed:
        pass
    elif info.paused:
        elements.append(button("Resume", RESUME_SCHEDULE, value, style="primary"))
    else:
        elements.append(button("Pause", PAUSE_SCHEDULE, value))
    if info.source == "slack":
        delete = button("Delete", DELETE_SCHEDULE, value, style="danger")
        delete["confirm"] = {
            "title": {"type": "plain_text", "text": "Delete this schedule?"},
            "text": {"type": "plain_text", "text": f"{info.name} stops running for good."},
            "confirm": {"type": "plain_text", "text": "Delete"},
            "deny": {"type": "plain_text", "text": "Keep it"},
            "style": "danger",
        }
        elements.append(delete)
    return {"type": "actions", "block_id": f"baton_schedule_{index}", "elements": elements}


def schedule_list(
    schedules: Sequence[ScheduleInfo],
    *,
    may_change: Callable[[ScheduleInfo], bool],
    limit: int = LIST_SCHEDULES,
) -> list[Block]:
    """Per schedule its text and, for whoever may change it, its buttons (Pause or
    Resume; Delete for one made in Slack: baton.yaml's are changed in the file; a
    shadowed one has only Delete).

    Args:
        schedules: In the order shown; the first `limit` are.
        may_change: Whether the person looking may pause, resume and delete it.
        limit: How many are shown; a line counts the others.
    """
    blocks: list[Block] = []
    for index, info in enumerate(schedules[:limit]):
        blocks.append(section_block(schedule_text(info)))
        if may_change(info):
            blocks.append(_schedule_buttons(info, index))
    if len(schedules) > limit:
        blocks.append(context_block(f"… and {len(schedules) - limit:,} more"))
    return blocks


def channel_schedules_blocks(
    schedules: Sequence[ScheduleInfo],
    *,
    channel_id: str,
    may_change: Callable[[ScheduleInfo], bool],
    notice: str | None = None,
) -> list[Block]:
    """`/tasks schedules`: the schedules of one channel (an ephemeral message).

    Args:
        schedules: The channel's schedules.
        channel_id: The channel.
        may_change: Whether the person looking may change a schedule.
        notice: What the click that asked for the list did, in Baton's mrkdwn, said first.
    """
    blocks: list[Block] = []
    if notice:
        blocks.append(section_block(notice))  # Baton's own words, with mentions
    blocks.append(section_block(f"*Schedules of {_channel(channel_id)}*"))
    if not schedules:
        blocks.append(section_block("No schedules in this channel."))
    blocks += schedule_list(schedules, may_change=may_change)
    blocks.append(
        context_block("`/tasks schedule` makes one; baton.yaml's are changed in the file.")
    )
    return blocks


def home_schedules_blocks(
    schedules: Sequence[ScheduleInfo],
    *,
    everyone: bool,
    may_change: Callable[[ScheduleInfo], bool],
) -> list[Block]:
    """App Home's schedules: the viewer's own, or every one for a scheduler (`everyone`);
    nothing when a person who is no scheduler owns none."""
    if not schedules and not everyone:
        return []
    title = "*Schedules*" if everyone else "*Your schedules*"
    blocks: list[Block] = [{"type": "divider"}, section_block(title)]
    if not schedules:
        blocks.append(section_block("No schedules yet. `/tasks schedule` in a channel makes one."))
    blocks += schedule_list(schedules, may_change=may_change, limit=HOME_SCHEDULES)
    return blocks
