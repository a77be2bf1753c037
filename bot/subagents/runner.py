"""Runs a sub-agent: the same engine on a brand-new session, with narrowed tools."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bot import tracing
from bot.describe import Redact, describe_event, stop_error
from bot.engine import (
    ApprovalDecision,
    ApprovalFunc,
    ApprovalRequest,
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
    ToolStart,
    Usage,
)
from bot.engine.hooks import decide
from bot.engine.messages import ChatMessage
from bot.engine.tokens import TokenCounter
from bot.errors import ToolError
from bot.store.tasks import TaskRecord, TaskState
from bot.subagents import worktree as worktrees
from bot.subagents.children import ParentContext, SubAgentEvent, TaskOutcome, branch_note
from bot.subagents.control import control_tools
from bot.subagents.definition import TASK_TOOL_NAME, AgentDefinition
from bot.subagents.handoff import (
    HANDOFF_REQUEST,
    Handoff,
    SubmitResult,
    fallback_handoff,
)
from bot.subagents.memory import Remember
from bot.subagents.prompt import build_child_prompt
from bot.subagents.registry import AgentRegistry
from bot.subagents.task_tool import TaskTool
from bot.subagents.tracker import TaskTracker
from bot.tools.base import Tool, ToolRegistry
from bot.tools.skills import SKILL_TOOL_NAME, SkillTool

logger = logging.getLogger(__name__)

SHUTDOWN_REASON = "interrupted: Baton was shut down while it ran; start it again"
MAX_LOG_TEXT = 2_000
# The tools and hooks of a site, rebuilt to work in another directory (a worktree):
# the same rules and sandbox, confined to that directory instead of the workspace.
IsolatedSite = Callable[[Path], Awaitable[tuple[ToolRegistry, tuple[Hook, ...]]]]
NO_HANDOFF_REASON = (
    "the sub-agent ended without a valid handoff (submit_result), even when asked once; "
    "its last text is kept as the answer"
)
HANDOFF_TURNS = 3
# A directory found to be a git repository is not asked again for this long: the
# children of one fan-out start without a git call each. (A worktree that cannot be
# made after all fails that child with the reason.)
REPOSITORY_CHECK_S = 5.0


@dataclass(slots=True, kw_only=True)
class _Ending:
    """What a child's engine runs ended with, before the task is recorded as finished."""

    state: TaskState
    text: str
    error: str | None
    usage: Usage
    turns: int
    handoff: Handoff | None = None
    branch: str | None = None
    branch_commit: str | None = None
    change: str | None = None


async def deny_task_hook(invocation: ToolInvocation) -> HookDecision | None:
    """Second guard against recursion: a child may never delegate, whatever its tools."""
    if invocation.tool.name == TASK_TOOL_NAME:
        return HookDecision.deny("sub-agents cannot delegate; the task tool is not for them")
    return None


