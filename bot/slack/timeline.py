"""A run's events as the tasks of its answer's timeline (Slack's task_update chunks).

Each tool call is a task (`▸ read_file notes.md`), in progress until its result
comes back, then complete or in error; a tool call waiting for a person is pending.
A foreground sub-agent is one task of its own, its latest step as the details.
Every title and detail passes through `redact`: tool arguments and errors can
quote credentials.
"""

from __future__ import annotations

from bot.describe import Redact, describe_event
from bot.engine import ApprovalRequired, Done, ErrorEvent, RunEvent, ToolResult, ToolStart
from bot.slack.streaming import AnswerStream
from bot.subagents import SubAgentEvent


def show_step(stream: AnswerStream, event: RunEvent, *, redact: Redact) -> None:
    """A tool call of the run (or of an `@agent` run) as a task of the timeline."""
    if isinstance(event, ToolStart):
        line = describe_event(event, redact=redact) or event.name
        stream.step(event.call_id, title=line.removeprefix("▸ "), status="in_progress")
    elif isinstance(event, ApprovalRequired):
        stream.step(event.call_id, status="pending", details="waiting for a person's decision")
    elif isinstance(event, ToolResult):
        # Redacted whole, then cut to its first line: a credential (an SQL block) may
        # span lines, and only the whole text shows it for what it is.
        output = redact(event.output).strip() if event.is_error else ""
        first = output.splitlines()[0] if output else ""
        stream.step(
            event.call_id,
            status="error" if event.is_error else "complete",
            output=first or None,
        )


def show_child_step(stream: AnswerStream, update: SubAgentEvent, *, redact: Redact) -> None:
    """A foreground sub-agent as one task: its steps as details, its end as the status."""
    event = update.event
    title = f"{update.agent} · {update.task_id}"
    if isinstance(event, Done):
        ok = event.stop_reason == "completed"
        stream.step(update.task_id, title=title, status="complete" if ok else "error")
    elif isinstance(event, ErrorEvent):
        stream.step(update.task_id, title=title, status="error", output=redact(event.message))
    elif isinstance(event, ToolStart | ApprovalRequired) or (
        isinstance(event, ToolResult) and event.is_error
    ):
        line = describe_event(event, redact=redact) or ""
        stream.step(update.task_id, title=title, status="in_progress", details=line.strip())
