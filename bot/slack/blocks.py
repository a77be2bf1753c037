"""Block Kit views: live progress, task post-backs, the /tasks panel, the log modal, App Home.

Every builder is pure and keeps within Slack's limits (see `bot.slack.text`): long
text is split over several blocks, pages or a file, never silently cut. Text that
comes from people or models is escaped before it goes into mrkdwn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.describe import describe_end, format_duration, format_tokens, task_mark
from bot.outcomes import RunEnd
from bot.slack.text import (
    ANSWER_PREVIEW_CHARS,
    BUTTON_VALUE_LIMIT,
    CONTEXT_ELEMENT_TEXT_LIMIT,
    HEADER_TEXT_LIMIT,
    MESSAGE_BLOCKS_LIMIT,
    PRIVATE_METADATA_LIMIT,
    SECTION_TEXT_LIMIT,
    VIEW_BLOCKS_LIMIT,
    AnswerFile,
    AnswerMessage,
    defuse_pings,
    escape_mrkdwn,
    fit_text,
    format_age,
    mrkdwn_fallback,
    split_text,
)
from bot.store.runs import QUEUED, RUNNING, RunRecord
from bot.store.tasks import TaskDetail, TaskRecord
from bot.subagents.handoff import Handoff, render_handoff

Block = dict[str, Any]

CANCEL_RUN = "baton_cancel_run"
VIEW_LOG = "baton_view_log"
CANCEL_TASK = "baton_cancel_task"
LOG_PAGE = "baton_log_page"
FEEDBACK_ACTION = "answer_feedback"
RETRY_RUN = "baton_retry_run"
STEER_TASK = "baton_steer_task"
MERGE_TASK = "baton_merge_task"
DISCARD_TASK = "baton_discard_task"
# The Steer modal: its callback id, and where its text input sits in `view.state`.
STEER_VIEW = "baton_steer_view"
STEER_INPUT_BLOCK = "baton_steer_input"
STEER_INPUT = "baton_steer_text"
STEER_TEXT_LIMIT = 4_000


PROGRESS_LINES = 12
DETAIL_LOG_LINES = 10
PANEL_TASKS = 20  # two blocks each, plus the header and the "… and N more" line: < 50
HOME_TASKS = 15
PROMPT_PREVIEW_CHARS = 48
STATE_REASON_CHARS = 120
TASK_RESULT_INLINE_LIMIT = 11_000
# A progress line longer than this is shortened; the full line is in the task log.
PROGRESS_LINE_CHARS = 300
CHANGE_PREVIEW_CHARS = 300
# The detail view shows this many sections of a handoff; View log shows all of it.
DETAIL_HANDOFF_SECTIONS = 3

_CODE_OVERHEAD = len("```\n\n```")
_CODE_TOKEN = re.compile(r"&(?:amp|lt|gt);|`\u200b``|.", re.DOTALL)
# A feedback button's value: the rating, then the run id (as `runs.id` allows).
# How Baton records who cancelled a task (bot/slack/listeners.py): a user mention.
_CANCELLED_BY = re.compile(r"cancelled by <@([UW][A-Z0-9]{1,20})>")
_FEEDBACK_VALUE = re.compile(r"(good|bad):([A-Za-z0-9_-]{1,64})")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPostBack:
    """The message posted in a thread when a background task ends, and its file if any."""

    text: str
    blocks: list[Block]
    file: AnswerFile | None


# ------------------------------------------------------------------ primitives


def _clip(text: str, limit: int) -> str:
    """Shorten a label (never content) to `limit` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(mrkdwn: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}


def _context(mrkdwn: str) -> Block:
    text = _clip(mrkdwn, CONTEXT_ELEMENT_TEXT_LIMIT) if mrkdwn.strip() else "…"
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def section_block(mrkdwn: str) -> Block:
    """A section of escaped mrkdwn, clipped to Slack's limit."""
    return _section(_clip(mrkdwn, SECTION_TEXT_LIMIT))


def context_block(mrkdwn: str) -> Block:
    """A context line of mrkdwn, clipped to Slack's limit."""
    return _context(mrkdwn)


def button(text: str, action_id: str, value: str, *, style: str | None = None) -> Block:
    """A button with `value` (short: Slack allows 2,000 characters)."""
    return _button(text, action_id, value, style=style)


def _button(text: str, action_id: str, value: str, *, style: str | None = None) -> Block:
    if len(value) > BUTTON_VALUE_LIMIT:
        # Ids are short; a longer value is a bug that Slack would reject anyway.
        raise ValueError(f"button value of {len(value)} characters for {action_id}")
    button: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _code_line(line: str) -> str:
    # Three backticks inside a log line would end the code block early.
    return escape_mrkdwn(line).replace("```", "`\u200b``")