def task_guard(allowed: frozenset[str]) -> Hook:
    """The second guard for a child that may delegate: only to the agents its file lists."""

    async def guard(invocation: ToolInvocation) -> HookDecision | None:
        if invocation.tool.name != TASK_TOOL_NAME:
            return None
        wanted = getattr(invocation.arguments, "subagent_type", None)
        if wanted not in allowed:
            return HookDecision.deny(
                f"this agent may delegate only to {', '.join(sorted(allowed))}, not {wanted!r}"
            )
        return None

    return guard


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
        registry: AgentRegistry | None = None,
        max_task_depth: int = 2,
        isolated: IsolatedSite | None = None,
        worktrees_dir: Path | None = None,
        redact: Redact | None = None,
    ) -> None:
        """`registry` serves the `task` tool of children that may delegate (none without
        it), down to `max_task_depth` (the main agent is 0). `isolated` builds tools
        working in a worktree under `worktrees_dir`; without both, `isolation: worktree`
        is refused. `redact` masks credentials in every task-log line before the line is
        shortened: a secret cut in two is no longer found, and its first half would stay.
        """
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
        self.registry = registry
        self.max_task_depth = max_task_depth
        self.isolated = isolated
        self.worktrees_dir = worktrees_dir
        self.redact: Redact = redact if redact is not None else _unchanged
        # Per checkout: when its last check began, and that check (done or in flight).
        self._repository_checks: dict[Path, tuple[float, asyncio.Future[None]]] = {}

    def may_delegate(self, definition: AgentDefinition, depth: int) -> bool:
        """Whether an agent running at `depth` holds a `task` tool of its own."""
        return (
            bool(definition.allowed_subagents)
            and depth < self.max_task_depth
            and self.registry is not None
        )

    def build_engine(
        self,
        definition: AgentDefinition,
        parent: ParentContext,
        approval: ApprovalFunc | None,
        system_prompt: str,
        *,
        task_id: str | None = None,
        tools: ToolRegistry | None = None,
        hooks: Sequence[Hook] | None = None,
        extra_tools: Sequence[Tool] = (),
        delegates: frozenset[str] = frozenset(),
    ) -> Engine:
        """A fresh engine for the child: no parent history, no parent system prompt.

        Its tools are narrowed from `tools` (the parent's, or the same tools rebuilt in
        the child's worktree), then Baton's control tools (`extra_tools`) are added,
        which no tool list removes. It spends the parent's meter, its charges marked
        with `task_id`. It has no stored history to fold: its own requests are fitted by
        trimming and dropping.
        """
        meter = parent.meter
        if meter is not None and task_id is not None:
            meter = _TaskMeter(meter=meter, task_id=task_id)
        guard = task_guard(delegates) if delegates else deny_task_hook
        return Engine(
            llm=self.llm,
            model=definition.model or parent.model,
            tools=child_tools(definition, tools or parent.tools).with_tools(extra_tools),
            system_prompt=system_prompt,
            hooks=[*(self.hooks if hooks is None else hooks), guard],
            approval=approval,
            max_turns=definition.max_turns or self.default_max_turns,
            meter=meter,
            context_window=definition.context_window or self.context_window,
            counter=self.counter,
        )

    async def check_isolation(self, parent: ParentContext) -> None:
        """Refuse, before anything starts, an isolated child that could not be made.

        Raises:
            ToolError: No worktrees here, or the workspace is not a git repository.
        """
        if self.isolated is None or self.worktrees_dir is None:
            raise ToolError("isolation: worktree is not available in this workspace")
        # Always the site's own checkout, never the parent's tree: a lead working in a
        # worktree could have rewritten that tree's `.git` file to name a repository of
        # its own, whose config would run programs when Baton's git opens it.
        root = self.workspace
        loop = asyncio.get_running_loop()
        # A fan-out of isolated children asks once, not once per child: a check in
        # flight is shared, a passed one holds for REPOSITORY_CHECK_S, a failed one not.
        began, check = self._repository_checks.get(root, (0.0, None))
        if check is None or (
            check.done()
            and (
                check.cancelled()
                or check.exception() is not None
                or loop.time() - began >= REPOSITORY_CHECK_S
            )
        ):
            check = asyncio.ensure_future(worktrees.check_repository(root))
            # Read even when every caller went away meanwhile ("never retrieved").
            check.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._repository_checks[root] = (loop.time(), check)
        try:
            await asyncio.shield(check)  # one caller cancelled leaves it to the others
        except worktrees.WorktreeError as exc:
            raise ToolError(f"{exc}; the sub-agent was not started") from exc

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
        """Run a child inside the caller's turn; cancelling the caller cancels it."""
        if isolate:
            await self.check_isolation(parent)
        record = await self.tracker.start(
            session_id=parent.session_id,
            channel_id=parent.channel_id,
            agent=definition.name,
            description=description,
            prompt=prompt,
            background=False,
            started_by=parent.user_id,
            parent_id=parent.task_id,
            depth=parent.depth + 1,
            group=group,
        )
        # The child runs in a task of its own, known to the tracker, so `/tasks` can
        # cancel it without cancelling the run that waits for it.
        child = asyncio.create_task(
            self._run(
                record,
                definition,
                prompt,
                parent,
                _labelled(parent.approval, record),
                isolate=isolate,
            ),
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
            task = detail.task if detail else None
            return TaskOutcome(
                task_id=record.id,
                agent=definition.name,
                state="cancelled",
                text="",
                error=task.error if task and task.error else "cancelled",
                usage=Usage(),
                turns=0,
                branch=task.branch if task else None,
                change=task.change if task else None,
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
        isolate: bool = False,
        group: str | None = None,
    ) -> TaskRecord:
        """Start a child outside the caller's turn and return its record at once.

        Raises:
            TaskLimitReached: The session has `max_background_tasks` running already.
            ToolError: An isolated child in a workspace that is not a git repository.
        """
        if isolate:
            await self.check_isolation(parent)
        # Counting the session's running background tasks and recording this one are
        # one step across every replica (TaskStore.create_backgrounds).
        record = await self.tracker.start_background(
            limit=self.max_background_tasks,
            session_id=parent.session_id,
            channel_id=parent.channel_id,
            agent=definition.name,
            description=description,
            prompt=prompt,
            started_by=parent.user_id,
            parent_id=parent.task_id,
            depth=parent.depth + 1,
            group=group,
        )
        # The child runs in a task the tracker owns: its span joins the trace of the
        # call that started it, handed over here whatever context that task is made in.
        started_in = tracing.carried()
        self.tracker.run_child(
            record.id,
            self._run_background(
                record, definition, prompt, parent, isolate=isolate, started_in=started_in
            ),
            session_id=record.session_id,
        )
        return record

    async def _run_background(
        self,
        record: TaskRecord,
        definition: AgentDefinition,
        prompt: str,
        parent: ParentContext,
        *,
        isolate: bool,
        started_in: tracing.Context,
    ) -> None:
        try:
            with tracing.resumed(started_in):
                await self._run(
                    record,
                    definition,
                    prompt,
                    parent,
                    self._deny_approvals(record),
                    isolate=isolate,
                )
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
        *,
        isolate: bool = False,
    ) -> TaskOutcome:
        """`_execute` within the child's span (`invoke_agent {name}`), when traces are on:
        its model calls and tools are under it."""
        with tracing.current().agent(
            name=definition.name,
            task_id=record.id,
            model=definition.model or parent.model,
            background=record.background,
            depth=parent.depth + 1,
        ) as span:
            outcome = await self._execute(
                record, definition, prompt, parent, approval, isolate=isolate
            )
            span.set_attribute("baton.task.state", outcome.state)
            span.set_attribute("baton.task.turns", outcome.turns)
            span.set_attribute(tracing.INPUT_TOKENS, outcome.usage.prompt_tokens)
            span.set_attribute(tracing.OUTPUT_TOKENS, outcome.usage.completion_tokens)
            if outcome.state == "failed":
                tracing.failed(span, "failed")
            return outcome

    async def _execute(
        self,
        record: TaskRecord,
        definition: AgentDefinition,
        prompt: str,
        parent: ParentContext,
        approval: ApprovalFunc | None,
        *,
        isolate: bool = False,
    ) -> TaskOutcome:
        """Run the child (in its own worktree when isolated), then record how it ended.

        An isolated child's worktree is checked out while its first model call is in
        flight: its tools are built for the worktree's directory at once, and its first
        tool call waits for the checkout. If the checkout fails, the run stops and the
        task fails, saying why.
        """
        tree: worktrees.Worktree | None = None
        populating: asyncio.Task[worktrees.Worktree] | None = None
        tools = parent.tools
        hooks = parent.hooks if parent.hooks is not None else self.hooks
        where = parent.root or self.workspace
        if isolate:
            assert self.isolated is not None and self.worktrees_dir is not None
            try:
                path = await asyncio.to_thread(
                    worktrees.make_place, self.worktrees_dir, record.id, self.workspace
                )
            except worktrees.WorktreeError as exc:
                return await self._worktree_failed(record, definition, exc)
            # From the site's checkout (see check_isolation), whoever the parent is.
            populating = asyncio.create_task(
                worktrees.create_in(self.workspace, path, start=parent.branch),
                name=f"{record.id}-worktree",
            )
            watch = _CheckoutWatch(asyncio.current_task())
            populating.add_done_callback(watch)
        try:
            if populating is not None:
                assert self.isolated is not None
                rebuilt, site_hooks = await self.isolated(path)
                # The parent's workspace tools, rebuilt in the worktree; others as they are.
                tools = ToolRegistry(_rebuilt(tool, rebuilt) for tool in parent.tools)
                hooks = (_when_checked_out(populating), *site_hooks)
                where = path
                await self.tracker.append_log(
                    record.id,
                    f"Working in its own worktree on branch {worktrees.branch_name(record.id)}",
                )
            ending = await self._drive(
                record, definition, prompt, parent, approval, tools=tools, hooks=hooks, where=where
            )
            if populating is not None:
                watch.disarm()  # from here a failed checkout raises where it is awaited
                tree = await populating
        except BaseException as exc:
            if populating is not None:
                watch.disarm()
                if watch.stopped:
                    current = asyncio.current_task()
                    assert current is not None
                    current.uncancel()  # that cancel was the watch's
                    if current.cancelling() and isinstance(exc, asyncio.CancelledError):
                        raise  # somebody else's came too
                tree = await asyncio.shield(_checked_out(populating))
                failure = _failure(populating)
                cancelled = isinstance(exc, asyncio.CancelledError) and not watch.stopped
                if failure is not None and not cancelled:
                    return await self._worktree_failed(record, definition, failure)
            # Cancelled, shut down or crashed: whatever the child did stays on its branch.
            if tree is not None:
                await asyncio.shield(self._keep_work(record, tree))
            raise
        if tree is not None:
            change = await self._close_worktree(record, tree)
            if change is not None:
                ending.branch, ending.change = change.branch, change.summary()
                ending.branch_commit = change.commit
        # The stored result is the answer; the status, evidence and limitations are in
        # the handoff, shown with it wherever a parent or a person reads the result.
        text = ending.handoff.answer if ending.handoff is not None else ending.text
        if tree is not None:
            text += "\n\n" + branch_note(ending.branch, ending.change)
        await self.tracker.finish(
            record.id,
            state=ending.state,
            result=text,
            error=ending.error,
            prompt_tokens=ending.usage.prompt_tokens,
            completion_tokens=ending.usage.completion_tokens,
            handoff=ending.handoff.to_json() if ending.handoff else None,
            branch=ending.branch,
            branch_commit=ending.branch_commit,
            change=ending.change,
        )
        return TaskOutcome(
            task_id=record.id,
            agent=definition.name,
            state=ending.state,
            text=text,
            error=ending.error,
            usage=ending.usage,
            turns=ending.turns,
            handoff=ending.handoff,
            isolated=tree is not None,
            branch=ending.branch,
            change=ending.change,
        )

    async def _worktree_failed(
        self, record: TaskRecord, definition: AgentDefinition, exc: BaseException
    ) -> TaskOutcome:
        error = f"could not make its worktree: {exc}"
        await self.tracker.append_log(record.id, f"✗ {error}")
        await self.tracker.finish(record.id, state="failed", error=error)
        return _failed(record, definition, error)

    async def recover_worktree(self, record: TaskRecord) -> worktrees.Change | None:
        """Keep the work of an isolated child whose process died: commit what is in its
        worktree on its branch and name the branch on the task, as a cancel would."""
        if self.worktrees_dir is None:
            return None
        try:
            tree = await worktrees.reopen(self.workspace, record.id, self.worktrees_dir)
        except worktrees.WorktreeError as exc:
            logger.warning("task %s: could not look for its worktree: %s", record.id, exc)
            return None
        if tree is None:
            # A process that died between making the directory and checking it out
            # left it empty: nothing to keep, so it goes (only while empty).
            with contextlib.suppress(OSError):
                await asyncio.to_thread((self.worktrees_dir / record.id).rmdir)
            return None
        return await self._keep_work(record, tree)

    async def recover_leftover_worktrees(self) -> list[str]:
        """At start-up: commit the work left in this state directory's worktrees by
        children that no longer run (this process was killed; another replica may have
        failed their tasks meanwhile). Returns the ids of the tasks whose work was kept."""
        if self.worktrees_dir is None:
            return []
        directory = self.worktrees_dir
        names = await asyncio.to_thread(
            lambda: sorted(p.name for p in directory.glob("task-*")) if directory.is_dir() else []
        )
        kept = []
        for name in names:
            record = await self.tracker.store.get(name)
            if record is None or record.state == "running":
                continue  # not a task of this database, or still running somewhere
            if await self.recover_worktree(record) is not None:
                kept.append(name)
        return kept

    async def _close_worktree(
        self, record: TaskRecord, tree: worktrees.Worktree
    ) -> worktrees.Change | None:
        """Commit what the child changed on its branch and remove its worktree."""
        try:
            change = await worktrees.finish(
                tree, message=f"{record.agent}: {record.description} ({record.id})"
            )
        except worktrees.WorktreeError as exc:
            logger.warning("task %s: could not close its worktree: %s", record.id, exc)
            await self.tracker.append_log(record.id, f"✗ could not commit its changes: {exc}")
            return None
        if change is None:
            await self.tracker.append_log(record.id, "No changes: its worktree and branch removed")
        else:
            await self.tracker.append_log(
                record.id, f"Committed on {change.branch}: {change.summary()}"
            )
        return change

    async def _keep_work(
        self, record: TaskRecord, tree: worktrees.Worktree
    ) -> worktrees.Change | None:
        """A child's work stays on its branch when its task ended without it (cancelled,
        crashed, or its process died), and the task names the branch."""
        change = await self._close_worktree(record, tree)
        if change is not None:
            await self.tracker.store.record_branch(
                record.id, branch=change.branch, commit=change.commit, change=change.summary()
            )
        return change

    def _child_tools(
        self,
        record: TaskRecord,
        definition: AgentDefinition,
        parent: ParentContext,
        approval: ApprovalFunc | None,
        *,
        tools: ToolRegistry,
        hooks: Sequence[Hook],
        where: Path,
        submit: SubmitResult,
    ) -> tuple[list[Tool], frozenset[str]]:
        """Baton's control tools for this child, and the agents it may delegate to."""
        extra: list[Tool] = [submit]
        if definition.memory == "project":
            extra.append(Remember(self.workspace, definition.name, task_id=record.id))
        depth = parent.depth + 1
        if not self.may_delegate(definition, depth):
            return extra, frozenset()
        assert self.registry is not None
        allowed = frozenset(definition.allowed_subagents)
        own = ParentContext(
            tools=child_tools(definition, tools),
            model=definition.model or parent.model,
            approval=approval,
            session_id=parent.session_id,
            channel_id=parent.channel_id,
            user_id=parent.user_id,
            progress=parent.progress,
            meter=parent.meter,
            depth=depth,
            task_id=record.id,
            root=where,
            hooks=tuple(hooks),
            # In the thread's worktree still (not a worktree of its own): the thread's branch.
            branch=parent.branch if where == (parent.root or self.workspace) else None,
        )
        extra.append(TaskTool(registry=self.registry, runner=self, parent=own, allowed=allowed))
        extra += control_tools(self.tracker, session_id=parent.session_id, parent_id=record.id)
        return extra, allowed

    async def _drive(
        self,
        record: TaskRecord,
        definition: AgentDefinition,
        prompt: str,
        parent: ParentContext,
        approval: ApprovalFunc | None,
        *,
        tools: ToolRegistry,
        hooks: Sequence[Hook],
        where: Path,
    ) -> _Ending:
        """Run the child's engine; ask once for a handoff it did not submit."""
        # The site's own hooks: an isolated child's first one waits for its checkout.
        preload = await _preloader(
            definition, tools, parent.hooks if parent.hooks is not None else self.hooks
        )
        child_prompt = build_child_prompt(
            definition,
            workspace=where,
            skills_dir=self.skills_dir,
            memory_root=self.workspace if definition.memory == "project" else None,
            isolated=where != (parent.root or self.workspace),
            preload=preload.load if preload is not None else None,
        )
        submit = SubmitResult()
        extra, delegates = self._child_tools(
            record,
            definition,
            parent,
            approval,
            tools=tools,
            hooks=hooks,
            where=where,
            submit=submit,
        )
        engine = self.build_engine(
            definition,
            parent,
            approval,
            child_prompt.text,
            task_id=record.id,
            tools=tools,
            hooks=hooks,
            extra_tools=extra,
            delegates=delegates,
        )
        lines = [f"Starting {definition.name} ({engine.model}, {len(engine.tools)} tools)"]
        refused = preload.refused if preload is not None else {}
        lines += [
            f"⚠ skill {name!r} not put in its prompt ({refused[name]}); running without it"
            if name in refused
            else f"⚠ skill {name!r} not found; running without it"
            for name in child_prompt.missing_skills
        ]
        await self.tracker.append_log(record.id, *lines)
        transcript: list[ChatMessage] = []
        inbox = _inbox(self.tracker, record.id)
        done, error = await self._consume(
            engine.run_stream(prompt, transcript=transcript, inbox=inbox),
            record,
            definition,
            parent,
        )
        usage, turns, last_text = done.usage, done.turns, done.final_text
        if done.stop_reason == "completed" and submit.handoff is None:
            await self.tracker.append_log(record.id, "… asked once for its handoff (submit_result)")
            engine.max_turns = HANDOFF_TURNS
            again, error = await self._consume(
                engine.run_stream(HANDOFF_REQUEST, history=transcript, inbox=inbox),
                record,
                definition,
                parent,
            )
            # The child's work is done either way: a request that fails or runs out
            # leaves it completed, with its earlier answer.
            usage, turns = usage + again.usage, turns + again.turns
            last_text = last_text.strip() or again.final_text
        state: TaskState
        if done.stop_reason == "completed":
            state = "completed"
        else:
            state = "failed"
            error = stop_error(done.stop_reason, max_turns=engine.max_turns) or error
        handoff = submit.handoff
        if handoff is None and state == "completed":
            handoff = fallback_handoff(last_text, NO_HANDOFF_REASON)
            await self.tracker.append_log(record.id, f"⚠ {NO_HANDOFF_REASON}")
        if handoff is not None:
            await self.tracker.append_log(record.id, *_handoff_log(handoff, self.redact))
        return _Ending(
            state=state,
            text=last_text,
            error=error,
            usage=usage,
            turns=turns,
            handoff=handoff,
        )

    async def _consume(
        self,
        events: AsyncIterator[RunEvent],
        record: TaskRecord,
        definition: AgentDefinition,
        parent: ParentContext,
    ) -> tuple[Done, str | None]:
        """Pass a child's events on (progress, its log) and return how the run ended."""
        text: list[str] = []
        done: Done | None = None
        error: str | None = None
        async for event in events:
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
                    await self.tracker.append_log(record.id, _clip(self.redact(piece)))
            if isinstance(event, ErrorEvent):
                error = event.message
            if isinstance(event, Done):
                done = event
            if line := describe_event(event, redact=self.redact):
                await self.tracker.append_log(record.id, line)
        assert done is not None
        return done, error


