"""The `task` tool: how the main agent delegates to a sub-agent."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from bot.engine.loop import ResponseCalls, current_call, response_calls
from bot.errors import TaskLimitReached, ToolError
from bot.subagents.children import ChildRunner, ParentContext, TaskOutcome, branch_note
from bot.subagents.definition import TASK_TOOL_NAME, AgentDefinition
from bot.subagents.handoff import GroupMember, render_fan_in, render_handoff
from bot.subagents.registry import AgentRegistry
from bot.subagents.results import escape_result, shown_handoff, shown_part
from bot.tools.base import Tool, ToolArguments, cap_output

GROUP_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# How often a finished member of a foreground group looks whether its siblings are done.
GROUP_POLL_S = 0.05
MAX_GROUP_BLOCK = 60_000
# Escaped characters of a child's answer the parent's tool result holds (a group's
# members share them, each keeping at least MIN_MEMBER_BUDGET): under the engine's
# cap on a tool result (30,000), with room for the status, evidence and limitations.
RESULT_ANSWER_BUDGET = 20_000
MIN_MEMBER_BUDGET = 1_000

TASK_DESCRIPTION = """\
Delegate a well-bounded task to a sub-agent. The sub-agent works on its own with an \
isolated context: it sees NOTHING of this conversation (not the history, not your \
instructions, not what people said), only the prompt you write. So the prompt must carry \
everything it needs: the goal, the relevant file paths and facts, constraints, and what to \
return.
background=false (default) waits for the sub-agent and returns its result now. \
background=true returns a task id at once; the result is added to a later turn of this \
conversation, so use it for independent work you do not need right away, and start several \
in parallel when the pieces are independent.
group: give several task calls the same group name to get their results back together, \
in one block that compares their claims and marks disagreements (foreground calls of one \
response come back in the first call's result; background ones arrive together when all \
have finished).
isolation="worktree" runs the sub-agent in its own git worktree on a new branch, so \
sub-agents that edit files in parallel never overwrite each other; a person merges or \
discards each branch from /tasks.

Available sub-agents:
{agents}"""


def format_outcome(outcome: TaskOutcome) -> str:
    """The tool result for a foreground run, in the forms DESIGN.md gives; a completed
    child's handoff is shown with its status word first.

    An answer (or partial work) too long for the parent's tool result is cut here, with
    a note on reading on, before the engine's cap on every tool result would cut its
    middle out without saying where the rest is.
    """
    if outcome.state == "completed":
        if outcome.handoff is not None:
            handoff, note = shown_handoff(
                outcome.handoff, task_id=outcome.task_id, budget=RESULT_ANSWER_BUDGET
            )
            text = render_handoff(handoff)
            if outcome.isolated:
                text += "\n\n" + branch_note(outcome.branch, outcome.change)
        else:
            shown = shown_part(outcome.text, task_id=outcome.task_id, budget=RESULT_ANSWER_BUDGET)
            text, note = shown.text, shown.note
        if note:
            text = f"{note}\n\n{text}"
        return f'<task state="completed"><task_result>{escape_result(text)}</task_result></task>'
    reason = outcome.error or outcome.state
    body = f"{outcome.agent} ({outcome.task_id}) did not finish: {reason}."
    if outcome.text:
        shown = shown_part(outcome.text, task_id=outcome.task_id, budget=RESULT_ANSWER_BUDGET)
        lead = f"\n{shown.note}\n" if shown.note else " "
        body += f"{lead}Its partial work, kept as it was:\n{shown.text}"
    if outcome.branch and outcome.branch not in body:
        body += f"\nIts changes are on branch {outcome.branch} ({outcome.change})."
    return f'<task state="error">{escape_result(body)}</task>'


def format_group(group: str, members: list[GroupMember]) -> str:
    """One block for the results of a group: each handoff, and the claims compared.

    The members share one answer budget, each answer cut to its part with a note on
    reading on."""
    budget = max(RESULT_ANSWER_BUDGET // max(len(members), 1), MIN_MEMBER_BUDGET)
    shown = [shown_member(member, budget=budget) for member in members]
    body = cap_output(render_fan_in(group, shown), MAX_GROUP_BLOCK)
    return f'<task_group name="{group}">{escape_result(body)}</task_group>'


def shown_member(member: GroupMember, *, budget: int) -> GroupMember:
    """A group member with its answer cut to `budget`, and the note on where the rest is."""
    if member.handoff is None:
        return member
    handoff, note = shown_handoff(member.handoff, task_id=member.task_id, budget=budget)
    return replace(member, handoff=handoff, note=note)


def member_of(outcome: TaskOutcome) -> GroupMember:
    return GroupMember(
        task_id=outcome.task_id,
        agent=outcome.agent,
        state=outcome.state,
        handoff=outcome.handoff,
        error=outcome.error if outcome.state != "completed" else None,
    )


class TaskArgs(ToolArguments):
    subagent_type: str = Field(description="Name of the sub-agent to run.")
    prompt: str = Field(
        description="The complete task. The sub-agent sees nothing else, so include every "
        "fact, path and constraint it needs and say what to return."
    )
    description: str = Field(
        default="", max_length=120, description="A short title (3-6 words) for display."
    )
    background: bool = Field(
        default=False,
        description="Run in the background and return at once; the result comes in a later turn.",
    )
    group: str | None = Field(
        default=None,
        pattern=GROUP_PATTERN,
        description="Tasks with the same group come back together, their claims compared.",
    )
    isolation: Literal["none", "worktree"] = Field(
        default="none",
        description="worktree: work in a git worktree of its own, on a new branch.",
    )


@dataclass(slots=True, eq=False)
class _Gathering:
    """The members of one foreground group of one response, as they finish."""

    # Held, so the response's id (the key of this gathering) is never reused meanwhile.
    responses: ResponseCalls
    calls: tuple[str, ...]
    members: dict[str, GroupMember] = field(default_factory=dict)
    # Calls of the group that were refused before a child started: they return their
    # error, and the block goes to the first call that did start one.
    refused: set[str] = field(default_factory=set)
    returned: int = 0
    # Set whenever a member finishes, so waiting members look again at once.
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, call_id: str, member: GroupMember) -> None:
        self.members[call_id] = member
        self.finished.set()


class TaskTool(Tool):
    name = TASK_TOOL_NAME
    description = "Delegate a task to a sub-agent."
    arguments = TaskArgs
    # Delegating changes nothing by itself: every call the child makes passes the same
    # permission checks as the parent's own calls. So no rule means allowed.
    read_only = True
    main_argument = "subagent_type"
    argument_kind = "pattern"

    def __init__(
        self,
        *,
        registry: AgentRegistry,
        runner: ChildRunner,
        parent: ParentContext,
        allowed: frozenset[str] | None = None,
    ) -> None:
        """`allowed`: the only agents this run may delegate to (None: every agent)."""
        self.registry = registry
        self.runner = runner
        self.parent = parent
        self.allowed = allowed
        self._groups: dict[tuple[int, str], _Gathering] = {}

    def _definitions(self) -> tuple[AgentDefinition, ...]:
        definitions = self.registry.definitions()
        if self.allowed is None:
            return definitions
        return tuple(d for d in definitions if d.name in self.allowed)

    def schema(self) -> dict[str, Any]:
        # Rebuilt on every call, so agent files added or fixed since start-up appear.
        definitions = self._definitions()
        agents = "\n".join(f"- {d.name}: {d.description}" for d in definitions)
        schema = super().schema()
        function = schema["function"]
        function["description"] = TASK_DESCRIPTION.format(agents=agents or "(none)")
        function["parameters"]["properties"]["subagent_type"]["enum"] = [
            d.name for d in definitions
        ]
        return schema

    async def run(self, args: TaskArgs) -> str:
        if args.background or args.group is None:
            return await self._start(args)
        return await self._run_in_group(args, args.group)

    async def _start(self, args: TaskArgs) -> str:
        outcome = await self._run_child(args)
        if isinstance(outcome, str):
            return outcome
        return format_outcome(outcome)

    async def _run_child(self, args: TaskArgs) -> TaskOutcome | str:
        """Run or start the child; a foreground outcome, or a background task's marker."""
        if self.allowed is not None and args.subagent_type not in self.allowed:
            raise ToolError(
                f"you may delegate only to {', '.join(sorted(self.allowed))}; "
                f"{args.subagent_type!r} is not among them"
            )
        definition = self.registry.get(args.subagent_type)
        if definition is None:
            available = ", ".join(d.name for d in self._definitions()) or "none"
            raise ToolError(
                f"there is no sub-agent named {args.subagent_type!r}; available: {available}"
            )
        prompt = args.prompt.strip()
        if not prompt:
            raise ToolError(
                "the prompt is empty: write the whole task; the sub-agent sees nothing else"
            )
        description = args.description.strip() or _title(prompt)
        isolate = definition.isolation == "worktree" or args.isolation == "worktree"
        if args.background:
            try:
                record = await self.runner.start_background(
                    definition,
                    prompt,
                    description=description,
                    parent=self.parent,
                    isolate=isolate,
                    group=args.group,
                )
            except TaskLimitReached as exc:
                raise ToolError(
                    f"{exc}; {exc.limit} are running now. Wait for some to finish (their "
                    "results arrive in later turns) or run this one in the foreground."
                ) from exc
            group = f' group="{args.group}"' if args.group else ""
            return f'<task id="{record.id}" state="running"{group}/>'
        return await self.runner.run_foreground(
            definition,
            prompt,
            description=description,
            parent=self.parent,
            isolate=isolate,
            group=args.group,
        )

    async def _run_in_group(self, args: TaskArgs, group: str) -> str:
        """A foreground member of a group: the group's first call returns the whole block.

        Every member waits until each sibling call of the group has either finished its
        child or ended without running one (refused, denied): so a refused sibling
        never holds the others.
        """
        responses = response_calls.get()
        call = current_call.get()
        if responses is None or call is None:
            return await self._start(args)
        key = (id(responses), group)
        gathering = self._groups.get(key)
        if gathering is None or gathering.responses is not responses:
            gathering = _Gathering(responses=responses, calls=_group_calls(responses, group))
            self._groups[key] = gathering
        try:
            try:
                outcome = await self._run_child(args)
            except ToolError as exc:
                gathering.refused.add(call.id)
                gathering.add(
                    call.id,
                    GroupMember(
                        task_id="(not started)",
                        agent=args.subagent_type,
                        state="refused",
                        handoff=None,
                        error=str(exc),
                    ),
                )
                raise
            assert not isinstance(outcome, str)
            gathering.add(call.id, member_of(outcome))
            await _wait_for_siblings(gathering, responses)
            first = next(
                c for c in gathering.calls if c in gathering.members and c not in gathering.refused
            )
            if call.id != first:
                return (
                    f'<task id="{outcome.task_id}" state="{outcome.state}" group="{group}">'
                    f"This result is in the group block returned for the group's first "
                    "call.</task>"
                )
            ordered = [gathering.members[c] for c in gathering.calls if c in gathering.members]
            return format_group(group, ordered)
        finally:
            gathering.returned += 1
            if gathering.returned >= len(gathering.calls):
                self._groups.pop(key, None)


def _group_calls(responses: ResponseCalls, group: str) -> tuple[str, ...]:
    """The ids of the response's foreground `task` calls naming `group`, in call order."""
    ids = []
    for call in responses.calls:
        if call.name != TASK_TOOL_NAME:
            continue
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            continue
        if (
            isinstance(arguments, dict)
            and arguments.get("group") == group
            and not arguments.get("background")
        ):
            ids.append(call.id)
    return tuple(ids)


async def _wait_for_siblings(gathering: _Gathering, responses: ResponseCalls) -> None:
    """Until each sibling finished its child or ended without one (the engine marks
    those: it has no event to wake on, so the wait looks again every GROUP_POLL_S)."""
    while not all(c in gathering.members or c in responses.ended for c in gathering.calls):
        gathering.finished.clear()
        try:
            await asyncio.wait_for(gathering.finished.wait(), GROUP_POLL_S)
        except TimeoutError:
            pass


def _title(prompt: str, words: int = 6, limit: int = 120) -> str:
    parts = prompt.split()
    title = " ".join(parts[:words])
    if len(title) > limit:
        return title[: limit - 1] + "…"
    return title + ("…" if len(parts) > words else "")
