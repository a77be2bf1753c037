"""Runs a sub-agent: the same engine on a brand-new session, with narrowed tools."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bot.engine import (
    ApprovalDecision,
    ApprovalFunc,
    ApprovalRequest,
    ApprovalRequired,
    Done,
    Engine,
    ErrorEvent,
    Hook,
    HookDecision,
    LLMClient,
    Meter,
    ModelWaiting,
    RunEvent,
    TextDelta,
    ToolInvocation,
    ToolResult,
    ToolStart,
    Usage,
)
from bot.engine.tokens import TokenCounter
from bot.store.tasks import TaskRecord, TaskState
from bot.subagents.definition import TASK_TOOL_NAME, AgentDefinition
from bot.subagents.prompt import build_child_prompt
from bot.subagents.tracker import TaskTracker
from bot.tools.base import ToolRegistry

logger = logging.getLogger(__name__)

SHUTDOWN_REASON = "interrupted: Baton was shut down while it ran; start it again"
BUDGET_REASON = "stopped: the run's token budget is spent"
MAX_LOG_TEXT = 2_000
# How a child's run ended, when the model's provider ended it.
STOP_ERRORS = {
    "length": "the answer was cut at the model's output limit",
    "content_filter": "the provider's content filter stopped the answer",
}


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


async def deny_task_hook(invocation: ToolInvocation) -> HookDecision | None:
    """Second guard against recursion: a child may never delegate, whatever its tools."""
    if invocation.tool.name == TASK_TOOL_NAME:
        return HookDecision.deny("sub-agents cannot delegate; the task tool is not for them")
    return None


def describe_event(event: RunEvent) -> str | None:
    """One log line for a child event (text is logged separately, in whole pieces)."""
    if isinstance(event, ToolStart):
        return f"▸ {event.name} {_short_arguments(event.arguments)}".rstrip()
    if isinstance(event, ToolResult):
        if event.is_error:
            first = event.output.strip().splitlines()[0] if event.output.strip() else "failed"
            return f"  ✗ {first[:300]}"
        return "  ✓"
    if isinstance(event, ApprovalRequired):
        return f"? {event.name} needs approval: {event.reason}"
    if isinstance(event, ErrorEvent):
        return f"✗ {event.message}"
    if isinstance(event, ModelWaiting):
        return f"… waiting for the model ({event.reason}, retry {event.attempt})"
    if isinstance(event, Done):
        tokens = event.usage.total_tokens
        if event.stop_reason == "completed":
            return f"✓ Done · {event.turns} turns · {tokens:,} tokens"
        if event.stop_reason == "max_turns":
            return f"✗ Stopped at the turn limit · {event.turns} turns · {tokens:,} tokens"
        if event.stop_reason == "budget":
            return f"✗ Stopped: the token budget is spent · {event.turns} turns · {tokens:,} tokens"
        if event.stop_reason in STOP_ERRORS:
            return f"✗ {STOP_ERRORS[event.stop_reason]} · {event.turns} turns · {tokens:,} tokens"
        return f"✗ Failed · {event.turns} turns · {tokens:,} tokens"
    return None


def _short_arguments(arguments: str, limit: int = 120) -> str:
    try:
        data = json.loads(arguments)
    except json.JSONDecodeError:
        data = None
    text = (
        ", ".join(f"{v}" if isinstance(v, str) else json.dumps(v) for v in data.values())
        if isinstance(data, dict)
        else arguments
    )
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SubAgentRunner:
    """Builds isolated child engines and runs them in the foreground or the background."""

    def __init__(
        self,
        *,
        llm: LLMClient,
        tracker: TaskTracker,
        hooks: Sequence[Hook],
        workspace: Path,
        skills_dir: Path,
        default_max_turns: int,
        max_background_tasks: int,
        context_window: int | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        self.llm = llm
        self.tracker = tracker
        self.hooks = tuple(hooks)
        self.workspace = workspace
        self.skills_dir = skills_dir
        self.default_max_turns = default_max_turns
        self.max_background_tasks = max_background_tasks
        # The window of agents whose definition names none (`context_window: 0`).
        self.context_window = context_window
        # One calibration per model, kept across runs (the main agent uses it too); the
        # composition root shares one between every workspace's runner.
        self.counter = counter if counter is not None else TokenCounter()

    def build_engine(
        self,
        definition: AgentDefinition,
        parent: ParentContext,
        approval: ApprovalFunc | None,
        system_prompt: str,
        *,
        task_id: str | None = None,
    ) -> Engine:
        """A fresh engine for the child: no parent history, no parent system prompt.

        It spends the parent's meter, its charges marked with `task_id`. It has no
        stored history to fold: its own requests are fitted by trimming and dropping.
        """
        meter = parent.meter
        if meter is not None and task_id is not None:
            meter = _TaskMeter(meter=meter, task_id=task_id)
        return Engine(
            llm=self.llm,
            model=definition.model or parent.model,
            tools=definition.resolve_tools(parent.tools),
            system_prompt=system_prompt,
            hooks=[*self.hooks, deny_task_hook],
            approval=approval,
            max_turns=definition.max_turns or self.default_max_turns,
            meter=meter,
            context_window=definition.context_window or self.context_window,
            counter=self.counter,
        )

    async def run_foreground(
        self,
        definition: AgentDefinition,
        prompt: str,
        *,
        description: str,
        parent: ParentContext,
    ) -> TaskOutcome:
        """Run a child inside the caller's turn; cancelling the caller cancels it."""
        record = await self._record(definition, prompt, description, parent, background=False)
        # The child runs in a task of its own, known to the tracker, so `/tasks` can
        # cancel it without cancelling the run that waits for it.
        child = asyncio.create_task(
            self._run(record, definition, prompt, parent, _labelled(parent.approval, record)),
            name=record.id,
        )
        self.tracker.attach(record.id, child)
        try:
            return await child
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                # The caller itself is being cancelled: the child goes with it.
                await asyncio.shield(
                    self.tracker.finish(
                        record.id, state="cancelled", error="cancelled with the run that started it"
                    )
                )
                raise
            detail = await self.tracker.get(record.id)
            reason = detail.task.error if detail and detail.task.error else "cancelled"
            return TaskOutcome(
                task_id=record.id,
                agent=definition.name,
                state="cancelled",
                text="",
                error=reason,
                usage=Usage(),
                turns=0,
            )
        except Exception as exc:
            await self.tracker.finish(
                record.id, state="failed", error=f"crashed: {type(exc).__name__}: {exc}"
            )
            raise

    async def start_background(
        self,
        definition: AgentDefinition,
        prompt: str,
        *,
        description: str,
        parent: ParentContext,
    ) -> TaskRecord:
        """Start a child outside the caller's turn and return its record at once.

        Raises:
            TaskLimitReached: The session has `max_background_tasks` running already.
        """
        # Counting the session's running background tasks and recording this one are
        # one step across every replica (TaskStore.create_background).
        async with self.tracker.start_lock:
            record = await self.tracker.start_background(
                limit=self.max_background_tasks,
                session_id=parent.session_id,
                channel_id=parent.channel_id,
                agent=definition.name,
                description=description,
                prompt=prompt,
                started_by=parent.user_id,
            )
        self.tracker.run_child(
            record.id,
            self._run_background(record, definition, prompt, parent),
        )
        return record

    async def _record(
        self,
        definition: AgentDefinition,
        prompt: str,
        description: str,
        parent: ParentContext,
        *,
        background: bool,
    ) -> TaskRecord:
        return await self.tracker.start(
            session_id=parent.session_id,
            channel_id=parent.channel_id,
            agent=definition.name,
            description=description,
            prompt=prompt,
            background=background,
            started_by=parent.user_id,
        )

    async def _run_background(
        self,
        record: TaskRecord,
        definition: AgentDefinition,
        prompt: str,
        parent: ParentContext,
    ) -> None:
        try:
            await self._run(record, definition, prompt, parent, self._deny_approvals(record))
        except asyncio.CancelledError:
            # An explicit cancel has already written "cancelled"; this covers shutdown.
            await asyncio.shield(
                self.tracker.finish(record.id, state="failed", error=SHUTDOWN_REASON)
            )
            raise
        except Exception as exc:
            logger.exception("background task %s crashed", record.id)
            await self.tracker.finish(
                record.id, state="failed", error=f"crashed: {type(exc).__name__}: {exc}"
            )

    def _deny_approvals(self, record: TaskRecord) -> ApprovalFunc:
        async def deny(request: ApprovalRequest) -> ApprovalDecision:
            await self.tracker.append_log(
                record.id,
                f"⊘ denied {request.tool_name} without asking: background tasks cannot wait "
                "for a person",
            )
            return ApprovalDecision(
                approved=False,
                message=(
                    "this call needs a person's approval "
                    f"({request.reason}), and background sub-agents cannot ask anyone, so it "
                    "was denied (fail closed). Do without it, or report that it is needed."
                ),
            )

        return deny

    async def _run(
        self,
        record: TaskRecord,
        definition: AgentDefinition,
        prompt: str,
        parent: ParentContext,
        approval: ApprovalFunc | None,
    ) -> TaskOutcome:
        child_prompt = build_child_prompt(
            definition, workspace=self.workspace, skills_dir=self.skills_dir
        )
        engine = self.build_engine(
            definition, parent, approval, child_prompt.text, task_id=record.id
        )
        lines = [f"Starting {definition.name} ({engine.model}, {len(engine.tools)} tools)"]
        lines += [
            f"⚠ skill {name!r} not found; running without it"
            for name in child_prompt.missing_skills
        ]
        await self.tracker.append_log(record.id, *lines)
        text: list[str] = []
        done: Done | None = None
        error: str | None = None
        async for event in engine.run_stream(prompt):
            if parent.progress is not None:
                parent.progress(
                    SubAgentEvent(
                        agent=definition.name,
                        task_id=record.id,
                        background=record.background,
                        event=event,
                    )
                )
            if isinstance(event, TextDelta):
                text.append(event.text)
                continue
            if isinstance(event, ModelWaiting) and event.discard_text:
                text.clear()  # the retried call starts its answer again
            if text and isinstance(event, ToolStart | Done):
                piece = "".join(text).strip()
                text.clear()
                if piece:
                    await self.tracker.append_log(record.id, _clip(piece))
            if isinstance(event, ErrorEvent):
                error = event.message
            if isinstance(event, Done):
                done = event
            if line := describe_event(event):
                await self.tracker.append_log(record.id, line)
        assert done is not None
        state: TaskState
        if done.stop_reason == "completed":
            state = "completed"
        else:
            state = "failed"
            if done.stop_reason == "max_turns":
                error = f"stopped early at the limit of {engine.max_turns} turns"
            elif done.stop_reason == "budget":
                error = BUDGET_REASON
            elif done.stop_reason in STOP_ERRORS:
                error = STOP_ERRORS[done.stop_reason]
        await self.tracker.finish(
            record.id,
            state=state,
            result=done.final_text,
            error=error,
            prompt_tokens=done.usage.prompt_tokens,
            completion_tokens=done.usage.completion_tokens,
        )
        return TaskOutcome(
            task_id=record.id,
            agent=definition.name,
            state=state,
            text=done.final_text,
            error=error,
            usage=done.usage,
            turns=done.turns,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _TaskMeter:
    """The run's meter as one child sees it: same budget, charges marked with its task id."""

    meter: Meter
    task_id: str

    def exhausted(self) -> str | None:
        return self.meter.exhausted()

    async def charge(self, *, model: str, usage: Usage, task_id: str | None) -> None:
        await self.meter.charge(model=model, usage=usage, task_id=task_id or self.task_id)


def _labelled(approval: ApprovalFunc | None, record: TaskRecord) -> ApprovalFunc | None:
    """The caller's approval channel, with requests saying which child asks."""
    if approval is None:
        return None

    async def ask(request: ApprovalRequest) -> ApprovalDecision:
        return await approval(replace(request, agent=record.agent, task_id=record.id))

    return ask


def _clip(text: str) -> str:
    if len(text) <= MAX_LOG_TEXT:
        return text
    return text[:MAX_LOG_TEXT] + f"… [{len(text) - MAX_LOG_TEXT:,} more characters]"