def child_tools(definition: AgentDefinition, parent: ToolRegistry) -> ToolRegistry:
    """The child's tools narrowed from the parent's (`resolve_tools`), its `skill` tool
    offering only the skills its file's `skills` names, when it names any."""
    tools = definition.resolve_tools(parent)
    if not definition.skills:
        return tools
    return ToolRegistry(
        tool.limited(definition.skills) if isinstance(tool, SkillTool) else tool for tool in tools
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Preload:
    """How the skills a child's file names reach it when its tools leave out `skill`
    (as Claude Code does, in its prompt), and those the rules keep out, with why."""

    load: Callable[[str], str | None]
    refused: dict[str, str]


async def _preloader(
    definition: AgentDefinition, tools: ToolRegistry, hooks: Sequence[Hook]
) -> _Preload | None:
    """None when the child has the `skill` tool itself. Otherwise each skill is read by
    the parent's `skill` tool (its limit and the deny rules on reading hold), once the
    hooks allow a call of it: a rule that denies or asks keeps the skill out (nobody can
    be asked while a prompt is made). Without a parent's tool, none is read."""
    if not definition.skills or SKILL_TOOL_NAME in child_tools(definition, tools):
        return None
    skill = tools.get(SKILL_TOOL_NAME)
    if not isinstance(skill, SkillTool):
        return _Preload(load=lambda name: None, refused={})
    limited = skill.limited(definition.skills)
    allowed: set[str] = set()
    refused: dict[str, str] = {}
    for name in definition.skills:
        raw = json.dumps({"name": name})
        try:
            arguments = limited.parse_arguments(raw)
        except ToolError:
            continue  # not a name a skill can have: reported missing
        invocation = ToolInvocation(
            call_id=f"preload-{name}", tool=limited, arguments=arguments, raw_arguments=raw
        )
        decision = await decide(hooks, invocation)
        if decision.action == "allow":
            allowed.add(name)
        else:
            refused[name] = decision.reason or decision.action
    return _Preload(
        load=lambda name: limited.preload(name) if name in allowed else None, refused=refused
    )


def _rebuilt(tool: Tool, rebuilt: ToolRegistry) -> Tool:
    """`tool` as rebuilt in a worktree; `skill` stays the parent's, limit included.

    Its first request lists the skills while the worktree is still being checked out,
    so they are read where the parent reads them (they only read).
    """
    if isinstance(tool, SkillTool):
        return tool
    return rebuilt.get(tool.name) or tool


def _inbox(tracker: TaskTracker, task_id: str) -> Callable[[], list[ChatMessage]]:
    def take() -> list[ChatMessage]:
        return tracker.inbox(task_id)

    return take


def _handoff_log(handoff: Handoff, redact: Redact) -> list[str]:
    lines = [f"Handoff: {handoff.status}", _clip(redact(handoff.answer))]
    lines += [f"  evidence: {redact(item)}" for item in handoff.evidence]
    lines += [f"  limitation: {redact(item)}" for item in handoff.limitations]
    lines += [f"  claim: {redact(f'{claim.topic}: {claim.position}')}" for claim in handoff.claims]
    return lines


def _unchanged(text: str) -> str:
    return text


def _when_checked_out(populating: asyncio.Task[worktrees.Worktree]) -> Hook:
    """First in an isolated child's hooks: no tool runs before its worktree is there."""

    async def checked_out(invocation: ToolInvocation) -> HookDecision | None:
        try:
            await asyncio.shield(populating)
        except worktrees.WorktreeError as exc:
            return HookDecision.deny(f"its worktree could not be made: {exc}")
        return None

    return checked_out


class _CheckoutWatch:
    """Cancels the child's run when its worktree cannot be made (`_run` then says why)."""

    def __init__(self, run: asyncio.Task[object] | None) -> None:
        self.run = run
        self.stopped = False

    def __call__(self, populating: asyncio.Task[worktrees.Worktree]) -> None:
        if self.run is not None and _failure(populating) is not None:
            self.stopped = True
            self.run.cancel()

    def disarm(self) -> None:
        """The run no longer waits on its drive: a failure is seen where it is awaited."""
        self.run = None


def _failure(populating: asyncio.Task[worktrees.Worktree]) -> BaseException | None:
    if not populating.done() or populating.cancelled():
        return None
    return populating.exception()


async def _checked_out(populating: asyncio.Task[worktrees.Worktree]) -> worktrees.Worktree | None:
    """The worktree once its checkout has ended; None when it failed."""
    try:
        return await populating
    except Exception:
        return None


def _failed(record: TaskRecord, definition: AgentDefinition, error: str) -> TaskOutcome:
    return TaskOutcome(
        task_id=record.id,
        agent=definition.name,
        state="failed",
        text="",
        error=error,
        usage=Usage(),
        turns=0,
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