def _code(lines: Sequence[str]) -> str:
    return "```\n" + "\n".join(lines) + "\n```"


def _code_tail(lines: Sequence[str], count: int) -> str | None:
    """The last `count` lines as one code block within a section's limit, or None."""
    shown = [_code_line(_clip(line, PROGRESS_LINE_CHARS)) for line in lines[-count:]]
    while shown and sum(len(line) + 1 for line in shown) + _CODE_OVERHEAD > SECTION_TEXT_LIMIT:
        shown.pop(0)  # the oldest lines go first
    return _code(shown) if shown else None


def code_sections(lines: Sequence[str]) -> list[str]:
    """All lines, packed into as few code blocks of ≤ 3,000 characters as they fit."""
    room = SECTION_TEXT_LIMIT - _CODE_OVERHEAD
    sections: list[str] = []
    batch: list[str] = []
    size = -1
    for line in lines:
        for piece in _escaped_pieces(line, room):
            if batch and size + 1 + len(piece) > room:
                sections.append(_code(batch))
                batch, size = [], -1
            batch.append(piece)
            size += 1 + len(piece)
    if batch:
        sections.append(_code(batch))
    return sections


def _escaped_pieces(line: str, room: int) -> list[str]:
    """A line as code text, in pieces of at most `room` characters (usually one)."""
    safe = _code_line(line)
    if len(safe) <= room:
        return [safe]
    pieces: list[str] = []
    current = ""
    for token in _CODE_TOKEN.findall(safe):  # never cut inside an entity
        if len(current) + len(token) > room:
            pieces.append(current)
            current = ""
        current += token
    pieces.append(current)
    return pieces


def _text_sections(raw: str, *, limit: int = SECTION_TEXT_LIMIT) -> list[str]:
    """Plain text, escaped, split into pieces of at most `limit` characters."""
    return _escaped_split(raw, limit=limit, raw_limit=limit)


