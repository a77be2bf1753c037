"""The tools a delegating agent uses on the children it started: steer, cancel, status,
and reading a result that was cut for length.

Each sees only the children of the run that holds it (same session, same parent
task), so a task id from another thread, or a sibling's child, is "no such task".
They are Baton's control tools: they never ask a person.
"""

from __future__ import annotations

from pydantic import Field

from bot.errors import SteeringFull, ToolError
from bot.store.tasks import TaskRecord
from bot.subagents.handoff import Handoff
from bot.subagents.results import READ_RESULT_TOOL, escape_result, fitting_length
from bot.subagents.tracker import TaskTracker
from bot.tools.base import Tool, ToolArguments

MAX_STEER_CHARS = 4_000
STATUS_LOG_LINES = 8
# Escaped characters of a result one read returns: under the engine's cap on a tool
# result (30,000), so no page is ever cut in its middle.
RESULT_PAGE = 20_000


class TaskIdArgs(ToolArguments):
    id: str = Field(max_length=128, description="The task id, as `task` returned it.")


class ReadArgs(ToolArguments):
    id: str = Field(max_length=128, description="The task id, as `task` returned it.")
    offset: int = Field(
        default=0,
        ge=0,
        description="Where to start, in characters: 0 for the beginning, or the offset a "
        "result cut for length names.",
    )


class SteerArgs(ToolArguments):
    id: str = Field(max_length=128, description="The task id, as `task` returned it.")
    message: str = Field(
        max_length=MAX_STEER_CHARS,
        description="What the child should know or change; it reads it before its next step.",
    )


class _ChildTool(Tool):
    read_only = True
    control = True
    main_argument = None

    def __init__(self, *, tracker: TaskTracker, session_id: int, parent_id: str | None) -> None:
        self.tracker = tracker
        self.session_id = session_id
        self.parent_id = parent_id

    async def _child(self, task_id: str) -> TaskRecord:
        detail = await self.tracker.get(task_id.strip())
        task = detail.task if detail else None
        if task is None or task.session_id != self.session_id or task.parent_id != self.parent_id:
            raise ToolError(f"there is no task {task_id!r} among the ones you started")
        return task


class SteerTask(_ChildTool):
    name = "steer_task"
    description = (
        "Send a message to a running sub-agent task you started (background or not): it "
        "reads it before its next model call. Use it to correct course or add a fact."
    )
    arguments = SteerArgs

    async def run(self, args: SteerArgs) -> str:
        task = await self._child(args.id)
        message = args.message.strip()
        if not message:
            raise ToolError("the message is empty")
        if task.state != "running":
            raise ToolError(f"{task.id} is no longer running ({task.state}); it cannot be steered")
        try:
            sent = await self.tracker.steer(task.id, message, author="the agent that started you")
        except SteeringFull as exc:
            raise ToolError(str(exc)) from exc
        if sent is None:
            raise ToolError(f"{task.id} finished before the message could reach it")
        return f"Sent to {task.id}; it reads it before its next model call."


class CancelTask(_ChildTool):
    name = "cancel_task"
    description = "Cancel a running sub-agent task you started. Its partial work is kept."
    arguments = TaskIdArgs

    async def run(self, args: TaskIdArgs) -> str:
        task = await self._child(args.id)
        if task.state != "running":
            return f"{task.id} is not running ({task.state}); nothing to cancel."
        record = await self.tracker.cancel(task.id, by="the agent that started it")
        if record is None:
            return f"{task.id} finished before it could be cancelled."
        return f"Cancelled {task.id}."


class TaskStatus(_ChildTool):
    name = "task_status"
    description = (
        "How a sub-agent task you started is doing: its state and its latest log lines. "
        "It never takes a background result: that still arrives with a later message."
    )
    arguments = TaskIdArgs

    async def run(self, args: TaskIdArgs) -> str:
        task = await self._child(args.id)
        detail = await self.tracker.get(task.id)
        log = detail.log[-STATUS_LOG_LINES:] if detail else ()
        lines = [f"{task.id} ({task.agent}): {task.state}"]
        if task.group:
            lines.append(f"group: {task.group}")
        if task.state != "running":
            handoff = Handoff.from_json(task.handoff) if task.handoff else None
            if handoff is not None:
                lines.append(f"handoff status: {handoff.status}")
            if task.background:
                lines.append(
                    "Its result is not shown here: it is delivered with the next message."
                    if not task.delivered
                    else "Its result was delivered already."
                )
            elif task.error:
                lines.append(f"error: {task.error}")
        if task.branch:
            lines.append(f"branch: {task.branch} ({task.merge_state or 'pending'})")
        if log:
            lines.append("latest log lines:")
            lines += [f"  {line}" for line in log]
        return "\n".join(lines)


class ReadTaskResult(_ChildTool):
    """The whole result of a finished child, a page at a time: what a result cut for
    length points to, so nothing a child wrote is out of its parent's reach."""

    name = READ_RESULT_TOOL
    description = (
        "Read the whole result of a sub-agent task you started, a page at a time. Use it "
        "when a result you were given was cut for length: the cut names the offset to read "
        "on from. A background result can be read once it has been delivered."
    )
    arguments = ReadArgs

    async def run(self, args: ReadArgs) -> str:
        task = await self._child(args.id)
        if task.state == "running":
            raise ToolError(f"{task.id} is still running: it has no result yet")
        if task.background and not task.delivered:
            raise ToolError(
                f"{task.id} has finished, and its result arrives with the next message; "
                "read on from there"
            )
        text = task.result or ""
        if args.offset > len(text):
            raise ToolError(
                f"offset {args.offset} is past the end of {task.id}'s result "
                f"({len(text):,} characters)"
            )
        end = args.offset + fitting_length(text[args.offset :], RESULT_PAGE)
        page = escape_result(text[args.offset : end])
        wrapped = (
            f'<task_result id="{task.id}" from="{args.offset}" to="{end}" '
            f'of="{len(text)}">{page}</task_result>'
        )
        if end >= len(text):
            return f"{wrapped}\n[The end of {task.id}'s result.]"
        return (
            f"{wrapped}\n[{len(text) - end:,} more characters: read on with "
            f'{READ_RESULT_TOOL}(id="{task.id}", offset={end}).]'
        )


def control_tools(tracker: TaskTracker, *, session_id: int, parent_id: str | None) -> list[Tool]:
    """steer_task, cancel_task, task_status and read_task_result for the run `parent_id`
    (None: the main agent)."""
    return [
        cls(tracker=tracker, session_id=session_id, parent_id=parent_id)
        for cls in (SteerTask, CancelTask, TaskStatus, ReadTaskResult)
    ]
