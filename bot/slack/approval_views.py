"""Block Kit for approval requests: the question with buttons, then the outcome.

Everything a model wrote is escaped before Slack sees it: an argument holding
`<!channel>` or a disguised link must show as typed, never ping or mislead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from bot.describe import json_arguments, tool_summary
from bot.slack.blocks import code_sections
from bot.slack.text import escape_mrkdwn
from bot.store.approvals import ApprovalRecord

APPROVE = "baton_approve"
DENY = "baton_deny"
SHOW_ARGUMENTS = "baton_approval_args"

VALUE_PREVIEW_CHARS = 400
KEY_CHARS = 100
SUMMARY_CHARS = 2_900
MODAL_BLOCKS_PER_PAGE = 90

Block = dict[str, Any]


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def preview_arguments(arguments: str) -> tuple[str, bool]:
    """A readable preview with long values shortened; True when something was shortened."""
    data = json_arguments(arguments)
    shortened = False
    if isinstance(data, dict):
        shown: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, str) and len(value) > VALUE_PREVIEW_CHARS:
                shown[key] = f"{value[:VALUE_PREVIEW_CHARS]}… [{len(value):,} characters]"
                shortened = True
            else:
                shown[key] = value
        return json.dumps(shown, indent=2, ensure_ascii=False), shortened
    return arguments, shortened


def _who(record: ApprovalRecord) -> str:
    if record.agent == "main":
        return "The main agent"
    return f"Sub-agent *{escape_mrkdwn(record.agent)}* (`{escape_mrkdwn(record.task_id or '')}`)"


def _summary(record: ApprovalRecord) -> str:
    asked = f" · asked by <@{record.requested_by}>" if record.requested_by else ""
    text = (
        f"{_who(record)} wants to run `{escape_mrkdwn(record.tool)}`{asked}\n"
        f"*Why it needs approval:* {escape_mrkdwn(record.reason)}"
    )
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _body(record: ApprovalRecord) -> tuple[list[Block], bool]:
    preview, shortened = preview_arguments(record.arguments)
    sections = code_sections(preview.splitlines() or [""])
    if len(sections) > 1:
        shortened = True
    blocks = [_section(_summary(record)), _section(sections[0])]
    if len(sections) > 1:
        blocks.append(_context("… the arguments go on; *Show full arguments* has all of them."))
    return blocks, shortened


def _decision_button(text: str, style: str, action_id: str, value: str) -> Block:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "style": style,
        "action_id": action_id,
        "value": value,
    }


def _show_button(value: str, text: str = "Show full arguments") -> Block:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": SHOW_ARGUMENTS,
        "value": value,
    }


def request_message(
    record: ApprovalRecord, *, timeout_s: float, who_may_decide: str | None = None
) -> tuple[str, list[Block]]:
    """The question, with Approve and Deny (and the full arguments when shortened).

    Args:
        record: The pending request.
        timeout_s: How long it waits for a decision.
        who_may_decide: Who may approve, as mentions (`Deciders.who_may_decide`).
    """
    blocks, shortened = _body(record)
    if who_may_decide:
        blocks.append(_context(f"*Who may decide:* {who_may_decide}"))
    buttons = [
        _decision_button("Approve", "primary", APPROVE, record.id),
        _decision_button("Deny", "danger", DENY, record.id),
    ]
    if shortened:
        buttons.append(_show_button(f"{record.id}:0"))
    blocks.append({"type": "actions", "block_id": f"approval-{record.id}", "elements": buttons})
    limit = f"{timeout_s / 60:g} min" if timeout_s >= 60 else f"{timeout_s:g} s"
    blocks.append(_context(f"Approving runs this one call only. Expires in {limit}."))
    return f"Approval needed: {escape_mrkdwn(record.tool)}", blocks


def _when(record: ApprovalRecord) -> str:
    """` at <date>` in each reader's time zone (UTC as the fallback), or nothing."""
    if record.decided_at is None:
        return ""
    epoch = int(record.decided_at.timestamp())
    fallback = record.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f" at <!date^{epoch}^{{date_short_pretty}} {{time_secs}}|{fallback}>"


def outcome_line(record: ApprovalRecord, *, timeout_s: float) -> str:
    """What happened to a request, who decided and when."""
    when = _when(record)
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
            {
                "type": "actions",
                "block_id": f"approval-{record.id}",
                "elements": [_show_button(f"{record.id}:0")],
            }
        )
    blocks.append(_context(line))
    return f"{escape_mrkdwn(record.tool)}: {line}", blocks


