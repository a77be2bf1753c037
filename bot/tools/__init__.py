"""Tools the agents call, each confined to the workspace."""

from collections.abc import Mapping

from bot.tools.base import Tool, ToolArguments, ToolRegistry, cap_output
from bot.tools.files import EditFile, ListDir, ReadFile, WriteFile
from bot.tools.search import Glob, Grep
from bot.tools.shell import Bash
from bot.tools.workspace import Workspace


def build_workspace_tools(
    workspace: Workspace, *, environment: Mapping[str, str] | None = None
) -> ToolRegistry:
    """Every built-in tool, working in `workspace`."""
    return ToolRegistry(
        [
            ReadFile(workspace),
            WriteFile(workspace),
            EditFile(workspace),
            ListDir(workspace),
            Glob(workspace),
            Grep(workspace),
            Bash(workspace, environment=environment),
        ]
    )


__all__ = [
    "Tool",
    "ToolArguments",
    "ToolRegistry",
    "Workspace",
    "build_workspace_tools",
    "cap_output",
]
