"""Tools the agents call, each confined to the workspace."""

from collections.abc import Mapping, Sequence

from bot.sandbox import Sandbox, SandboxPolicy
from bot.tools.base import Tool, ToolArguments, ToolRegistry, cap_output
from bot.tools.files import EditFile, ListDir, ReadFile, WriteFile
from bot.tools.search import DEFAULT_GREP_DEADLINE_S, Glob, Grep, SecretCheck
from bot.tools.shell import Bash
from bot.tools.skills import SkillTool
from bot.tools.workspace import Workspace


def build_workspace_tools(
    workspace: Workspace,
    *,
    environment: Mapping[str, str] | None = None,
    is_secret: SecretCheck | None = None,
    grep_deadline_s: float = DEFAULT_GREP_DEADLINE_S,
    sandbox: Sandbox | None = None,
    policy: SandboxPolicy | None = None,
    show_secrets: Sequence[str] = (),
    hide: Sequence[str] = (),
) -> ToolRegistry:
    """Every built-in tool, working in `workspace`; grep skips files `is_secret` flags.

    grep stops after `grep_deadline_s` seconds and reports what it found by then. bash
    runs its commands in `sandbox` under `policy` when the sandbox is available, with
    the workspace's secret files hidden but those `show_secrets` names, and the files
    `hide` matches (deny rules on reading) hidden too; `skill` refuses those files.
    """
    return ToolRegistry(
        [
            ReadFile(workspace),
            WriteFile(workspace),
            EditFile(workspace),
            ListDir(workspace),
            Glob(workspace),
            Grep(workspace, is_secret=is_secret, deadline_s=grep_deadline_s),
            Bash(
                workspace,
                sandbox=sandbox,
                policy=policy,
                environment=environment,
                show_secrets=show_secrets,
                hide=hide,
            ),
            SkillTool(workspace, hide=hide),
        ]
    )


__all__ = [
    "SkillTool",
    "Tool",
    "ToolArguments",
    "ToolRegistry",
    "Workspace",
    "build_workspace_tools",
    "cap_output",
]
