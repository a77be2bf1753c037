"""The bash tool: runs in the workspace, keeps secrets out, kills whole process groups."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bot.sandbox import Sandbox, SandboxPolicy, minimal_environment
from bot.tools import Workspace
from bot.tools.shell import Bash, BashArgs
from tests.processes import alive
from tests.sandbox.conftest import require


async def test_runs_in_the_workspace_and_reports_exit_code(workspace: Workspace) -> None:
    bash = Bash(workspace, environment={"PATH": os.environ["PATH"]})
    out = await bash.run(BashArgs(command="pwd; echo oops >&2; exit 4"))
    assert out.splitlines() == ["exit code 4", str(workspace.root), "oops"]
    assert await bash.run(BashArgs(command="true")) == "exit code 0 (no output)"


async def test_secrets_are_not_passed_to_commands(workspace: Workspace) -> None:
    environment = {
        "PATH": os.environ["PATH"],
        "SLACK_BOT_TOKEN": "xoxb-secret",
        "OPENAI_API_KEY": "sk-secret",
        "GITHUB_TOKEN": "ghp-secret",
        "DATABASE_URL": "postgresql://u:p@h/db",
        "LANG": "C.UTF-8",
    }
    bash = Bash(workspace, environment=environment)
    out = await bash.run(BashArgs(command="env"))
    for value in ("xoxb-secret", "sk-secret", "ghp-secret", "postgresql:"):
        assert value not in out
    assert "LANG=C.UTF-8" in out
    assert set(minimal_environment(environment)) == {"PATH", "LANG"}


async def test_timeout_kills_the_command_and_its_children(workspace: Workspace) -> None:
    bash = Bash(workspace)
    command = "sleep 300 & echo $! > child.pid; echo started; sleep 300"
    out = await bash.run(BashArgs(command=command, timeout_s=1))
    assert "started" in out
    assert "timed out after 1 s" in out
    child = int((workspace.root / "child.pid").read_text())
    for _ in range(50):
        if not alive(child):
            break
        await asyncio.sleep(0.05)
    assert not alive(child)


async def test_cancel_kills_the_process_group(workspace: Workspace) -> None:
    bash = Bash(workspace)
    task = asyncio.create_task(
        bash.run(BashArgs(command="sleep 300 & echo $! > child.pid; sleep 300"))
    )
    pid_file = workspace.root / "child.pid"
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child = int(pid_file.read_text())
    for _ in range(50):
        if not alive(child):
            break
        await asyncio.sleep(0.05)
    assert not alive(child)


async def test_output_is_capped_with_a_note(workspace: Workspace) -> None:
    bash = Bash(workspace, output_limit=1000)
    out = await bash.run(BashArgs(command="seq 1 100000"))
    assert len(out) < 1300
    assert out.startswith("exit code 0\n1\n2\n")
    assert out.rstrip().endswith("100000")
    assert "cut" in out


async def test_empty_command_is_an_error(workspace: Workspace) -> None:
    from bot.errors import ToolError

    with pytest.raises(ToolError, match="empty"):
        await Bash(workspace).run(BashArgs(command="  "))


def test_timeout_bounds_are_validated() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        BashArgs(command="ls", timeout_s=601)
    assert BashArgs(command="ls").timeout_s == 120


async def test_timeout_holds_after_the_command_closes_its_output(workspace: Workspace) -> None:
    bash = Bash(workspace)
    command = "echo $$ > main.pid; exec >/dev/null 2>&1; sleep 300"
    out = await asyncio.wait_for(bash.run(BashArgs(command=command, timeout_s=1)), 20)
    assert "timed out after 1 s" in out
    pid = int((workspace.root / "main.pid").read_text())
    for _ in range(50):
        if not alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not alive(pid)


async def test_without_a_sandbox_commands_still_run_with_a_minimal_environment(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATON_TEST_CANARY", "canary-value")
    bash = Bash(workspace, sandbox=Sandbox.unavailable("bwrap is not installed"))
    assert not bash.sandboxed
    out = await bash.run(BashArgs(command="env; pwd"))
    assert "canary-value" not in out
    assert str(workspace.root) in out
    names = {line.split("=", 1)[0] for line in out.splitlines()[1:] if "=" in line}
    assert names <= {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_"}


async def test_a_sandboxed_bash_keeps_the_tools_contract(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    workspace = Workspace(root)
    sandbox = require(await Sandbox.probe(SandboxPolicy.for_workspace(root)))
    bash = Bash(workspace, sandbox=sandbox, output_limit=1000)
    assert bash.sandboxed
    out = await bash.run(BashArgs(command="pwd; echo oops >&2; exit 4"))
    assert out.splitlines() == ["exit code 4", str(root), "oops"]
    assert await bash.run(BashArgs(command="true")) == "exit code 0 (no output)"
    capped = await bash.run(BashArgs(command="seq 1 100000"))
    assert len(capped) < 1300
    assert capped.rstrip().endswith("100000")
    command = "echo $$ > main.pid; exec >/dev/null 2>&1; sleep 300"
    out = await asyncio.wait_for(bash.run(BashArgs(command=command, timeout_s=1)), 20)
    assert "timed out after 1 s" in out
    assert sorted(p.name for p in root.iterdir()) == ["main.pid"]


async def test_unsandboxed_commands_run_as_the_bot(workspace: Workspace) -> None:
    bash = Bash(workspace, sandbox=Sandbox.unavailable("bwrap is not installed"))
    assert bash.run_as is None
    out = await bash.run(BashArgs(command="id -u"))
    assert out == f"exit code 0\n{os.geteuid()}\n"