def _escaped_split(raw: str, *, limit: int, raw_limit: int) -> list[str]:
    pieces: list[str] = []
    for chunk in split_text(raw, raw_limit):
        escaped = escape_mrkdwn(chunk)
        if len(escaped) <= limit:
            pieces.append(escaped)
        else:  # escaping made it grow: split this chunk finer
            pieces.extend(_escaped_split(chunk, limit=limit, raw_limit=max(1, raw_limit // 2)))
    return pieces


def _markdown_sections(markdown: str) -> list[str]:
    """Markdown as mrkdwn, split into section-sized pieces."""
    return split_text(mrkdwn_fallback(markdown), SECTION_TEXT_LIMIT)


# ----------------------------------------------------------------- live progress


def progress_blocks(
    lines: Sequence[str], *, run_id: str, running: bool, status: str, retry: bool = False
) -> list[Block]:
    """The live progress message of a run.

    Args:
        lines: Progress lines so far, oldest first; the last 12 are shown.
        run_id: The run the Cancel (or Retry) button is about.
        running: Whether the run still runs (the Cancel button shows only then).
        status: One mrkdwn line, e.g. "Working…" or "✓ Done · 3 turns · 12.3 s".
        retry: The run ended interrupted by a restart: a Retry button runs it again.

    Returns:
        The message's blocks.
    """
    blocks: list[Block] = [_context(status)]
    tail = _code_tail(lines, PROGRESS_LINES)
    if tail:
        blocks.append(_section(tail))
    if running:
        blocks.append(
            {
                "type": "actions",
                "elements": [_button("Cancel", CANCEL_RUN, run_id, style="danger")],
            }
        )
    elif retry:
        blocks.append({"type": "actions", "elements": [_retry_button(run_id)]})
    return blocks


def _retry_button(run_id: str) -> Block:
    return _button("Retry", RETRY_RUN, run_id, style="primary")


def interrupted_message(run_id: str, *, retry: bool) -> TaskPostBack:
    """What a thread is told of a run that a restart interrupted before it could post
    anything (or when Slack delivers its question again): Retry runs it again."""
    text = "✗ A run in this thread was interrupted by a restart."
    if retry:
        text += " Retry runs its question again, with the thread's history so far."
    blocks: list[Block] = [_section(text)]
    if retry:
        blocks.append({"type": "actions", "elements": [_retry_button(run_id)]})
    return TaskPostBack(text=text, blocks=blocks, file=None)


def ended_message(run_id: str, end: RunEnd) -> TaskPostBack:
    """How a run that showed nothing else ended (cancelled before its progress showed,
    or interrupted): its final state in words, and Retry when a restart stopped it."""
    if end.retryable:
        return interrupted_message(run_id, retry=True)
    said = describe_end(end)
    return TaskPostBack(text=said, blocks=[_context(said)], file=None)


def progress_text(lines: Sequence[str], status: str) -> str:
    """The fallback `text` of the progress message: the status and the latest lines."""
    recent = [_clip(line, PROGRESS_LINE_CHARS) for line in lines[-PROGRESS_LINES:]]
    return fit_text("\n".join([status, *recent]), SECTION_TEXT_LIMIT)


# ------------------------------------------------------------------- task summary


def _mark(task: TaskRecord) -> str:
    return task_mark(task.state, unknown="•")


def state_in_words(task: TaskRecord) -> str:
    """The task's state as people say it: running, done, failed (why), cancelled (by
    whom), interrupted (by a restart)."""
    reason = " ".join((task.error or "").split())
    if task.state == "completed":
        return "done"
    if task.state == "running":
        return "running"
    if task.state == "cancelled":
        return reason if reason.startswith("cancelled") else "cancelled"
    if reason.startswith("interrupted"):
        return _clip(reason.split(";")[0], STATE_REASON_CHARS)
    return f"failed: {_clip(reason, STATE_REASON_CHARS)}" if reason else "failed"


def _title(task: TaskRecord) -> str:
    return task.description.strip() or "(untitled)"


def _prompt_preview(prompt: str) -> str:
    flat = " ".join(prompt.split())
    return _clip(flat, PROMPT_PREVIEW_CHARS + 1) if len(flat) > PROMPT_PREVIEW_CHARS else flat


def _usage(task: TaskRecord) -> str:
    return format_tokens(task.prompt_tokens, task.completion_tokens)


def _with_canceller(escaped: str, task: TaskRecord) -> str:
    """An escaped line in which the person who cancelled `task` shows as a mention (Baton
    wrote "cancelled by <@U…>" itself); any other `<@…>` stays escaped text."""
    match = _CANCELLED_BY.fullmatch(" ".join((task.error or "").split()))
    if task.state != "cancelled" or match is None:
        return escaped
    return escaped.replace(f"cancelled by &lt;@{match[1]}&gt;", f"cancelled by <@{match[1]}>")


def _headline(task: TaskRecord) -> str:
    """ "✓ explore · task-explore-3 · done · 12.3 s · 1,234 in / 56 out tokens"."""
    parts = [f"{_mark(task)} {task.agent}", task.id, state_in_words(task)]
    if task.duration_s is not None:
        parts.append(format_duration(task.duration_s))
    if task.state != "running":
        parts.append(_usage(task))
    return " · ".join(parts)


def _age(task: TaskRecord, now: datetime) -> str:
    return format_age((now - task.created_at).total_seconds())


def _summary(task: TaskRecord, now: datetime) -> str:
    """Two mrkdwn lines: mark, agent, title and id; the prompt's start, age and usage."""
    first = (
        f"{_mark(task)} *{escape_mrkdwn(task.agent)}* · "
        f"{escape_mrkdwn(_clip(_title(task), 200))} · `{escape_mrkdwn(task.id)}` · "
        f"{escape_mrkdwn(state_in_words(task))}"
    )
    second = f"“{escape_mrkdwn(_prompt_preview(task.prompt))}” · {_age(task, now)}"
    if task.state != "running":
        second += f" · {_usage(task)}"
    branch = _branch_line(task)
    return f"{first}\n{second}" + (f"\n{branch}" if branch else "")


_MERGE_WORDS = {
    "pending": "waiting to be merged or discarded",
    "merging": "being merged",
    "merged": "merged",
    "discarded": "discarded",
}


def _branch_line(task: TaskRecord, *, with_change: bool = True) -> str | None:
    """ "⎇ `baton/task-coder-3` · waiting to be merged or discarded · 2 files changed"."""
    if not task.branch:
        return None
    parts = [f"⎇ `{escape_mrkdwn(_clip(task.branch, 200))}`"]
    if task.merge_state:
        parts.append(_MERGE_WORDS.get(task.merge_state, task.merge_state))
    change = " ".join((task.change or "").split())
    if change and with_change:
        parts.append(escape_mrkdwn(_clip(change, CHANGE_PREVIEW_CHARS)))
    return " · ".join(parts)


def _task_actions(task: TaskRecord, *, may_cancel: bool, block_id: str) -> Block:
    """View log for everyone who sees the task; Steer and Cancel while it runs, Merge and
    Discard while its branch waits, for whoever may cancel it."""
    elements = [_button("View log", VIEW_LOG, task.id)]
    if may_cancel and task.state == "running":
        elements.append(_button("Steer", STEER_TASK, task.id))
        elements.append(_button("Cancel", CANCEL_TASK, task.id, style="danger"))
    elif may_cancel and task.branch and task.merge_state == "pending":
        elements.append(_button("Merge", MERGE_TASK, task.id, style="primary"))
        elements.append(_button("Discard", DISCARD_TASK, task.id, style="danger"))
    return {"type": "actions", "block_id": block_id, "elements": elements}


def _handoff_sections(task: TaskRecord) -> list[str]:
    """The task's handoff (status, answer, evidence, limitations, claims) as escaped
    section texts, the first naming the status; empty when it has none (or it is corrupt)."""
    handoff = Handoff.from_json(task.handoff) if task.handoff else None
    if handoff is None:
        return []
    return [f"*Handoff* · {handoff.status}", *_text_sections(render_handoff(handoff))]


def _counts(running: int, done: int) -> str:
    return f"⚙ {running} running · {done} done"


# --------------------------------------------------------------------- post-back


def _outcome_markdown(task: TaskRecord) -> str:
    """What a task produced, as Markdown: its result, and why it stopped if it failed."""
    # What the child wrote pings nobody (`<!channel>`, `<@U…>` are defused); Baton's own
    # words (who cancelled it) keep their mentions.
    result = defuse_pings((task.result or "").strip())
    if task.state == "completed":
        handoff = Handoff.from_json(task.handoff) if task.handoff else None
        if handoff is None:
            return result or "_(no result text)_"
        # The status word first, and what the child says it could not do after.
        parts = [f"**Status:** {handoff.status}", result or "_(no result text)_"]
        if handoff.limitations:
            parts.append(
                "**Limitations:**\n"
                + "\n".join(f"- {defuse_pings(item)}" for item in handoff.limitations)
            )
        return "\n\n".join(parts)
    if task.state == "running":
        return "_Still running._"
    reason = (task.error or "").strip() or "no reason given"
    parts = [f"**{task.state.capitalize()}:** {reason}"]
    if result:
        parts.append(f"**Partial result:**\n\n{result}")
    return "\n\n".join(parts)


def task_finished_message(task: TaskRecord) -> TaskPostBack:
    """The message posted in the thread when a background task ends.

    A result longer than about 11,000 characters is shown from its beginning and
    attached whole as `{task.id}.md`.

    Args:
        task: The finished task.

    Returns:
        The fallback text, the blocks, and the file with the whole result if needed.
    """
    headline = _headline(task)
    body = _outcome_markdown(task)
    file = None
    shown = body
    if len(body) > TASK_RESULT_INLINE_LIMIT:
        filename = f"{task.id}.md"
        preview = split_text(body, ANSWER_PREVIEW_CHARS)[0]
        note = f"_… the full result ({len(body):,} characters) is in the attached file {filename}._"
        shown = f"{preview}\n\n{note}"
        file = AnswerFile(filename=filename, title=f"Result of {task.id}", content=body)
    line = _with_canceller(escape_mrkdwn(headline), task)
    blocks = [_context(line), {"type": "markdown", "text": shown}]
    text = fit_text(f"{line}\n{mrkdwn_fallback(shown)}")
    return TaskPostBack(text=text, blocks=blocks, file=file)


def error_message(text: str) -> AnswerMessage:
    """A failure reported in the thread: "✗ " and the reason, escaped, never cut silently."""
    message = f"✗ {text.strip() or 'something went wrong'}"
    pieces = _text_sections(message)
    blocks = [_section(piece) for piece in pieces[: MESSAGE_BLOCKS_LIMIT - 1]]
    if len(pieces) >= MESSAGE_BLOCKS_LIMIT:
        hidden = sum(len(piece) for piece in pieces[MESSAGE_BLOCKS_LIMIT - 1 :])
        blocks.append(_context(f"… {hidden:,} more characters of this error are not shown."))
    return AnswerMessage(text=fit_text(escape_mrkdwn(message)), blocks=blocks)


# ------------------------------------------------------------- triggered runs

TRIGGERED_RUNS = 10
_TRIGGER_MARKS = {"schedule": "⏰", "webhook": "🪝", "watch": "👀"}
_SLACK_ID = re.compile(r"[A-Z0-9]{1,32}")
_THREAD_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
_TEAM_DOMAIN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def trigger_in_words(trigger: str) -> str:
    """What started a run, for people: "⏰ schedule deps-report", "🪝 webhook new-issue",
    "👀 watched channel"."""
    kind, _, name = trigger.partition(":")
    mark = _TRIGGER_MARKS.get(kind, "•")
    if kind == "watch":
        return f"{mark} watched channel"
    return f"{mark} {escape_mrkdwn(kind)} {escape_mrkdwn(_clip(name, 96))}"


def _run_state(run: RunRecord) -> str:
    if run.state == RUNNING:
        return "running"
    if run.state == QUEUED:
        return "waiting for a slot"
    return "finished"


def thread_link(run: RunRecord, team_domain: str | None) -> str:
    """The run's thread as a Slack link when the workspace's domain is known (Slack's
    archive URL, built without a call), else its channel and timestamp."""
    channel, ts = run.channel_id, run.thread_ts
    if not (_SLACK_ID.fullmatch(channel) and _THREAD_TS.fullmatch(ts)):
        return f"thread {escape_mrkdwn(ts)}"
    if team_domain and _TEAM_DOMAIN.fullmatch(team_domain):
        url = f"https://{team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        return f"<{url}|thread>"
    return f"<#{channel}> thread {ts}"


def triggered_runs_block(
    runs: Sequence[RunRecord],
    *,
    now: datetime,
    team_domain: str | None = None,
    title: str = "Started by triggers",
) -> Block | None:
    """One section of runs that triggers started, newest first: the trigger in words,
    state, age and the thread; None when there are none."""
    if not runs:
        return None
    lines = [f"*{title}*"]
    for run in runs[:TRIGGERED_RUNS]:
        age = format_age((now - run.created_at).total_seconds())
        lines.append(
            f"{trigger_in_words(run.trigger or '')} · {_run_state(run)} · {age} · "
            f"{thread_link(run, team_domain)}"
        )
    return _section(_clip("\n".join(lines), SECTION_TEXT_LIMIT))


# ------------------------------------------------------------------ /tasks panel


def tasks_panel(
    tasks: Sequence[TaskRecord],
    *,
    now: datetime,
    running: int,
    done: int,
    viewer_may_cancel: Callable[[TaskRecord], bool],
    usage: str | None = None,
    instructions: str | None = None,
    extra: Sequence[Block] = (),
    pulls: str | None = None,
    triggered: Block | None = None,
) -> list[Block]:
    """The ephemeral `/tasks` panel of one channel.

    Args:
        tasks: The channel's tasks, newest first; the first 20 are shown.
        now: The current time, for ages.
        running: How many of the channel's tasks run.
        done: How many have finished.
        viewer_may_cancel: Whether the person looking may cancel a task.
        usage: One line of today's token usage (the viewer's and the channel's).
        instructions: One line naming the project instructions the channel's runs read.
        pulls: One line of the pull requests of the channel's threads (Slack links,
            made by Baton from what it stored).
        extra: Blocks shown after the tasks (recent approval decisions).
        triggered: The channel's runs that triggers started (`triggered_runs_block`),
            shown after the tasks.

    Returns:
        The panel's blocks: counts, usage, then per task a summary and its buttons.
    """
    blocks: list[Block] = [_section(f"*{_counts(running, done)}*")]
    if usage:
        blocks.append(_context(escape_mrkdwn(_clip(usage, 2_000))))
    if instructions:
        blocks.append(_context(escape_mrkdwn(_clip(instructions, 2_000))))
    if pulls:
        blocks.append(_context(pulls))
    blocks += _tasks_list(tasks, now=now, running=running, done=done, may_cancel=viewer_may_cancel)
    if triggered is not None:
        blocks.append(triggered)
    blocks += extra
    return blocks[:MESSAGE_BLOCKS_LIMIT]


def _tasks_list(
    tasks: Sequence[TaskRecord],
    *,
    now: datetime,
    running: int,
    done: int,
    may_cancel: Callable[[TaskRecord], bool],
) -> list[Block]:
    blocks: list[Block] = []
    if not tasks:
        blocks.append(
            _section("No tasks in this channel yet. Mention me in a thread to start one.")
        )
        return blocks
    shown = tasks[:PANEL_TASKS]
    for index, task in enumerate(shown):
        blocks.append(_section(_summary(task, now)))
        blocks.append(
            _task_actions(task, may_cancel=may_cancel(task), block_id=f"baton_task_{index}")
        )
    more = max(len(tasks), running + done) - len(shown)
    if more > 0:
        blocks.append(_context(f"… and {more:,} more"))
    return blocks


def task_detail_blocks(
    detail: TaskDetail, *, now: datetime, viewer_may_cancel: bool
) -> list[Block]:
    """`/tasks ID`: one task's summary, its latest log lines and its buttons."""
    task = detail.task
    blocks: list[Block] = [_section(_summary(task, now))]
    handoff = _handoff_sections(task)
    blocks.extend(_section(piece) for piece in handoff[: DETAIL_HANDOFF_SECTIONS + 1])
    if len(handoff) > DETAIL_HANDOFF_SECTIONS + 1:
        blocks.append(_context("… the rest of the handoff is in View log."))
    tail = _code_tail(detail.log, DETAIL_LOG_LINES)
    blocks.append(_section(tail) if tail else _context("No log lines yet."))
    if len(detail.log) > DETAIL_LOG_LINES:
        blocks.append(_context(f"The last {DETAIL_LOG_LINES} of {len(detail.log):,} log lines."))
    blocks.append(_task_actions(task, may_cancel=viewer_may_cancel, block_id="baton_task_0"))
    return blocks


# --------------------------------------------------------------------- log modal

# Each page keeps room for its page line and the two page buttons.
_LOG_PAGE_BLOCKS = VIEW_BLOCKS_LIMIT - 3


def _log_document(detail: TaskDetail) -> list[Block]:
    """Every block of a task's log, before it is cut into pages."""
    task = detail.task
    duration = format_duration(task.duration_s) if task.duration_s is not None else "—"
    started = task.created_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    summary = (
        f"{_mark(task)} *{escape_mrkdwn(task.agent)}* · `{escape_mrkdwn(task.id)}` · {task.state}\n"
        f"Started {started} · {duration} · {_usage(task)}"
    )
    blocks: list[Block] = [_section(summary)]
    title = task.description.strip()
    if title:
        blocks.extend(_section(piece) for piece in _text_sections(f"Title: {title}"))
    blocks.append(_section("*Prompt*"))
    prompt = task.prompt.strip() or "(empty)"
    blocks.extend(_section(piece) for piece in _text_sections(prompt))
    blocks.append({"type": "divider"})
    blocks.append(_section(f"*Log* ({len(detail.log):,} lines)"))
    if detail.log:
        blocks.extend(_section(piece) for piece in code_sections(detail.log))
    else:
        blocks.append(_context("No log lines."))
    branch = _branch_line(task, with_change=False)
    if branch:
        blocks.append(_section(branch))
        change = (task.change or "").strip()
        if change:
            blocks.extend(_section(piece) for piece in code_sections(change.splitlines()))
    handoff = _handoff_sections(task)
    if handoff:
        blocks.append({"type": "divider"})
        blocks.extend(_section(piece) for piece in handoff)
    blocks.append({"type": "divider"})
    blocks.append(_section("*— Final result —*"))
    blocks.extend(_section(piece) for piece in _markdown_sections(_outcome_markdown(task)))
    return blocks


def _paginate(blocks: list[Block]) -> list[list[Block]]:
    if len(blocks) <= VIEW_BLOCKS_LIMIT:
        return [blocks]
    return [blocks[i : i + _LOG_PAGE_BLOCKS] for i in range(0, len(blocks), _LOG_PAGE_BLOCKS)]


def log_pages(detail: TaskDetail) -> int:
    """How many pages the log modal of a task has."""
    return len(_paginate(_log_document(detail)))


def task_log_modal(detail: TaskDetail, *, page: int = 0) -> dict[str, Any]:
    """The "View log" modal: summary, prompt, the whole log and the final result.

    A log longer than one view (100 blocks) is cut into pages with buttons to move
    between them; every block is on exactly one page.

    Args:
        detail: The task and its log.
        page: Which page to show, from 0; out of range shows the nearest page.

    Returns:
        A modal view; its `private_metadata` is the task id.
    """
    task = detail.task
    pages = _paginate(_log_document(detail))
    page = min(max(page, 0), len(pages) - 1)
    blocks = list(pages[page])
    if len(pages) > 1:
        blocks.insert(0, _context(f"Page {page + 1} of {len(pages)}"))
        if page > 0:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": "baton_log_previous",
                    "elements": [
                        _button("\u2039 Previous page", LOG_PAGE, f"{task.id}:{page - 1}")
                    ],
                }
            )
        if page < len(pages) - 1:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": "baton_log_next",
                    "elements": [_button("Next page \u203a", LOG_PAGE, f"{task.id}:{page + 1}")],
                }
            )
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Task log"},
        "close": {"type": "plain_text", "text": "Close"},
        "private_metadata": task.id,
        "blocks": blocks,
    }


