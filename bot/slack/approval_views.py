"""Block Kit for approval requests: the question with buttons, then the outcome."""

from __future__ import annotations

import json
from typing import Any

from bot.store.approvals import ApprovalRecord

APPROVE = "baton_approve"
DENY = "baton_deny"
SHOW_ARGUMENTS = "baton_approval_args"

ARGUMENT_PREVIEW_CHARS = 2_400
VALUE_PREVIEW_CHARS = 400
MODAL_SECTION_CHARS = 2_900
MODAL_MAX_SECTIONS = 95

Block = dict[str, Any]


def _code(text: str) -> str:
    # A run of three backticks inside would end the code block early.
    return "```\n" + text.replace("```", "`\u200b``") + "\n```"


def pretty_arguments(arguments: str) -> str:
    """The exact arguments, indented when they are JSON."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except json.JSONDecodeError:
        return arguments


def preview_arguments(arguments: str) -> tuple[str, bool]:
    """A readable preview with long values shortened; True when something was shortened."""
    try:
        data = json.loads(arguments)
    except json.JSONDecodeError:
        data = None
    shortened = False
    if isinstance(data, dict):
        shown: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, str) and len(value) > VALUE_PREVIEW_CHARS:
                shown[key] = f"{value[:VALUE_PREVIEW_CHARS]}… [{len(value):,} characters]"
                shortened = True
            else:
                shown[key] = value
        text = json.dumps(shown, indent=2, ensure_ascii=False)
    else:
        text = arguments
    if len(text) > ARGUMENT_PREVIEW_CHARS:
        text = f"{text[:ARGUMENT_PREVIEW_CHARS]}\n… [{len(text):,} characters in all]"
        shortened = True
    return text, shortened


def _who(record: ApprovalRecord) -> str:
    if record.agent == "main":
        return "the main agent"
    return f"sub-agent *{record.agent}* (`{record.task_id}`)"


def _summary(record: ApprovalRecord) -> str:
    asked = f" · asked by <@{record.requested_by}>" if record.requested_by else ""
    return (
        f"*{_who(record).capitalize()}* wants to run `{record.tool}`{asked}\n"
        f"*Why it needs approval:* {record.reason}"
    )


def _body(record: ApprovalRecord) -> tuple[list[Block], bool]:
    preview, shortened = preview_arguments(record.arguments)
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _summary(record)[:2_900]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _code(preview)}},
    ]
    return blocks, shortened


def request_message(record: ApprovalRecord, *, timeout_s: float) -> tuple[str, list[Block]]:
    """The question, with Approve and Deny (and the full arguments when shortened)."""
    blocks, shortened = _body(record)
    buttons: list[Block] = [
        {"type": "button", "text": {"type": "plain_text", "text": "Approve"}, "style": "primary",
         "action_id": APPROVE, "value": record.id},
        {"type": "button", "text": {"type": "plain_text", "text": "Deny"}, "style": "danger",
         "action_id": DENY, "value": record.id},
    ]  # fmt: skip
    if shortened:
        buttons.append(
            {"type": "button", "text": {"type": "plain_text", "text": "Show full arguments"},
             "action_id": SHOW_ARGUMENTS, "value": record.id}
        )  # fmt: skip
    blocks.append({"type": "actions", "block_id": f"approval-{record.id}", "elements": buttons})
    minutes = timeout_s / 60
    limit = f"{minutes:g} min" if timeout_s >= 60 else f"{timeout_s:g} s"
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"Approving runs this one call only. Expires in {limit}.",
                }
            ],
        }
    )
    text = f"Approval needed: {record.tool} ({record.reason})"
    return text, blocks


def outcome_line(record: ApprovalRecord, *, timeout_s: float) -> str:
    when = ""
    if record.decided_at is not None:
        epoch = int(record.decided_at.timestamp())
        fallback = record.decided_at.strftime("%Y-%m-%d %H:%M UTC")
        when = f" at <!date^{epoch}^{{date_short_pretty}} {{time}}|{fallback}>"
    by = f" by <@{record.decided_by}>" if record.decided_by else ""
    if record.state == "approved":
        return f"✓ Approved{by}{when}"
    if record.state == "denied":
        return f"✗ Denied{by}{when}"
    if record.state == "expired":
        return f"⌛ Expired{when}: nobody decided within {timeout_s:g} s; the call did not run"
    if record.state == "cancelled":
        return f"⊘ Cancelled{when}: the run stopped before anyone decided"
    return "Waiting for a decision"


def outcome_message(
    record: ApprovalRecord, *, timeout_s: float, note: str | None = None
) -> tuple[str, list[Block]]:
    """The request after its outcome: no buttons; what happened, who, when."""
    blocks, shortened = _body(record)
    line = note or outcome_line(record, timeout_s=timeout_s)
    if shortened:
        blocks.append(
            {"type": "actions", "block_id": f"approval-{record.id}", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Show full arguments"},
                 "action_id": SHOW_ARGUMENTS, "value": record.id},
            ]}
        )  # fmt: skip
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]})
    return f"{record.tool}: {line}", blocks


def _argument_parts(arguments: str) -> list[tuple[str, str]]:
    """(name, exact text) per argument; string values raw, others as JSON."""
    try:
        data = json.loads(arguments)
    except json.JSONDecodeError:
        return [("arguments", arguments)]
    if not isinstance(data, dict):
        return [("arguments", pretty_arguments(arguments))]
    return [
        (str(key), value if isinstance(value, str) else json.dumps(value, indent=2))
        for key, value in data.items()
    ]


def arguments_modal(record: ApprovalRecord) -> dict[str, Any]:
    """Every character of the arguments, each in its own code sections."""
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _summary(record)[:2_900]}}
    ]
    dropped = 0
    for name, value in _argument_parts(record.arguments):
        pieces = [
            value[i : i + MODAL_SECTION_CHARS] for i in range(0, len(value), MODAL_SECTION_CHARS)
        ]
        for index, piece in enumerate(pieces or [""]):
            if len(blocks) >= MODAL_MAX_SECTIONS:
                dropped += len(piece)
                continue
            label = f"*{name}*\n" if index == 0 else ""
            blocks.append(
                {"type": "section", "text": {"type": "mrkdwn", "text": label + _code(piece)}}
            )
    if dropped:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn",
             "text": f"… {dropped:,} more characters do not fit in a Slack view."}]}
        )  # fmt: skip
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Tool call arguments"},
        "close": {"type": "plain_text", "text": "Close"},
        "private_metadata": record.id,
        "blocks": blocks,
    }
