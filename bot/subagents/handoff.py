"""How a sub-agent hands its result back: the `submit_result` tool, and the fan-in of a group.

A child ends by calling `submit_result` with a validated `Handoff` (status, answer,
evidence, limitations, claims), so the parent learns how far to trust the answer, not just
what it says. Children started on one question share a `group`; their handoffs come back
as one block where claims are compared by topic and disagreements are marked, not merged.

Everything rendered here is plain text; the caller escapes it before wrapping it in tags.
Within that text, structure (headers, section names, the conflict summary) only ever
starts at the left margin and only ever comes from this module: every line of a value the
model wrote is indented or sits after a bullet, so no field can forge a header.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from bot.errors import ToolArgumentsError, ToolError
from bot.tools.base import Tool, ToolArguments, cap_output

HandoffStatus = Literal["complete", "blocked", "uncertain"]

# Far above what a model writes in one answer (a 128k-token output is about 500,000
# characters): no real answer is refused, only a runaway or hostile argument.
ANSWER_LIMIT = 1_000_000
ITEM_LIMIT = 2_000
TOPIC_LIMIT = 200
POSITION_LIMIT = 2_000
MAX_ITEMS = 50

NO_TEXT = "(the sub-agent gave no text)"
INDENT = "  "


def _not_blank(value: str) -> str:
    if not value:
        raise ValueError("must not be blank")
    return value


# Stripped first, so the length cap and the blank check see what is kept. The cap is no
# budget for the parent's context: an answer is kept whole (record, thread, log), and
# what the parent is given of it is cut where it is shown, saying where the rest is
# (`bot.subagents.results`). Refusing a long answer would only make the model cut its
# own work to get it through.
AnswerText = Annotated[
    str,
    StringConstraints(strip_whitespace=True, max_length=ANSWER_LIMIT),
    AfterValidator(_not_blank),
]
ItemText = Annotated[
    str, StringConstraints(strip_whitespace=True, max_length=ITEM_LIMIT), AfterValidator(_not_blank)
]
TopicText = Annotated[
    str,
    StringConstraints(strip_whitespace=True, max_length=TOPIC_LIMIT),
    AfterValidator(_not_blank),
]
PositionText = Annotated[
    str,
    StringConstraints(strip_whitespace=True, max_length=POSITION_LIMIT),
    AfterValidator(_not_blank),
]


class Claim(BaseModel):
    """One position a sub-agent takes on a named topic, compared across a group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: TopicText
    position: PositionText


class Handoff(BaseModel):
    """A sub-agent's validated result: what it found, on what evidence, and what it could not do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: HandoffStatus
    answer: AnswerText
    evidence: tuple[ItemText, ...] = Field(default=(), max_length=MAX_ITEMS)
    limitations: tuple[ItemText, ...] = Field(default=(), max_length=MAX_ITEMS)
    claims: tuple[Claim, ...] = Field(default=(), max_length=MAX_ITEMS)

    def to_json(self) -> str:
        """The form stored in the database."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Handoff | None:
        """Read a stored handoff; None when it is missing, corrupt or from an older shape."""
        try:
            return cls.model_validate_json(text)
        except (ValidationError, ValueError, TypeError):
            return None


class ClaimArgs(ToolArguments):
    topic: TopicText = Field(
        description="A short name for the question the claim answers, the same words other "
        "agents on this task would use (e.g. 'root cause', 'safe to upgrade').",
    )
    position: PositionText = Field(
        description="Your position on that topic, in one or two sentences.",
    )


class SubmitResultArgs(ToolArguments):
    status: HandoffStatus = Field(
        description="complete: you answered fully and can show evidence. blocked: you could "
        "not proceed; say in limitations what is needed. uncertain: you have an answer but "
        "are not sure of it; say in limitations why.",
    )
    answer: AnswerText = Field(
        description="Your result, complete in itself and as long as it needs to be: the "
        "parent sees nothing of your work except this handoff.",
    )
    evidence: list[ItemText] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="What backs the answer, one item each: file:line references, short "
        "excerpts of command output, URLs.",
    )
    limitations: list[ItemText] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="What you did not check, could not do, or assumed. Required when status "
        "is blocked or uncertain.",
    )
    claims: list[ClaimArgs] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="Your positions on the key questions, one per topic, so the parent can "
        "compare them with other agents' answers to the same task.",
    )