# ------------------------------------------------------------------- steer modal


def steer_modal(task: TaskRecord, *, channel: str) -> dict[str, Any]:
    """The Steer modal: one multiline text for a running task, sent before its next model
    call. `private_metadata` carries the task and the channel it was opened in; the
    submission is checked again against the task as stored (see `parse_steer_metadata`)."""
    metadata = json.dumps({"task": task.id, "channel": channel}, separators=(",", ":"))
    if len(metadata) > PRIVATE_METADATA_LIMIT:
        raise ValueError(f"steer metadata of {len(metadata)} characters")
    about = (
        f"A message to `{escape_mrkdwn(task.id)}` ({escape_mrkdwn(task.agent)}) · "
        f"{escape_mrkdwn(_clip(_title(task), 200))}\n"
        "It reaches the agent before its next model call."
    )
    return {
        "type": "modal",
        "callback_id": STEER_VIEW,
        "title": {"type": "plain_text", "text": "Steer task"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": metadata,
        "blocks": [
            _section(about),
            {
                "type": "input",
                "block_id": STEER_INPUT_BLOCK,
                "label": {"type": "plain_text", "text": "Message"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": STEER_INPUT,
                    "multiline": True,
                    "max_length": STEER_TEXT_LIMIT,
                    "placeholder": {
                        "type": "plain_text",
                        "text": "Focus on … / Skip … / Stop after …",
                    },
                },
            },
        ],
    }


def parse_steer_metadata(value: object) -> tuple[str, str] | None:
    """A Steer modal's `private_metadata` as (task id, channel); None unless it is exactly
    what `steer_modal` writes."""
    if not isinstance(value, str) or len(value) > PRIVATE_METADATA_LIMIT:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) != {"task", "channel"}:
        return None
    task_id, channel = data["task"], data["channel"]
    if not isinstance(task_id, str) or not isinstance(channel, str) or not task_id or not channel:
        return None
    return task_id, channel


