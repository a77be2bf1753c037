"""How a run's events read, for every surface: Slack's progress, timeline and approvals,
the terminal, and sub-agents' task logs. One set of words, so no surface drifts.

- Stop reasons and outcomes: `stop_words`, `stop_error`, `outcome_mark`, `outcome_words`.
- Tool arguments: `tool_summary` (one line), `pretty_arguments` (the exact JSON).
- Events: `describe_event` (one line), `redacted_event` (credentials out of an event
  before anything shortens it).

Redaction comes before shortening, always: a credential cut in half is no longer what
the redaction looks for, and its first half would show. So every function that takes
`redact` redacts the whole text (each decoded JSON string) first, shortens, and redacts
the line it made once more.

- A run's end: `describe_end` (its final status line), `queued_status`,
  `waiting_status`; tasks as people may see them: `redacted_task`, `redacted_detail`.

A leaf of the presentation: it imports the engine's events, the outcomes and the
records it describes, never a surface or the sub-agents, so the engine's consumers
(the sub-agent runner among them) can use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bot.access.admission import QueuePosition
from bot.engine.events import (
    ApprovalRequired,
    Done,
    ErrorEvent,
    ModelWaiting,
    RunEvent,
    ToolResult,
    ToolStart,
)
from bot.outcomes import RunEnd, RunOutcome, StopCause, StopReason
from bot.store.tasks import TaskDetail, TaskRecord

Redact = Callable[[str], str]

SUMMARY_CHARS = 120
# How much of a failed tool's first output line an event line keeps.
ERROR_LINE_CHARS = 300

# What a sub-agent's task records as its error when the engine stopped it early; the
# turn limit names the limit (see `stop_error`).
BUDGET_ERROR = "stopped: the run's token budget is spent"
STOP_ERRORS: dict[str, str] = {
    StopReason.BUDGET: BUDGET_ERROR,
    StopReason.LENGTH: "the answer was cut at the model's output limit",
    StopReason.CONTENT_FILTER: "the provider's content filter stopped the answer",
}

_OUTCOME_WORDS = {
    RunOutcome.DONE: "Done",
    RunOutcome.TURN_LIMIT: "Stopped at the turn limit",
    RunOutcome.BUDGET: "Stopped at the run's token budget",
    RunOutcome.CUT: "Answer cut at the model's output limit",
    RunOutcome.FILTERED: "Stopped by the provider's content filter",
    RunOutcome.FAILED: "Failed",
    RunOutcome.CANCELLED: "Cancelled",
    RunOutcome.REFUSED: "Not started",
    RunOutcome.INTERRUPTED: "Interrupted",
    RunOutcome.HANDED_OVER: "Handed over",
}
_OUTCOME_MARKS = {
    RunOutcome.DONE: "✓",
    RunOutcome.CANCELLED: "⊘",
    RunOutcome.HANDED_OVER: "↪",
}


def outcome_words(outcome: RunOutcome) -> str:
    """How a run ended, in a few capitalised words ("Stopped at the turn limit")."""
    return _OUTCOME_WORDS[outcome]


def outcome_mark(outcome: RunOutcome) -> str:
    """The icon before those words: ✓ done, ⊘ cancelled, ↪ handed over, ✗ otherwise."""
    return _OUTCOME_MARKS.get(outcome, "✗")


_TASK_MARKS = {"running": "●", "completed": "✓", "failed": "✗", "cancelled": "⊘"}


def task_mark(state: str, *, unknown: str = "?") -> str:
    """The icon of a sub-agent task's state: ● running, ✓ completed, ✗ failed, ⊘
    cancelled (`unknown` for any other)."""
    return _TASK_MARKS.get(state, unknown)


def stop_words(reason: str) -> str:
    """The words for an engine's stop reason (`Done.stop_reason`): "Done", "Stopped at
    the turn limit", …; "Failed" for an error or a reason this code does not know."""
    return outcome_words(RunOutcome.of_stop(reason))


def stop_error(reason: str, *, max_turns: int | None = None) -> str | None:
    """The lower-case error a sub-agent's task records when its engine stopped for
    `reason`; None when it completed, or failed with an error event of its own (which
    says more than the reason does).

    Args:
        reason: `Done.stop_reason`.
        max_turns: The turn limit it ran with, named when the limit stopped it.
    """
    if reason == StopReason.MAX_TURNS:
        limit = f"the limit of {max_turns} turns" if max_turns is not None else "the turn limit"
        return f"stopped early at {limit}"
    return STOP_ERRORS.get(reason)


