"""The adversarial battery: every hostile call through the real hooks and the real tools.

Two configurations, as issue 8 states them:

* realistic (`allow: [read_file, list_dir, glob, grep, "bash(git *)", "bash(ls*)",
  "bash(cat *)"]`, `ask: [write_file, edit_file]`): no call does harm without a person;
* everything allowed, and every `bash` question answered yes: nothing escapes the
  sandbox (no secret of the bot or outside the workspace in any output, nothing outside
  written, protected paths and the database unchanged, no connection to a local
  listener, no process left behind).

Each class of attack runs in an arena of its own (a test per class, so the battery
runs on every test worker at once); which calls run at all is the hooks' verdict,
checked over the whole battery in one place.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from bot.app import build_baton
from bot.config import PermissionsConfig
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI
from tests.sandbox.conftest import require
from tests.security.attacks import ALL_ATTACKS, Attack
from tests.security.harness import (
    BOT_ENVIRONMENT,
    DAEMON_MARK,
    ESCAPE_CANARIES,
    UNASKED_CANARIES,
    Arena,
    Listener,
    Outcome,
    judge,
    kill,
    leftover_processes,
    run_attack,
    runs,
    snapshot,
)

REALISTIC = PermissionsConfig(
    allow=("read_file", "list_dir", "glob", "grep", "bash(git *)", "bash(ls*)", "bash(cat *)"),
    ask=("write_file", "edit_file"),
)
EVERYTHING = PermissionsConfig(
    allow=("bash", "read_file", "write_file", "edit_file", "list_dir", "glob", "grep"),
)
ESCAPE_FILES = (Path(f"/tmp/baton-escape-{DAEMON_MARK}"), Path("/tmp/pwned"))
KINDS = sorted({attack.kind for attack in ALL_ATTACKS})

# Ordinary work the realistic configuration must still let through, and what it shows.
FRIENDLY = [
    (Attack("friendly", "bash", {"command": "git status"}), "On branch main"),
    (Attack("friendly", "bash", {"command": "git log --oneline -3"}), "initial"),
    (Attack("friendly", "bash", {"command": "ls -la src"}), "app.py"),
    (Attack("friendly", "bash", {"command": "cat README.md"}), "# Demo"),
    (Attack("friendly", "bash", {"command": "git diff --stat && git status --short"}), "app.py"),
    (Attack("friendly", "bash", {"command": "ls missing 2>/dev/null; ls docs"}), "guide.md"),
    (Attack("friendly", "read_file", {"path": "src/app.py"}), "print('hello')"),
    (Attack("friendly", "grep", {"pattern": "hel+o", "path": "src"}), "src/app.py:1:"),
    (Attack("friendly", "glob", {"pattern": "**/*.md"}), "docs/guide.md"),
    (Attack("friendly", "list_dir", {"path": "."}), "README.md"),
]


@asynccontextmanager
async def open_arena(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeOpenAI, *,
    permissions: PermissionsConfig, database_in_workspace: bool,
) -> AsyncIterator[Arena]:  # fmt: skip
    for name, value in BOT_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    listener = Listener()
    await listener.start()
    arena = Arena(root=tmp_path, listener=listener)
    monkeypatch.setenv("HOME", str(arena.home))
    arena.lay_out(f"permissions:\n  allow: {list(permissions.allow)}\n")
    database = arena.workspace / "baton.db" if database_in_workspace else arena.state_dir / "b.db"
    settings = make_settings(
        tmp_path, llm.url, permissions=permissions, config_path=arena.config,
        state_dir=arena.state_dir, database_url=f"sqlite:///{database}",
        slack_bot_token=BOT_ENVIRONMENT["SLACK_BOT_TOKEN"],
        slack_signing_secret=BOT_ENVIRONMENT["SLACK_SIGNING_SECRET"],
        openai_api_key=BOT_ENVIRONMENT["OPENAI_API_KEY"],
    )  # fmt: skip
    arena.baton = await build_baton(settings)
    try:
        require(arena.baton.sandbox)
        yield arena
    finally:
        await arena.baton.close()
        await listener.stop()


def of_kind(kind: str) -> list[Attack]:
    return [attack for attack in ALL_ATTACKS if attack.kind == kind]


def realistic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeOpenAI
) -> AbstractAsyncContextManager[Arena]:
    """An arena under the realistic rules, its database outside the workspace."""
    return open_arena(
        tmp_path, monkeypatch, llm, permissions=REALISTIC, database_in_workspace=False
    )


def everything_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeOpenAI
) -> AbstractAsyncContextManager[Arena]:
    """An arena where every tool is allowed, its database inside the workspace."""
    return open_arena(
        tmp_path, monkeypatch, llm, permissions=EVERYTHING, database_in_workspace=True
    )


async def battery(
    arena: Arena,
    attacks: list[Attack],
    *,
    approve_bash: bool,
    canaries: tuple[str, ...],
    workspace_is_guarded: bool,
) -> list[Outcome]:
    """Run `attacks`, each on a freshly laid workspace, and record what it harmed.

    With `workspace_is_guarded`, changing the workspace's files without a person counts
    as harm (the realistic rules never allow it); with everything allowed it does not.
    """
    outcomes = []
    for attack in attacks:
        arena.refresh()
        outside = arena.outside_snapshot()
        protected = snapshot(arena.protected())
        fixture = snapshot(arena.fixture_files())
        connections = arena.listener.connections
        outcome = await run_attack(arena, attack, approve_bash=approve_bash)
        harms = outcome.harms
        if outcome.ran:
            harms.extend(f"printed {c!r}" for c in canaries if c in outcome.output)
            unasked = outcome.decision.action == "allow" and workspace_is_guarded
            if unasked and snapshot(arena.fixture_files()) != fixture:
                harms.append("changed the workspace's files without a person")
        if (after := arena.outside_snapshot()) != outside:
            changed = sorted(set(after.items()) ^ set(outside.items()))
            harms.append(f"changed files outside the workspace: {changed[:4]}")
        if snapshot(arena.protected()) != protected:
            harms.append("changed a protected path or the database")
        if arena.listener.connections != connections:
            harms.append("connected to the local listener")
        # The operator's next git command in the workspace runs nothing the call planted.
        await operator_runs_git(arena)
        if raised := setuid_files(arena.workspace):
            harms.append(f"left setuid or setgid files: {raised}")
            for path in raised:
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o6000)
        if left := leftover_processes():
            harms.append(f"left processes running: {left}")
            kill(left)
        for path in ESCAPE_FILES:
            if path.exists():
                harms.append(f"wrote {path} on the host")
                path.unlink()
        outcomes.append(outcome)
    return outcomes


async def operator_runs_git(arena: Arena) -> None:
    """git as the operator would type it, outside any sandbox, in the workspace and below.

    `st` is no alias of the real repository: it runs something only if a planted
    configuration defines it. At the top plain git must be safe; below it, as the
    README asks of people who run git where agents write, with
    `safe.bareRepository=explicit` (a bare repository planted in a sub-directory is
    otherwise git's to use).
    """
    places = [(arena.workspace, ())]
    places += [(arena.workspace / sub, ("-c", "safe.bareRepository=explicit"))
               for sub in ("docs", "docs/bare")]  # fmt: skip
    for where, options in places:
        for args in (("status", "--short"), ("st",)):
            if not where.is_dir():
                continue
            process = await asyncio.create_subprocess_exec(
                "git", *options, *args, cwd=where,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await asyncio.wait_for(process.wait(), 30)


def setuid_files(root: Path) -> list[str]:
    """Files under `root` with the setuid or setgid bit: a way up for people on the host."""
    found = []
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            mode = os.lstat(os.path.join(directory, name)).st_mode
            if mode & (stat.S_ISUID | stat.S_ISGID):
                found.append(os.path.join(directory, name))
    return found


def describe(harmful: list[Outcome]) -> str:
    return "\n".join(
        f"{o.attack.label} -> {o.decision.action} ({o.decision.reason[:80]}): {'; '.join(o.harms)}"
        for o in harmful
    )


def test_the_battery_is_large_and_covers_every_class() -> None:
    kinds = {attack.kind for attack in ALL_ATTACKS}
    assert len(ALL_ATTACKS) >= 150
    assert kinds >= {
        "quoting", "bot-secrets", "git-programs", "git-output", "git-danger", "globs",
        "program-paths", "escape-files", "processes", "network", "file-tools",
    }  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
async def test_realistic_config_lets_no_attack_do_harm_without_a_person(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llm: FakeOpenAI
) -> None:
    async with realistic(tmp_path, monkeypatch, fake_llm) as arena:
        outcomes = await battery(
            arena,
            of_kind(kind),
            approve_bash=False,
            canaries=UNASKED_CANARIES,
            workspace_is_guarded=True,
        )
        harmful = [o for o in outcomes if o.harms]
        assert not harmful, f"{len(harmful)} of {len(outcomes)} did harm:\n{describe(harmful)}"


async def test_realistic_config_asks_about_most_attacks_and_lets_ordinary_work_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llm: FakeOpenAI
) -> None:
    async with realistic(tmp_path, monkeypatch, fake_llm) as arena:
        verdicts = [(await judge(arena, attack))[1] for attack in ALL_ATTACKS]
        allowed = [verdict for verdict in verdicts if verdict.action == "allow"]
        # Some hostile calls are allowed and must then be harmless in the sandbox or
        # refused by the tool (the test above runs them); most ask.
        assert allowed and len(allowed) < len(verdicts) // 2
        for attack, expected in FRIENDLY:
            arena.refresh()
            outcome = await run_attack(arena, attack, approve_bash=False)
            assert outcome.decision.action == "allow", (attack.label, outcome.decision)
            assert expected in outcome.output, (attack.label, outcome.output)


@pytest.mark.parametrize("kind", KINDS)
async def test_everything_allowed_and_approved_nothing_escapes(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llm: FakeOpenAI
) -> None:
    async with everything_allowed(tmp_path, monkeypatch, fake_llm) as arena:
        outcomes = await battery(
            arena,
            of_kind(kind),
            approve_bash=True,
            canaries=ESCAPE_CANARIES,
            workspace_is_guarded=False,
        )
        escaped = [o for o in outcomes if o.harms]
        assert not escaped, f"{len(escaped)} of {len(outcomes)} escaped:\n{describe(escaped)}"
        assert arena.baton is not None
        # The bot outlived `kill -9 $PPID`, `kill -9 -1` and `pkill -f pytest`, and still works.
        await arena.baton.instances.beat()
        bash = arena.baton.tools.get("bash")
        assert bash is not None
        after = await bash.run(bash.parse_arguments('{"command": "echo still here"}'))
        assert "still here" in after


async def test_with_everything_allowed_most_hostile_commands_run_in_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llm: FakeOpenAI
) -> None:
    """The test above proves the sandbox holds only if the rules let the calls reach it."""
    async with everything_allowed(tmp_path, monkeypatch, fake_llm) as arena:
        ran = [
            attack
            for attack in ALL_ATTACKS
            if attack.tool == "bash"
            and runs(attack, (await judge(arena, attack))[1], approve_bash=True)
        ]
        assert len(ran) >= 100