def decision_log_line(record: ApprovalRecord, *, timeout_s: float) -> str:
    """One task-log line: `✓ Approved by <@U1> at 14:03:12 UTC: bash · ap-…`."""
    at = f" at {record.decided_at:%H:%M:%S} UTC" if record.decided_at else ""
    by = f" by <@{record.decided_by}>" if record.decided_by else ""
    outcome = {
        "approved": f"✓ Approved{by}{at}",
        "denied": f"✗ Denied{by}{at}",
        "expired": f"⌛ Expired{at} (nobody decided within {timeout_s:g} s)",
        "cancelled": f"⊘ Cancelled{at} (the run stopped before anyone decided)",
    }.get(record.state, f"Waiting for a decision since {record.created_at:%H:%M:%S} UTC")
    return f"{outcome}: {record.tool} · {record.id}"


def recent_decisions_blocks(
    records: Sequence[ApprovalRecord],
    *,
    timeout_s: float,
    redact: Callable[[str], str] | None = None,
    preview_chars: int = 60,
) -> list[Block]:
    """A short "Recent decisions" list (for the `/tasks` panel), newest first.

    Args:
        records: What `ApprovalStore.recent_decisions` returned.
        timeout_s: The approval timeout, named in expired lines.
        redact: When given, each line also shows the call's arguments in short
            (`tool_summary`), passed through it first (credentials out).
        preview_chars: How much of the arguments to show.
    """
    blocks: list[Block] = [_section("*Recent decisions*")]
    if not records:
        blocks.append(_context("No approval requests were decided in this channel yet."))
        return blocks
    for record in records:
        line = f"{outcome_line(record, timeout_s=timeout_s)} · `{escape_mrkdwn(record.tool)}`"
        if record.agent != "main":
            line += f" for {escape_mrkdwn(record.agent)} (`{escape_mrkdwn(record.task_id or '')}`)"
        if redact is not None:
            shown = tool_summary(record.arguments, limit=preview_chars, redact=redact)
            # A backtick would close the code span early.
            shown = shown.replace("`", "'")
            line += f" `{escape_mrkdwn(shown)}`"
        line += f" · {escape_mrkdwn(record.id)}"
        blocks.append(_context(line))
    return blocks


def _argument_blocks(record: ApprovalRecord) -> list[Block]:
    """Every character of every argument, as labelled, escaped code sections."""
    data = json_arguments(record.arguments)
    if isinstance(data, dict):
        parts = [
            (str(key), value if isinstance(value, str) else json.dumps(value, indent=2))
            for key, value in data.items()
        ]
    else:
        parts = [("arguments", record.arguments)]
    blocks: list[Block] = []
    for name, value in parts:
        label = name if len(name) <= KEY_CHARS else name[: KEY_CHARS - 1] + "…"
        blocks.append(_context(f"*{escape_mrkdwn(label)}*"))
        blocks.extend(_section(text) for text in code_sections(value.split("\n")))
    return blocks


def arguments_modal(record: ApprovalRecord, *, page: int = 0) -> dict[str, Any]:
    """The full arguments, paged when they exceed one view; nothing is left out."""
    blocks = _argument_blocks(record)
    pages = max(1, -(-len(blocks) // MODAL_BLOCKS_PER_PAGE))
    page = min(max(page, 0), pages - 1)
    shown: list[Block] = [_section(_summary(record))]
    if pages > 1:
        shown.append(_context(f"Page {page + 1} of {pages}"))
    shown += blocks[page * MODAL_BLOCKS_PER_PAGE : (page + 1) * MODAL_BLOCKS_PER_PAGE]
    buttons = []
    if page > 0:
        buttons.append(_show_button(f"{record.id}:{page - 1}", "Previous page"))
    if page < pages - 1:
        buttons.append(_show_button(f"{record.id}:{page + 1}", "Next page"))
    for index, button in enumerate(buttons):
        # One button per block: Slack wants action ids unique within a block.
        shown.append({"type": "actions", "block_id": f"page-{index}", "elements": [button]})
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Tool call arguments"},
        "close": {"type": "plain_text", "text": "Close"},
        "private_metadata": record.id,
        "blocks": shown,
    }