SUBMIT_RESULT_DESCRIPTION = """\
Hand your result back to the agent that started you. Call this exactly once, at the end, \
when your work is done (or when you cannot go on): it ends your run as soon as the other \
calls of the same response are done, so nothing you do after it is seen. \
Status: complete = you answered fully and the evidence shows it; blocked = you could not \
proceed, and limitations say what is needed; uncertain = you have an answer you are not \
sure of, and limitations say why. Put your whole result in answer: the parent sees nothing \
else of your work."""

HANDOFF_REQUEST = (
    "You ended without calling submit_result. Call submit_result now, once, with your "
    "result: status (complete, blocked or uncertain), answer, evidence and limitations. "
    "Do not start new work first."
)


class SubmitResult(Tool):
    """The control tool a sub-agent ends with; the runner reads `handoff` afterwards."""

    name = "submit_result"
    description = SUBMIT_RESULT_DESCRIPTION
    arguments = SubmitResultArgs
    # It only records a value Baton keeps for this run.
    read_only = True
    control = True
    ends_run = True
    main_argument = None

    # A model that submits several times in one response is told to stop; its last
    # valid result stands.
    MAX_SUBMISSIONS = 3

    def __init__(self) -> None:
        self.handoff: Handoff | None = None
        self.submissions = 0

    async def run(self, args: SubmitResultArgs) -> str:
        if self.submissions >= self.MAX_SUBMISSIONS:
            raise ToolError(
                f"your result was recorded {self.submissions} times already (status: "
                f"{self.handoff.status if self.handoff else 'none'}); do not call "
                f"{self.name} again"
            )
        if args.status != "complete" and not args.limitations:
            raise ToolArgumentsError(
                f"invalid arguments for {self.name}: status is {args.status}, so limitations "
                "must say "
                + (
                    "what is needed to proceed"
                    if args.status == "blocked"
                    else "why you are unsure"
                )
            )
        seen: dict[str, str] = {}
        for claim in args.claims:
            key = normalise(claim.topic)
            if key in seen:
                raise ToolArgumentsError(
                    f"invalid arguments for {self.name}: claims name the topic "
                    f"{claim.topic!r} twice; give one position per topic"
                )
            seen[key] = claim.topic
        handoff = Handoff(
            status=args.status,
            answer=args.answer,
            evidence=tuple(args.evidence),
            limitations=tuple(args.limitations),
            claims=tuple(Claim(topic=c.topic, position=c.position) for c in args.claims),
        )
        replaced = self.handoff is not None
        self.handoff = handoff
        self.submissions += 1
        recorded = f"Result recorded (status: {handoff.status})"
        if replaced:
            recorded += ", replacing the result you submitted before"
        return f"{recorded}. Your run ends once this response's other calls are done."


def fallback_handoff(text: str, reason: str) -> Handoff:
    """The handoff of a child that never called submit_result: its last text, whole,
    marked uncertain."""
    answer = text.strip()
    if len(answer) > ANSWER_LIMIT:
        # Only a runaway: leave room for cap_output's note on what was cut.
        answer = cap_output(answer, ANSWER_LIMIT - 200)
    reason = reason.strip() or "the sub-agent did not call submit_result"
    if len(reason) > ITEM_LIMIT:
        reason = reason[: ITEM_LIMIT - 1] + "…"
    return Handoff(status="uncertain", answer=answer or NO_TEXT, limitations=(reason,))


def normalise(text: str) -> str:
    """The form topics and positions are compared in: case folded, whitespace collapsed."""
    return " ".join(text.split()).casefold()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _continued(text: str, indent: str) -> str:
    """`text` with every line after the first indented, so none starts at the margin."""
    lines = text.splitlines() or [""]
    rest = [f"{indent}{line}" if line.strip() else "" for line in lines[1:]]
    return "\n".join([lines[0], *rest])


