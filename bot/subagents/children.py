"""What a run hands the children it delegates to, and what it gets back.

The data a delegation carries (the parent's context, a child's events and outcome) and
`ChildRunner`, what the `task` tool needs of whatever runs children. The runner
implements it and gives its children task tools of their own; the tool knows only this
module, so neither imports the other's module in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bot.engine import ApprovalFunc, Hook, Meter, RunEvent, Usage
from bot.store.tasks import TaskRecord, TaskState
from bot.subagents.definition import AgentDefinition
from bot.subagents.handoff import Handoff
from bot.tools.base import ToolRegistry


@dataclass(frozen=True, slots=True, kw_only=True)
class SubAgentEvent:
    """A child's event, tagged with who produced it."""

    agent: str
    task_id: str
    background: bool
    event: RunEvent


ProgressSink = Callable[[SubAgentEvent], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentContext:
    """What a child inherits from the run that delegates to it."""

    tools: ToolRegistry
    model: str
    approval: ApprovalFunc | None
    session_id: int
    channel_id: str | None = None
    user_id: str | None = None
    progress: ProgressSink | None = None
    # The run's meter: every child, foreground or background, spends the same budget,
    # and a background child keeps charging it after the parent's turn is over.
    meter: Meter | None = None
    # How deep the delegating run is (the main agent: 0), and its task (None: main).
    depth: int = 0
    task_id: str | None = None
    # Where the delegating run works (None: the site's workspace): an isolated child's
    # worktree, which its own children (not isolated themselves) work in too, with the
    # permission hook made for that worktree (None: the site's hooks).
    root: Path | None = None
    hooks: tuple[Hook, ...] | None = None
    # The thread's branch when the run works in a thread's worktree: isolated children
    # start from it (None: from the site's checkout).
    branch: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOutcome:
    """How a child run ended."""

    task_id: str
    agent: str
    state: TaskState
    text: str
    error: str | None
    usage: Usage
    turns: int
    handoff: Handoff | None = None
    # Whether it worked in a worktree of its own; `branch` holds its work, if any.
    isolated: bool = False
    branch: str | None = None
    change: str | None = None


class ChildRunner(Protocol):
    """Runs a child for the `task` tool: in the caller's turn, or in the background."""

    async def run_foreground(
        self,
        definition: AgentDefinition,
        prompt: str,
        *,
        description: str,
        parent: ParentContext,
        isolate: bool = False,
        group: str | None = None,
    ) -> TaskOutcome:
        """Run the child and return how it ended; cancelling the caller cancels it."""
        ...

    async def start_background(
        self,
        definition: AgentDefinition,
        prompt: str,
        *,
        description: str,
        parent: ParentContext,
        isolate: bool = False,
        group: str | None = None,
    ) -> TaskRecord:
        """Start the child and return its record at once.

        Raises:
            TaskLimitReached: As many background children run as may.
        """
        ...


def branch_note(branch: str | None, change: str | None) -> str:
    """What an isolated child changed, in the words its result carries."""
    if not branch:
        return "Changes: none (its worktree was removed)."
    return (
        f"Changes: committed on branch {branch} ({change}). A person can merge or discard "
        "it from /tasks."
    )