def steer_text(view: object) -> str | None:
    """The text typed into a submitted Steer modal; None when it holds none."""
    if not isinstance(view, dict):
        return None
    values = ((view.get("state") or {}).get("values") or {}).get(STEER_INPUT_BLOCK) or {}
    text = (values.get(STEER_INPUT) or {}).get("value") if isinstance(values, dict) else None
    return text if isinstance(text, str) else None


# ---------------------------------------------------------------------- feedback


def feedback_blocks(run_id: str) -> list[Block]:
    """The 👍/👎 buttons under a run's final answer (Slack's block for AI answers).

    A click comes back as `FEEDBACK_ACTION` with the value ``good:<run_id>`` or
    ``bad:<run_id>``; see `bot.slack.listeners`.

    Raises:
        ValueError: If `run_id` is not one `parse_feedback` would read back.
    """
    if parse_feedback(f"good:{run_id}") is None:
        raise ValueError(f"not a run id: {run_id[:80]!r}")
    return [
        {
            "type": "context_actions",
            "elements": [
                {
                    "type": "feedback_buttons",
                    "action_id": FEEDBACK_ACTION,
                    "positive_button": {
                        "text": {"type": "plain_text", "text": "👍"},
                        "accessibility_label": "Good answer",
                        "value": f"good:{run_id}",
                    },
                    "negative_button": {
                        "text": {"type": "plain_text", "text": "👎"},
                        "accessibility_label": "Bad answer",
                        "value": f"bad:{run_id}",
                    },
                }
            ],
        }
    ]