def tool_summary(
    arguments: str, *, limit: int = SUMMARY_CHARS, redact: Redact | None = None
) -> str:
    """Tool-call arguments (the model's JSON) on one line of at most `limit` characters.

    A JSON object shows its values only, in order, joined by ", ": strings as they are,
    anything else (numbers, lists, nested objects) as compact JSON; keys are left out
    (`{"path": "a.md", "limit": 5}` → `a.md, 5`) and an empty object shows nothing.
    Anything else (not JSON, or JSON that is not an object) shows as the model sent it.
    Runs of whitespace, newlines included, become one space; a longer line is cut to
    `limit - 1` characters and "…".

    With `redact`, each key and string is redacted as decoded, before anything is joined
    or cut (see the module's docstring), and the line once more after.
    """
    if redact is not None:
        arguments = redacted_arguments(arguments, redact)
    data = json_arguments(arguments)
    if isinstance(data, dict):
        text = ", ".join(
            value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            for value in data.values()
        )
    else:
        text = arguments
    text = " ".join(text.split())
    if redact is not None:
        text = redact(text)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def json_arguments(arguments: str) -> Any:
    """The JSON value the arguments hold; None when they are not JSON, or nested too
    deep to read (a model's arguments are read, never trusted to parse)."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None


def pretty_arguments(arguments: str, *, indent: int | None = 2) -> str:
    """The exact arguments, laid out when they are JSON (`indent=None`: on one line),
    unchanged when they are not."""
    data = json_arguments(arguments)
    if data is None:
        return arguments
    try:
        return json.dumps(data, indent=indent, ensure_ascii=False)
    except RecursionError:
        return arguments


def describe_event(event: RunEvent, *, redact: Redact | None = None) -> str | None:
    """One line for an event: a tool call, its failure, an approval, an error, a wait
    for the model, the end. None for text (logged in whole pieces elsewhere) and for
    what needs no line (a compaction, a tool that succeeded says only "✓").

    With `redact`, the event is redacted whole (`redacted_event`) before its line is
    made, and the line once more after.
    """
    if redact is not None:
        line = _line(redacted_event(event, redact))
        return redact(line) if line is not None else None
    return _line(event)


def _line(event: RunEvent) -> str | None:
    if isinstance(event, ToolStart):
        return f"▸ {event.name} {tool_summary(event.arguments)}".rstrip()
    if isinstance(event, ToolResult):
        if not event.is_error:
            return "  ✓"
        output = event.output.strip()
        first = output.splitlines()[0] if output else "failed"
        return f"  ✗ {first[:ERROR_LINE_CHARS]}"
    if isinstance(event, ApprovalRequired):
        return f"? {event.name} needs approval: {event.reason}"
    if isinstance(event, ErrorEvent):
        return f"✗ {event.message}"
    if isinstance(event, ModelWaiting):
        return f"… waiting for the model ({event.reason}, retry {event.attempt})"
    if isinstance(event, Done):
        outcome = RunOutcome.of_stop(event.stop_reason)
        return (
            f"{outcome_mark(outcome)} {outcome_words(outcome)} · {plural(event.turns, 'turn')} · "
            f"{event.usage.total_tokens:,} tokens"
        )
    return None


def redacted_event(event: RunEvent, redact: Redact) -> RunEvent:
    """The event with its arguments and output redacted whole, before anything shortens
    them: a credential cut in half by the shortening is no longer the secret the
    redaction looks for, and its first half would show."""
    if isinstance(event, ToolStart | ApprovalRequired):
        return replace(event, arguments=redacted_arguments(event.arguments, redact))
    if isinstance(event, ToolResult):
        return replace(event, output=redact(event.output))
    return event


def redacted_arguments(arguments: str, redact: Redact) -> str:
    """JSON arguments with every key and string redacted as decoded (a secret holding a
    quote or a backslash is escaped in the JSON text, where it would not be found);
    anything else redacted as text."""
    data = json_arguments(arguments)
    if data is None:
        return redact(arguments)
    try:
        return json.dumps(_redact_values(data, redact), ensure_ascii=False)
    except RecursionError:
        return redact(arguments)


def _redact_values(value: Any, redact: Redact) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redact_values(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_values(v, redact) for v in value]
    return value


def plural(count: int, noun: str) -> str:
    """ "1 turn", "3 turns"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------- a run's end

INTERRUPTED = "✗ Interrupted by a restart: Retry runs it again"
HANDED_OVER = "↪ Not started here: Baton is restarting; it starts on the next free replica"
WORKING = "Working…"

_CAUSES = {
    StopCause.ACCESS: "✗ Not started: whom it runs for may not start runs",
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
        return f"✗ {outcome_words(end.outcome)}"
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
        f"{outcome_mark(end.outcome)} {outcome_words(end.outcome)}",
        plural(end.turns, "turn"),
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
