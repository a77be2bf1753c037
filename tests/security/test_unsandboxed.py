"""Where no sandbox can be made, Baton says so everywhere and every bash call asks.

The machine is made to refuse namespaces the way a locked-down container does: a
`bwrap` first on PATH that fails with bubblewrap's own message. Nothing of Baton's is
replaced.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.sandbox.conftest import require
from tests.slack.harness import ALICE, start_harness, until
from tests.test_chat import base_env

REFUSAL = "bwrap: No permissions to create new namespace, likely because the kernel does not allow"


def forbid_namespaces(tmp_path: Path) -> str:
    """A PATH whose first `bwrap` fails as a container without user namespaces does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{REFUSAL}' >&2\nexit 1\n")
    fake.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


async def test_baton_chat_says_it_runs_unsandboxed_and_even_allowed_bash_asks(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "baton.yaml").write_text("permissions:\n  allow: [bash]\n")
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "echo ran > ran.txt"})]),
        Reply(text="Finished."),
    )
    env = base_env(
        tmp_path, PATH=forbid_namespaces(tmp_path), OPENAI_BASE_URL=fake_llm.url,
        OPENAI_API_KEY="sk-test", BATON_MODEL="fake-model", BATON_WORKSPACE=str(workspace),
        BATON_CONFIG=str(tmp_path / "baton.yaml"),
    )  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(b"write the file\nn\n"), 60)
    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert "Commands run unsandboxed" in text and "No permissions to create" in text
    assert "bash needs your approval" in text and "runs unsandboxed" in text
    assert not (workspace / "ran.txt").exists()
    tool_messages = [m for m in fake_llm.requests[1].messages if m.get("role") == "tool"]
    assert tool_messages and tool_messages[0]["content"].startswith("Not run")
    assert "runs unsandboxed" in err.decode() or "no OS sandbox" in err.decode()


async def test_app_home_warns_that_commands_run_unsandboxed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", forbid_namespaces(tmp_path))
    async with asynccontextmanager(start_harness)(tmp_path) as harness:
        assert not harness.baton.sandboxed
        event = {"type": "app_home_opened", "user": ALICE, "channel": "D1", "tab": "home",
                 "event_ts": "1.1"}  # fmt: skip
        assert (await harness.send_event(event)).status == 200
        await until(lambda: bool(harness.slack.calls_to("views.publish")))
        view = json.dumps(harness.slack.calls_to("views.publish")[0].params["view"])
        assert "Commands run unsandboxed" in view and "asks a person" in view


async def test_app_home_says_nothing_of_the_sandbox_when_there_is_one(tmp_path: Path) -> None:
    async with asynccontextmanager(start_harness)(tmp_path) as harness:
        require(harness.baton.sandbox)
        event = {"type": "app_home_opened", "user": ALICE, "channel": "D1", "tab": "home",
                 "event_ts": "1.1"}  # fmt: skip
        assert (await harness.send_event(event)).status == 200
        await until(lambda: bool(harness.slack.calls_to("views.publish")))
        view = json.dumps(harness.slack.calls_to("views.publish")[0].params["view"])
        assert "unsandboxed" not in view