def parse_feedback(value: object) -> tuple[str, str] | None:
    """A feedback button's value as (``"good"`` or ``"bad"``, run id); None if malformed.

    Strict: the value comes from whoever sent the click, so anything but exactly what
    `feedback_blocks` writes is refused.
    """
    if not isinstance(value, str):
        return None
    match = _FEEDBACK_VALUE.fullmatch(value)
    return (match[1], match[2]) if match else None


def feedback_line(good: int, bad: int) -> str | None:
    """App Home's line of ratings, "Answers rated 👍 12 · 👎 3"; None when there are none."""
    if good <= 0 and bad <= 0:
        return None
    return f"Answers rated 👍 {good:,} · 👎 {bad:,}"


# ---------------------------------------------------------------------- App Home

HOME_HINT = (
    "Mention @baton in a thread to give it work; it answers in the thread. "
    "`/tasks` lists a channel's tasks."
)


# App Home's agents (`Baton.agents_summary`): at most this many sections of lines, each
# within Slack's section limit however much escaping grows a line; past them, a line
# saying how many agents are left and that `baton agents` lists them all. (A view holds
# 100 blocks: the rest of App Home uses at most about 60.)
HOME_AGENT_BLOCKS = 12
HOME_AGENT_LINE_CHARS = 560  # escaped (x5 at worst) within HOME_AGENT_BLOCK_CHARS
HOME_AGENT_BLOCK_CHARS = 2_900
HOME_AGENTS_ELSEWHERE = "`baton agents` on the bot's host lists every agent with all its notes"


