"""A real sandbox for these tests, or a skip that says why this machine cannot make one."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.sandbox import Sandbox, SandboxPolicy
from bot.tools.shell import Bash
from bot.tools.workspace import Workspace
from tests.processes import running_with

# CI sets this: there a missing sandbox is a failure, not a reason to skip.
REQUIRE = "BATON_TEST_REQUIRE_SANDBOX"


def require(found: Sandbox) -> Sandbox:
    """`found` if it works; else skip saying why, or fail where CI requires a sandbox."""
    if not found.available:
        message = f"no sandbox on this machine: {found.reason}"
        if os.environ.get(REQUIRE):
            pytest.fail(f"{message} ({REQUIRE} is set)")
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """The machine's sandbox, probed once."""
    with tempfile.TemporaryDirectory() as directory:
        found = asyncio.run(Sandbox.probe(SandboxPolicy.for_workspace(Path(directory))))
    return require(found)


@dataclass
class Site:
    """A workspace laid out like a real install, with things around it to protect."""

    root: Path
    workspace: Workspace
    sibling_secret: Path
    state_file: Path
    config: Path
    database: Path

    def bash(self, sandbox: Sandbox, *, network: bool = False) -> Bash:
        policy = SandboxPolicy.for_workspace(
            self.workspace.root,
            read_only=[self.config],
            databases=self.workspace.private_files,
            network=network,
        )
        return Bash(self.workspace, sandbox=sandbox, policy=policy)


def make_site(tmp_path: Path, *, git: bool = True) -> Site:
    root = tmp_path / "ws"
    (root / ".baton" / "agents").mkdir(parents=True)
    (root / ".baton" / "agents" / "x.md").write_text("the operator's agent\n")
    config = root / "baton.yaml"
    config.write_text("permissions: {}\n")
    database = root / "baton.db"
    with sqlite3.connect(database) as connection:
        connection.execute("create table secrets (value text)")
        connection.execute("insert into secrets values ('history')")
    connection.close()
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "secret.txt").write_text("sibling-secret\n")
    state = tmp_path / "home" / ".local" / "state" / "baton"
    state.mkdir(parents=True)
    (state / "baton.db").write_text("state-secret\n")
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        hook = root / ".git" / "hooks" / "pre-commit"
        hook.write_text("#!/bin/sh\nexit 0\n")
        hook.chmod(0o755)
    workspace = Workspace(root, protected_files=[config], private_files=[database])
    return Site(tmp_path, workspace, sibling / "secret.txt", state / "baton.db", config, database)


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return make_site(tmp_path)


def processes_with(marker: str) -> list[int]:
    """Host PIDs whose command line holds `marker` (sandboxed PIDs differ from the host's)."""
    return running_with(marker)


async def wait_until_gone(marker: str, timeout_s: float = 30.0) -> list[int]:
    """The processes still running with `marker` after waiting up to `timeout_s`."""
    for _ in range(round(timeout_s / 0.05)):
        if not processes_with(marker):
            break
        await asyncio.sleep(0.05)
    return processes_with(marker)
