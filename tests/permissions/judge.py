"""One bash call judged by the real permission hook, as the tests of the rules ask it."""

from __future__ import annotations

import json

from bot.engine import HookDecision
from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.tools import Workspace, build_workspace_tools


def judge_command(
    workspace: Workspace, command: str, rules: PermissionRules, **options: bool
) -> HookDecision:
    """The hook's decision on `bash` running `command` in `workspace` under `rules`."""
    bash = build_workspace_tools(workspace).get("bash")
    assert bash is not None
    hook = PermissionHook(rules, workspace, **options)
    return hook.check(bash, bash.parse_arguments(json.dumps({"command": command})))