def home_agents_blocks(agents: str | None) -> list[Block]:
    """App Home's agents: the lines of `agents` escaped (they hold what agent files say),
    a workspace's line starting a section, packed into at most `HOME_AGENT_BLOCKS`
    sections; the agents and refused files left over are counted, with where to see them.
    """
    lines = [line for line in (agents or "").splitlines() if line.strip()]
    blocks: list[Block] = []
    current: list[str] = []
    size = 0
    for index, line in enumerate(lines):
        text = escape_mrkdwn(_clip(line, HOME_AGENT_LINE_CHARS))
        heading = not line.startswith(("•", "⚠"))
        if current and (heading or size + 1 + len(text) > HOME_AGENT_BLOCK_CHARS):
            if len(blocks) == HOME_AGENT_BLOCKS - 1:
                blocks.append(_section("\n".join(current)))
                return [*blocks, _context(_agents_left(lines[index:]))]
            blocks.append(_section("\n".join(current)))
            current, size = [], 0
        current.append(text)
        size += len(text) + 1
    if current:
        blocks.append(_section("\n".join(current)))
    return blocks


def _agents_left(lines: Sequence[str]) -> str:
    """The line saying what App Home leaves out: "… and 88 more agents and …"."""
    agents = sum(1 for line in lines if line.startswith("•"))
    refused = sum(1 for line in lines if line.startswith("⚠"))
    workspaces = len(lines) - agents - refused
    counted = (
        (agents, "more agent"),
        (refused, "more refused agent file"),
        (workspaces, "more workspace"),
    )
    said = " and ".join(
        f"{count:,} {noun}{'' if count == 1 else 's'}" for count, noun in counted if count
    )
    return f"… and {said} not shown here: {HOME_AGENTS_ELSEWHERE}"