def _indented(text: str, indent: str = INDENT) -> str:
    return "\n".join(f"{indent}{line}" if line.strip() else "" for line in text.splitlines())


def _bullets(items: Sequence[str], empty: str) -> str:
    if not items:
        return f"- {empty}"
    return "\n".join(f"- {_continued(item, INDENT)}" for item in items)


def render_handoff(handoff: Handoff) -> str:
    """The handoff as plain text for the parent, status first."""
    sections = [
        f"status: {handoff.status}",
        f"answer:\n{_indented(handoff.answer)}",
        f"evidence:\n{_bullets(handoff.evidence, 'none given')}",
        f"limitations:\n{_bullets(handoff.limitations, 'none stated')}",
    ]
    if handoff.claims:
        claims = [
            f"- {_one_line(c.topic)}: {_continued(c.position, INDENT)}" for c in handoff.claims
        ]
        sections.append("claims:\n" + "\n".join(claims))
    return "\n\n".join(sections)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMember:
    """One child of a group as the fan-in sees it."""

    task_id: str
    agent: str
    state: str
    handoff: Handoff | None
    error: str | None = None
    # Baton's note on where the rest of a cut answer is (see `bot.subagents.results`).
    note: str | None = None


@dataclass(slots=True)
class _Topic:
    label: str
    # Normalised position -> (the first wording seen, the task ids holding it).
    positions: dict[str, tuple[str, list[str]]]


def _claims_by_topic(members: Sequence[GroupMember]) -> list[_Topic]:
    topics: dict[str, _Topic] = {}
    for member in members:
        if member.handoff is None:
            continue
        for claim in member.handoff.claims:
            topic = topics.setdefault(
                normalise(claim.topic), _Topic(label=_one_line(claim.topic), positions={})
            )
            _, holders = topic.positions.setdefault(normalise(claim.position), (claim.position, []))
            task_id = _one_line(member.task_id)
            if task_id not in holders:
                holders.append(task_id)
    return list(topics.values())


def _render_topic(topic: _Topic) -> str:
    if len(topic.positions) > 1:
        head = f"- CONFLICT — review: {topic.label} ({len(topic.positions)} different positions)"
    else:
        [(_, holders)] = topic.positions.values()
        head = f"- {'agreed' if len(holders) > 1 else 'one source'}: {topic.label}"
    lines = [head]
    for wording, holders in topic.positions.values():
        lines.append(f"    {', '.join(holders)}: {_continued(wording, '      ')}")
    return "\n".join(lines)


def _render_member(member: GroupMember) -> str:
    header = (
        f"## {_one_line(member.task_id)} ({_one_line(member.agent)}) — {_one_line(member.state)}"
    )
    parts = [header]
    if member.note:
        parts.append(_one_line(member.note))
    error = (member.error or "").strip()
    if error:
        parts.append(f"error:\n{_indented(error)}")
    if member.handoff is not None:
        parts.append(render_handoff(member.handoff))
    elif not error:
        parts.append("error:\n  no result was recorded")
    return "\n\n".join(parts)


def render_fan_in(group: str, members: Sequence[GroupMember]) -> str:
    """One block for all children of `group`: each result, then their claims compared by topic."""
    completed = sum(1 for m in members if m.state == "completed")
    noun = "sub-agent" if len(members) == 1 else "sub-agents"
    parts = [f"Group {_one_line(group)!r}: {len(members)} {noun}, {completed} completed."]
    parts.extend(_render_member(m) for m in members)
    topics = _claims_by_topic(members)
    rendered = "\n".join(_render_topic(t) for t in topics) if topics else "- none stated"
    parts.append(f"Claims by topic:\n{rendered}")
    conflicts = [t.label for t in topics if len(t.positions) > 1]
    if conflicts:
        parts.append(f"Conflicts: {len(conflicts)} topic(s) need review: {', '.join(conflicts)}")
    else:
        parts.append("Conflicts: none")
    return "\n\n".join(parts)
