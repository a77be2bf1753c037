"""How a run's end reads, for every surface (progress message, terminal, metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from bot.access.admission import QueuePosition
from bot.engine import ModelWaiting
from bot.outcomes import RunEnd, RunOutcome, StopCause
from bot.store.tasks import TaskDetail, TaskRecord

INTERRUPTED = "✗ Interrupted by a restart: Retry runs it again"
HANDED_OVER = "↪ Not started here: Baton is restarting; it starts on the next free replica"
WORKING = "Working…"

_STOPPED = {
    RunOutcome.DONE: "✓ Done",
    RunOutcome.TURN_LIMIT: "✗ Stopped at the turn limit",
    RunOutcome.BUDGET: "✗ Stopped at the run's token budget",
    RunOutcome.CUT: "✗ Answer cut at the model's output limit",
    RunOutcome.FILTERED: "✗ Stopped by the provider's content filter",
}
_CAUSES = {
    StopCause.BUDGET_SPENT: "✗ Not started: the daily token budget is spent",
    StopCause.BUDGET_SPENT_WAITING: (
        "✗ Not started: the daily token budget was spent while it waited"
    ),
    StopCause.QUEUE_CLOSED: (
        "✗ Interrupted: the run was closed while it waited in the queue; ask again"
    ),
    StopCause.NO_TASK: "✗ No task given",
    StopCause.UNKNOWN_AGENT: "✗ Unknown agent",
}


def format_tokens(prompt: int, completion: int) -> str:
    """Token usage as "1,234 in / 56 out tokens"."""
    return f"{prompt:,} in / {completion:,} out tokens"


def format_duration(seconds: float) -> str:
    """A duration as "4.2 s", "3 min 05 s" or "1 h 02 min"."""
    seconds = max(seconds, 0.0)
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def describe_end(end: RunEnd) -> str:
    """The final status line of a run: its state in words, then what it cost."""
    if end.outcome is RunOutcome.HANDED_OVER:
        return HANDED_OVER
    if end.outcome is RunOutcome.CANCELLED:
        return f"⊘ Cancelled by <@{end.by}>" if end.by else "⊘ Cancelled"
    if end.cause is StopCause.RESTART:
        return INTERRUPTED
    if end.cause is StopCause.ERROR:
        return f"✗ {end.error or 'Failed'}"
    if end.cause in _CAUSES:
        return _CAUSES[end.cause]  # type: ignore[index]
    if end.turns is None:
        return "✗ Stopped"
    if end.agent is not None:
        mark = f"✗ {end.agent_state.capitalize()}" if end.agent_state else "✓ Done"
        return " · ".join(
            [
                f"{mark} ({end.agent})",
                f"{end.turns} turns",
                format_tokens(end.prompt_tokens, end.completion_tokens),
                format_duration(end.seconds),
            ]
        )
    parts = [
        _STOPPED.get(end.outcome, "✗ Failed"),
        f"{end.turns} turn{'s' if end.turns != 1 else ''}",
        format_tokens(end.prompt_tokens, end.completion_tokens),
        format_duration(end.seconds),
    ]
    parts += [f"{c.agent} {c.task_id}: {c.tokens:,} tokens" for c in end.children]
    if end.children:
        parts.append(f"run total {end.run_tokens:,} tokens")
    return " · ".join(parts)


def redacted_task(record: TaskRecord, redact: Callable[[str], str]) -> TaskRecord:
    """`record` as people may see it: its error without credentials."""
    return replace(record, error=redact(record.error) if record.error else record.error)


def redacted_detail(detail: TaskDetail, redact: Callable[[str], str]) -> TaskDetail:
    """`detail` as people may see it: its error and log lines without credentials."""
    return replace(
        detail,
        task=redacted_task(detail.task, redact),
        log=tuple(redact(line) for line in detail.log),
    )


def waiting_status(event: ModelWaiting) -> str:
    """The progress status while a model call waits to be retried."""
    text = event.describe()
    return f"⏳ {text[:1].upper()}{text[1:]}"


def queued_status(place: QueuePosition) -> str:
    """The progress status of a run waiting for a slot."""
    if place.reason == "user":
        why = "you already have as many runs going as one person may"
        if place.ahead:
            why += f", and {place.ahead} run{'s' if place.ahead != 1 else ''} wait ahead"
    elif place.ahead:
        why = f"{place.ahead} run{'s' if place.ahead != 1 else ''} ahead"
    else:
        why = "next in line; every slot is taken"
    return f"⏳ Queued: {why}. It starts by itself when a slot frees; Cancel withdraws it."
