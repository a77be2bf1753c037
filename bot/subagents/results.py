"""How a child's result is shown to the agent that started it: escaped, and cut to fit.

A child's result is kept whole: in the task's record, in the thread (split or attached as
a file) and in its log (`/tasks`, View log). What the delegating *model* is given is
bounded, because every tool result is (`DEFAULT_OUTPUT_LIMIT`), and so is a background
result put before the next message (DESIGN.md: an injected block "is capped, pointing to
the full log"). So a result too long for that is cut here, never somewhere downstream:
at a line end where one is near, with a marker where it stops and a note naming the
tool call that reads on from there (`read_task_result`). The answer is what is cut; the
status, evidence and limitations that say how far to trust it are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.subagents.handoff import Handoff

READ_RESULT_TOOL = "read_task_result"
CUT_MARKER = "[… cut here for length]"
# A cut moves back to the last line end when one lies within this share of the budget.
_LINE_SLACK = 0.2
# What each character costs once escaped and indented: entities for & < >, and a
# newline brings the indent of the line after it.
_COST = {"&": 5, "<": 4, ">": 4, "\n": 3}


def escape_result(text: str) -> str:
    """Make text safe inside the result wrapper: it can never close or open a tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shown:
    """The part of a text the model is shown, and where the rest is when it was cut."""

    text: str
    # How many characters of the original `text` are shown; also the offset to read on from.
    length: int
    total: int
    # Baton's words on where the rest is; None when the text is shown whole.
    note: str | None = None

    @property
    def cut(self) -> bool:
        return self.length < self.total


def fitting_length(text: str, budget: int) -> int:
    """How many leading characters of `text` fit in `budget` once escaped and indented,
    ending at a line end when one is near enough."""
    spent = 0
    for index, char in enumerate(text):
        spent += _COST.get(char, 1)
        if spent > budget:
            return _at_line_end(text, index, budget)
    return len(text)


def _at_line_end(text: str, index: int, budget: int) -> int:
    """`index`, or just after the last line end before it when that is near."""
    line_end = text.rfind("\n", 0, index)
    if line_end >= 0 and index - line_end <= budget * _LINE_SLACK:
        return line_end + 1
    return index


def shown_part(text: str, *, task_id: str, budget: int) -> Shown:
    """`text` as the model may be shown it: whole when it fits in `budget`, else its head
    with a marker at the cut and a note saying how to read on."""
    length = fitting_length(text, budget)
    if length >= len(text):
        return Shown(text=text, length=len(text), total=len(text))
    head = text[:length].rstrip("\n")
    return Shown(
        text=f"{head}\n{CUT_MARKER}",
        length=length,
        total=len(text),
        note=read_on_note(task_id, shown=length, total=len(text)),
    )


def read_on_note(task_id: str, *, shown: int, total: int) -> str:
    """One line for the model: how much it was given, and the call that gives the rest."""
    return (
        f"[Cut for length: the first {shown:,} of {total:,} characters are shown. Read on "
        f'with {READ_RESULT_TOOL}(id="{task_id}", offset={shown}); people see it whole in '
        "the thread or in /tasks.]"
    )


def shown_handoff(handoff: Handoff, *, task_id: str, budget: int) -> tuple[Handoff, str | None]:
    """The handoff with its answer cut to `budget` (status, evidence, limitations and
    claims whole), and the note on where the rest is; None when nothing was cut."""
    shown = shown_part(handoff.answer, task_id=task_id, budget=budget)
    if not shown.cut:
        return handoff, None
    # No validation: the cut answer is the validated one, shortened by Baton.
    return handoff.model_copy(update={"answer": shown.text}), shown.note
