"""Judging a call never holds the bot: size limits before parsing, a deadline, a worker thread."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from bot.engine.hooks import HookDecision, ToolInvocation, decide
from bot.permissions.hook import TOO_COMPLEX, PermissionHook
from bot.permissions.limits import MAX_COMMAND_BYTES, MAX_COMMAND_PARTS, count_parts
from bot.permissions.rules import PermissionRules, Rule
from bot.tools import Workspace, build_workspace_tools

RULES = PermissionRules.parse(
    allow=["bash"],
    ask=[Rule.parse("bash(git push*)").with_approvers(["U0RELEASE"])],
    deny=["bash(rm *)"],
)


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    root.mkdir()
    return Workspace(root)


def invocation(workspace: Workspace, command: str) -> ToolInvocation:
    bash = build_workspace_tools(workspace).get("bash")
    assert bash is not None
    raw = json.dumps({"command": command})
    return ToolInvocation(call_id="c1", tool=bash, arguments=bash.parse_arguments(raw),
                          raw_arguments=raw)  # fmt: skip


def judge(workspace: Workspace, command: str, **options: float) -> HookDecision:
    call = invocation(workspace, command)
    return PermissionHook(RULES, workspace, **options).check(call.tool, call.arguments)


def test_the_80_kb_pipeline_asks_before_any_parsing(repo: Workspace) -> None:
    command = "|".join(["x"] * 40_000)
    decision = judge(repo, command)
    assert decision.action == "ask"
    assert decision.risk == "too-complex"
    assert TOO_COMPLEX in decision.reason and "bytes long" in decision.reason
    # Whatever it hides, a rule's own approvers still hold.
    assert decision.approver_sets == (("U0RELEASE",),)


def test_too_many_parts_ask_even_when_short(repo: Workspace) -> None:
    command = ";".join(["x"] * (MAX_COMMAND_PARTS + 1))
    assert len(command.encode()) < MAX_COMMAND_BYTES
    decision = judge(repo, command)
    assert (decision.action, decision.risk) == ("ask", "too-complex")
    assert f"more than {MAX_COMMAND_PARTS} commands" in decision.reason


def test_real_commands_within_the_limits_are_judged_as_usual(repo: Workspace) -> None:
    """16 KB and 256 parts pass: they are judged, so a denied part is still denied."""
    parts = [f"echo line-{n:05d} {'x' * 56}" for n in range(256)]
    command = " && ".join(parts)
    assert len(command.encode()) >= 16 * 1024 and count_parts(command) == 256
    assert judge(repo, command).action == "allow"
    denied = " && ".join([*parts[:-1], "rm -f a"])
    assert judge(repo, denied).action == "deny"
    heredoc = "cat > notes.md <<'EOF'\n" + "| a | b | c |\n" * 2000 + "EOF\necho done"
    assert count_parts(heredoc) == 2
    assert judge(repo, heredoc).action == "allow"


def test_a_plain_check_outside_the_worker_has_no_deadline(repo: Workspace) -> None:
    decision = judge(repo, "git status && ls -la && echo hi", judge_seconds=0.0)
    assert decision.action == "allow"  # no deadline outside the worker: `check` is plain


async def test_the_worker_deadline_turns_slow_judging_into_a_question(repo: Workspace) -> None:
    hook = PermissionHook(RULES, repo, judge_seconds=0.0)
    decision = await hook(invocation(repo, "git status && ls -la && echo hi"))
    assert (decision.action, decision.risk) == ("ask", "too-complex")
    assert decision.approver_sets == (("U0RELEASE",),)


async def test_judging_runs_off_the_event_loop(repo: Workspace) -> None:
    """The loop keeps turning while a large command is judged, on another thread."""
    loop_thread = threading.get_ident()
    turns = 0
    judged_on: list[int] = []

    class Watched(PermissionHook):
        def check(self, tool: object, arguments: object) -> HookDecision:  # type: ignore[override]
            judged_on.append(threading.get_ident())
            return super().check(tool, arguments)  # type: ignore[arg-type]

    async def ticker() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    command = " | ".join(f"grep -e pattern-{n} file-{n}.txt" for n in range(200))
    ticking = asyncio.create_task(ticker())
    try:
        decision = await decide([Watched(RULES, repo)], invocation(repo, command))
    finally:
        ticking.cancel()
    assert decision.action == "allow"
    assert judged_on and judged_on[0] != loop_thread
    assert turns > 1


async def test_a_cancelled_run_stops_while_its_calls_are_judged(repo: Workspace) -> None:
    """Cancel reaches a run however often it is judging: it is never swallowed.

    A run that asks about one call after another is cancelled (a person pressed Cancel);
    the cancel lands at some point of a judging, and the run must end.
    """
    hook = PermissionHook(RULES, repo)
    call = invocation(repo, "|".join(["x"] * 40_000))  # answered at once, over and over

    async def run() -> None:
        while True:
            await hook(call)

    for _ in range(20):
        task = asyncio.create_task(run())
        await asyncio.sleep(0.005)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert done, "the cancel was swallowed: the run goes on judging"
        assert task.cancelled()


@pytest.mark.parametrize(
    "command",
    ["cat ./" + "[" * 65_000, "cat ./" + "[a" * 15_000, "cat " + "/".join(["*"] * 2_000)],
)
async def test_long_globs_are_not_expanded_but_asked_about(repo: Workspace, command: str) -> None:
    """A review found `cat ./[[[…` held the judging thread for minutes (fnmatch is
    superlinear, and no deadline reaches inside it), and 2,000 `*/` components made glob
    recurse out of the stack: such a glob is a person's to read, answered at once."""
    rules = PermissionRules.parse(allow=["bash(cat *)"], deny=["read_file(**/appsettings*)"])
    # A deadline far above what judging takes even on a loaded machine (parsing 65,000
    # characters can pass the real 2 s there): an expanded glob would still outlast it.
    hook = PermissionHook(rules, repo, judge_seconds=60)
    decision = await hook(invocation(repo, command))
    assert decision.action == "ask", decision
    assert decision.risk != "too-complex", decision  # judged in full, not cut off
