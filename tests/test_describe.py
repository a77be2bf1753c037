"""bot/describe.py: the one set of words every surface shows for a run's events."""

from __future__ import annotations

import json

import pytest

from bot.describe import (
    BUDGET_ERROR,
    describe_event,
    outcome_mark,
    outcome_words,
    pretty_arguments,
    redacted_event,
    stop_error,
    stop_words,
    tool_summary,
)
from bot.engine import (
    ApprovalRequired,
    Compacted,
    Done,
    ErrorEvent,
    ModelWaiting,
    TextDelta,
    ToolResult,
    ToolStart,
    Usage,
)
from bot.outcomes import RunOutcome, StopReason
from bot.redaction import Redactor

SECRET = "hunter2-correct-horse-battery"
REDACT = Redactor([SECRET])


def done(reason: str) -> Done:
    usage = Usage(prompt_tokens=1_000, completion_tokens=234)
    return Done(final_text="", usage=usage, turns=3, stop_reason=reason)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("completed", "Done"),
        ("max_turns", "Stopped at the turn limit"),
        ("budget", "Stopped at the run's token budget"),
        ("length", "Answer cut at the model's output limit"),
        ("content_filter", "Stopped by the provider's content filter"),
        ("error", "Failed"),
        ("something new", "Failed"),
    ],
)
def test_stop_words(reason: str, words: str) -> None:
    assert stop_words(reason) == words


def test_every_stop_reason_has_its_own_words_but_error() -> None:
    words = {reason: stop_words(reason) for reason in StopReason}
    assert words[StopReason.ERROR] == "Failed"
    assert len(set(words.values())) == len(StopReason)


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("completed", None),
        ("error", None),  # the error event says what went wrong
        ("max_turns", "stopped early at the limit of 2 turns"),
        ("budget", "stopped: the run's token budget is spent"),
        ("length", "the answer was cut at the model's output limit"),
        ("content_filter", "the provider's content filter stopped the answer"),
    ],
)
def test_stop_error(reason: str, error: str | None) -> None:
    assert stop_error(reason, max_turns=2) == error


def test_stop_error_without_the_limit() -> None:
    assert stop_error("max_turns") == "stopped early at the turn limit"
    assert BUDGET_ERROR == stop_error("budget")