def home_view(
    *,
    running: int,
    done: int,
    tasks: Sequence[TaskRecord],
    now: datetime,
    warning: str | None = None,
    usage: str | None = None,
    feedback: str | None = None,
    servers: str | None = None,
    agents: str | None = None,
    pulls: str | None = None,
    triggered: Block | None = None,
    schedules: Sequence[Block] = (),
    notice: str | None = None,
) -> dict[str, Any]:
    """The App Home tab: task counts, today's usage and the viewer's recent tasks.

    `agents` is `Baton.agents_summary`: per workspace a line (its agents, the project
    instructions its runs read), a `•` line per agent and a `⚠` line per agent file
    refused there (`home_agents_blocks` lays them out within Slack's limits).

    `warning` is something every user should know before giving work (commands running
    without a sandbox); it stands right under the title. `usage` is one line of the
    viewer's token usage today; `feedback` one line of how their answers were rated
    (see `feedback_line`). `servers` is one line of the MCP servers' state (which are
    up, which not and why: `bot.mcp.report.summary`).

    `triggered` is the section of the runs triggers started for the viewer
    (`triggered_runs_block`); `schedules` the blocks of their schedules (at most 35:
    `bot.slack.schedule_views.home_schedules_blocks`); `notice` what the viewer's last
    click here did (Pause, Resume, Delete) in Baton's mrkdwn, said under the title.
    """
    blocks: list[Block] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": _clip("Baton", HEADER_TEXT_LIMIT)},
        },
    ]
    if notice:
        blocks.append(_section(_clip(notice, 2_000)))  # Baton's own words, with mentions
    if warning:
        blocks.append(_section(f":warning: {escape_mrkdwn(_clip(warning, 2_000))}"))
    blocks.append(_section(_counts(running, done)))
    if usage:
        blocks.append(_context(escape_mrkdwn(_clip(usage, 2_000))))
    if feedback:
        blocks.append(_context(escape_mrkdwn(_clip(feedback, 2_000))))
    if servers:
        blocks.append(_context(escape_mrkdwn(_clip(servers, 2_000))))
    blocks += home_agents_blocks(agents)
    if pulls:
        blocks.append(_context(pulls))  # Baton's own links: see `Baton.pulls_line`
    blocks += [
        {"type": "divider"},
        _section("*Your recent tasks*"),
    ]
    if not tasks:
        blocks.append(_section(HOME_HINT))
    for task in tasks[:HOME_TASKS]:
        line = (
            f"{_mark(task)} *{escape_mrkdwn(task.agent)}* · "
            f"{escape_mrkdwn(_clip(_title(task), 200))} · `{escape_mrkdwn(task.id)}` · "
            f"{escape_mrkdwn(state_in_words(task))} · {_age(task, now)}"
        )
        blocks.append(_section(line))
    if len(tasks) > HOME_TASKS:
        blocks.append(_context(f"… and {len(tasks) - HOME_TASKS:,} more; `/tasks` in a channel"))
    if triggered is not None:
        blocks.append(triggered)
    blocks += schedules
    return {"type": "home", "blocks": blocks[:VIEW_BLOCKS_LIMIT]}
