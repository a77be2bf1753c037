"""Sub-agents: definitions, the registry, the `task` tool, the runner and the tracker."""

from bot.subagents.builtins import BUILTIN_AGENTS
from bot.subagents.children import (
    ChildRunner,
    ParentContext,
    ProgressSink,
    SubAgentEvent,
    TaskOutcome,
)
from bot.subagents.definition import TASK_TOOL_NAME, AgentDefinition
from bot.subagents.delivery import render_finished_tasks
from bot.subagents.registry import AgentRegistry
from bot.subagents.runner import SubAgentRunner
from bot.subagents.task_tool import TaskTool
from bot.subagents.tracker import TaskTracker

__all__ = [
    "BUILTIN_AGENTS",
    "TASK_TOOL_NAME",
    "AgentDefinition",
    "AgentRegistry",
    "ChildRunner",
    "ParentContext",
    "ProgressSink",
    "SubAgentEvent",
    "SubAgentRunner",
    "TaskOutcome",
    "TaskTool",
    "TaskTracker",
    "render_finished_tasks",
]