def test_every_outcome_has_words_and_a_mark() -> None:
    assert {outcome: outcome_words(outcome) for outcome in RunOutcome} == {
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
    marks = {outcome: outcome_mark(outcome) for outcome in RunOutcome}
    assert marks.pop(RunOutcome.DONE) == "✓"
    assert marks.pop(RunOutcome.CANCELLED) == "⊘"
    assert marks.pop(RunOutcome.HANDED_OVER) == "↪"
    assert set(marks.values()) == {"✗"}


@pytest.mark.parametrize(
    ("arguments", "summary"),
    [
        ('{"path": "notes.md", "limit": 5}', "notes.md, 5"),
        ("{}", ""),
        ('{"a": {"b": [1, "x"]}, "c": null}', '{"b": [1, "x"]}, null'),
        ('{"command": "ls\\n  -la\\tsrc"}', "ls -la src"),
        ('{"text": "café"}', "café"),
        ('{"nested": {"word": "café"}}', '{"word": "café"}'),
        ('["a", 1]', '["a", 1]'),
        ('"just a string"', '"just a string"'),
        ("not json {", "not json {"),
        ("  spaced\n out  ", "spaced out"),
        ("", ""),
    ],
)
def test_tool_summary(arguments: str, summary: str) -> None:
    assert tool_summary(arguments) == summary


def test_a_long_summary_is_cut_with_an_ellipsis() -> None:
    summary = tool_summary(json.dumps({"text": "word " * 100}))
    assert len(summary) == 120 and summary.endswith("…")
    assert tool_summary(json.dumps({"text": "x" * 80}), limit=80) == "x" * 80
    assert tool_summary(json.dumps({"text": "x" * 81}), limit=80) == "x" * 79 + "…"


def test_arguments_nested_too_deep_are_shown_as_sent() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert tool_summary(deep, limit=10) == "[" * 9 + "…"
    assert pretty_arguments(deep) == deep


def test_tool_summary_redacts_each_value() -> None:
    arguments = json.dumps({"url": f"postgresql://u:{SECRET}@db/x", SECRET: "key as secret"})
    summary = tool_summary(arguments, redact=REDACT)
    assert SECRET not in summary and "***" in summary


def test_a_secret_escaped_in_the_json_is_still_redacted() -> None:
    secret = 'pa"ss\\word-long'
    redact = Redactor([secret])
    arguments = json.dumps({"password": secret})
    assert secret not in json.loads(redacted_event(start(arguments), redact).arguments).values()
    assert "pa" not in tool_summary(arguments, redact=redact)


def start(arguments: str, name: str = "bash") -> ToolStart:
    return ToolStart(call_id="c1", name=name, arguments=arguments)


@pytest.mark.parametrize("cut", range(100, 125))
def test_a_secret_split_by_the_cut_is_still_redacted(cut: int) -> None:
    """The attacker's arguments put the secret across the cut: redacted before cutting,
    no part of it shows, wherever it falls."""
    arguments = json.dumps({"command": "x" * (cut - 10) + SECRET + " tail"})
    for line in (
        tool_summary(arguments, redact=REDACT),
        describe_event(start(arguments), redact=REDACT),
        describe_event(
            ApprovalRequired(call_id="c", name="bash", arguments=arguments, reason="r", risk=None),
            redact=REDACT,
        ),
    ):
        assert line is not None
        assert not any(SECRET[:n] in line for n in range(6, len(SECRET) + 1)), line


def test_cutting_first_would_show_part_of_the_secret() -> None:
    """Why redaction comes first: the cut half of a secret is not the secret any more."""
    arguments = json.dumps({"command": "x" * 100 + SECRET})
    assert REDACT(tool_summary(arguments)) == "x" * 100 + SECRET[:19] + "…"
    assert tool_summary(arguments, redact=REDACT) == "x" * 100 + "***"


def test_pretty_arguments() -> None:
    assert pretty_arguments('{"a": [1, "é"]}') == '{\n  "a": [\n    1,\n    "é"\n  ]\n}'
    assert pretty_arguments('{"a":  [1,"é"]}', indent=None) == '{"a": [1, "é"]}'
    assert pretty_arguments("not json") == "not json"


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (start('{"path": "a.md"}', "read_file"), "▸ read_file a.md"),
        (start("{}", "list_tasks"), "▸ list_tasks"),
        (ToolResult(call_id="c", name="bash", output="fine", is_error=False), "  ✓"),
        (
            ToolResult(call_id="c", name="bash", output="\n  no such file\nmore", is_error=True),
            "  ✗ no such file",
        ),
        (ToolResult(call_id="c", name="bash", output="  ", is_error=True), "  ✗ failed"),
        (
            ApprovalRequired(
                call_id="c", name="bash", arguments="{}", reason="bash can change files", risk=None
            ),
            "? bash needs approval: bash can change files",
        ),
        (ErrorEvent(message="the model is unreachable"), "✗ the model is unreachable"),
        (
            ModelWaiting(reason="rate limited", attempt=2, wait_s=1.5),
            "… waiting for the model (rate limited, retry 2)",
        ),
        (Compacted(folded=4), None),
        (TextDelta(text="hello"), None),
        (done("completed"), "✓ Done · 3 turns · 1,234 tokens"),
        (done("max_turns"), "✗ Stopped at the turn limit · 3 turns · 1,234 tokens"),
        (done("budget"), "✗ Stopped at the run's token budget · 3 turns · 1,234 tokens"),
        (done("length"), "✗ Answer cut at the model's output limit · 3 turns · 1,234 tokens"),
        (
            done("content_filter"),
            "✗ Stopped by the provider's content filter · 3 turns · 1,234 tokens",
        ),
        (done("error"), "✗ Failed · 3 turns · 1,234 tokens"),
    ],
)
def test_describe_event(event: object, line: str | None) -> None:
    assert describe_event(event) == line  # type: ignore[arg-type]


def test_a_long_error_line_is_cut() -> None:
    event = ToolResult(call_id="c", name="bash", output="e" * 1_000, is_error=True)
    assert describe_event(event) == "  ✗ " + "e" * 300


def test_describe_event_redacts_every_kind() -> None:
    events = [
        start(json.dumps({"url": f"https://u:{SECRET}@host"})),
        ToolResult(call_id="c", name="bash", output=f"denied for {SECRET}", is_error=True),
        ApprovalRequired(
            call_id="c", name="bash", arguments="{}", reason=f"mentions {SECRET}", risk=None
        ),
        ErrorEvent(message=f"could not connect with {SECRET}"),
    ]
    for event in events:
        line = describe_event(event, redact=REDACT)
        assert line is not None and SECRET not in line and "***" in line
    assert describe_event(TextDelta(text=SECRET), redact=REDACT) is None


def test_a_credential_spanning_lines_of_an_error_is_redacted_whole() -> None:
    """An SQL block spans lines: redacted as a whole before the first line is taken (its
    first line alone is not a block the redaction knows)."""
    output = "[SQL: SELECT * FROM users WHERE token = 'top-secret'\nLIMIT 1]\n"
    event = ToolResult(call_id="c", name="bash", output=output, is_error=True)
    assert describe_event(event, redact=REDACT) == "  ✗ [SQL hidden]"
    assert "top-secret" in REDACT(describe_event(event) or "")
