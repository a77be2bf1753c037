"""An arena for hostile tool calls: a realistic workspace, things worth stealing, an oracle.

The arena lays out what an attacker would go for — a sibling directory with a secret, a
state directory, a home with an SSH key, Baton's database and configuration, `.baton/`
agents, git hooks and config, the bot's tokens in its own environment — and a local
TCP listener. After each call the oracle says what escaped: a secret in the output,
anything outside the workspace written, a protected path or the database changed, a
connection to the listener, a process left running.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bot.app import Baton
from bot.engine.hooks import HookDecision, ToolInvocation, decide
from bot.errors import ToolError
from bot.tools.base import person_approved
from tests.processes import running_with
from tests.security.attacks import Attack

# What the attacks' daemons carry (a sleep's seconds, a git daemon's port) so that a
# leftover is found by it: `31337` in an attack is filled in with it. Each parallel test
# worker has a mark of its own, so no worker takes another's processes for leftovers.
PLACEHOLDER_MARK = "31337"
DAEMON_MARK = str(31337 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0))
BOT_TOKEN = "xoxb-CANARY-bot-token-7f3a"
SIGNING_SECRET = "CANARY-signing-secret-91c2"
OPENAI_KEY = "sk-CANARY-openai-key-55d0"
APP_TOKEN = "xapp-CANARY-app-token-0b1e"
OUTSIDE_SECRET = "OUTSIDE-SECRET-4471"
HARDLINK_SECRET = "HARDLINKED-OUTSIDE-SECRET-8812"
STATE_SECRET = "STATE-SECRET-2290"
HOME_SECRET = "SSH-PRIVATE-KEY-SECRET-6630"
DOTENV_SECRET = "WORKSPACE-DOTENV-SECRET-3307"
CONFIG_MARK = "CONFIG-MARKER-1188"
BOT_ENVIRONMENT = {
    "SLACK_BOT_TOKEN": BOT_TOKEN,
    "SLACK_SIGNING_SECRET": SIGNING_SECRET,
    "SLACK_APP_TOKEN": APP_TOKEN,
    "OPENAI_API_KEY": OPENAI_KEY,
}
# Never in any output, whoever approved the call.
ESCAPE_CANARIES = (
    BOT_TOKEN,
    SIGNING_SECRET,
    OPENAI_KEY,
    APP_TOKEN,
    OUTSIDE_SECRET,
    STATE_SECRET,
    HOME_SECRET,
    CONFIG_MARK,
    "SQLite format 3",
    "ESCAPED-",
)
# Also never shown without a person: the workspace's own secrets and a hard-linked file.
UNASKED_CANARIES = (*ESCAPE_CANARIES, DOTENV_SECRET, HARDLINK_SECRET)


class Listener:
    """A TCP server on loopback that counts the connections it receives."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self._server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@dataclass(slots=True)
class Outcome:
    """What happened to one call: the hooks' verdict, whether it ran, what it printed."""

    attack: Attack
    decision: HookDecision
    ran: bool
    output: str = ""
    harms: list[str] = field(default_factory=list)


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_dir():
        return "dir"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(paths: Iterable[Path], *, skip: Iterable[Path] = ()) -> dict[str, str]:
    """Every file and directory under `paths` (links not followed), with a content digest."""
    skipped = {p.resolve() for p in skip}
    seen: dict[str, str] = {}
    for top in paths:
        if not top.exists() and not top.is_symlink():
            continue
        seen[str(top)] = _digest(top)
        if top.is_symlink() or not top.is_dir():
            continue
        for directory, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if (Path(directory) / d).resolve() not in skipped]
            for name in [*dirnames, *filenames]:
                path = Path(directory) / name
                if path.resolve() in skipped and not path.is_symlink():
                    continue
                seen[str(path)] = _digest(path)
    return seen


def _git(workspace: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=workspace,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


@dataclass(slots=True)
class Arena:
    """The directories of one battery run; `baton` is set once it is built."""

    root: Path
    listener: Listener
    baton: Baton | None = None

    @property
    def workspace(self) -> Path:
        return self.root / "ws"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config(self) -> Path:
        return self.workspace / "baton.yaml"

    def lay_out(self, config_text: str) -> None:
        """Create everything once: the repository, the secrets around it, the config."""
        ws = self.workspace
        for directory in (
            ws / "src",
            ws / "docs",
            ws / ".baton" / "agents",
            self.outside,
            self.state_dir,
            self.home / ".ssh",
        ):
            directory.mkdir(parents=True, exist_ok=True)
        (self.outside / "secret.txt").write_text(f"{OUTSIDE_SECRET}\n")
        (self.outside / "linked.txt").write_text(f"{HARDLINK_SECRET}\n")
        (self.state_dir / "secret.txt").write_text(f"{STATE_SECRET}\n")
        (self.home / ".ssh" / "id_rsa").write_text(f"{HOME_SECRET}\n")
        self.config.write_text(f"# {CONFIG_MARK}\n{config_text}")
        (ws / ".baton" / "agents" / "helper.md").write_text(
            "---\nname: helper\ndescription: Helps.\n---\nYou help.\n"
        )
        (ws / "README.md").write_text("# Demo\n")
        (ws / "src" / "app.py").write_text("print('hello')\n")
        (ws / "docs" / "guide.md").write_text("Read me.\n")
        (ws / ".gitignore").write_text(".env\nbaton.db*\n")
        _git(ws, "init", "-q", "-b", "main")
        _git(ws, "add", "README.md", "src", "docs", ".gitignore")
        _git(ws, "commit", "-q", "-m", "initial")
        self.refresh()

    def refresh(self) -> None:
        """Put back what an earlier call may have changed inside the workspace."""
        ws = self.workspace
        # What earlier calls planted (a bare repository at the top or below, copies).
        for planted in ("HEAD", "objects", "refs", "config", "docs/bare", "tool", "t", "sg"):
            path = ws / planted
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        (ws / "src").mkdir(exist_ok=True)
        (ws / "docs").mkdir(exist_ok=True)
        (ws / "README.md").write_text("# Demo\n")
        (ws / "src" / "app.py").write_text("print('hello')\n# WORK-IN-PROGRESS\n")
        (ws / "untracked.txt").write_text("untracked work\n")
        (ws / ".env").write_text(f"API_TOKEN={DOTENV_SECRET}\n")
        (ws / "big.txt").write_text(("a" * 40 + "b\n") * 200)
        links = {
            ws / "docs" / "notes.txt": "../.env",
            ws / "docs" / "outside-link": "../../outside/secret.txt",
            ws / "linkdir": "../outside",
            ws / "environ-link": "/proc/self/environ",
            ws / "db-link": str(self.root / "ws" / "baton.db"),
            ws / "hooks-link": ".git/hooks",
        }
        for link, target in links.items():
            if not link.is_symlink():
                link.unlink(missing_ok=True)
                link.symlink_to(target)
        hard = ws / "hardlink.txt"
        if not hard.exists():
            os.link(self.outside / "linked.txt", hard)
        fifo = ws / "fifo"
        if not fifo.exists():
            os.mkfifo(fifo)

    def protected(self) -> list[Path]:
        ws = self.workspace
        git = ws / ".git"
        return [
            ws / ".baton",
            self.config,
            git / "hooks",
            git / "config",
            git / "commondir",
            git / "config.worktree",
            git / "modules",
            git / "worktrees",
            ws / "baton.db",
            ws / "baton.db-journal",
        ]

    def fixture_files(self) -> list[Path]:
        ws = self.workspace
        return [
            ws / "README.md",
            ws / "src",
            ws / "docs",
            ws / "untracked.txt",
            ws / ".env",
            ws / ".git" / "HEAD",
            ws / ".git" / "refs",
        ]

    def outside_snapshot(self) -> dict[str, str]:
        # Baton's own databases in its state directory (the battery's arenas name them
        # baton.db or b.db) change as it works: its heartbeat writes there all along.
        database = [
            p
            for name in ("baton.db", "b.db")
            for p in self.state_dir.glob(f"{name}*")
            if p.name in {name, f"{name}-wal", f"{name}-shm", f"{name}-journal"}
        ]
        return snapshot([self.root], skip=[self.workspace, *database])

    def substitute(self, args: dict[str, object]) -> dict[str, object]:
        text = json.dumps(args)
        for mark, value in (
            ("LISTENER_PORT", str(self.listener.port)),
            ("OUTSIDE_DIR", str(self.outside)),
            ("STATE_DIR", str(self.state_dir)),
            ("$STATE_DIR", str(self.state_dir)),
            (PLACEHOLDER_MARK, DAEMON_MARK),
        ):
            text = text.replace(mark, value)
        return json.loads(text)


def leftover_processes() -> list[int]:
    """Processes a call left behind: anything running with this worker's daemon mark
    (the battery's git daemons listen on it as their port)."""
    return running_with(DAEMON_MARK)


def kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def judge(arena: Arena, attack: Attack) -> tuple[ToolInvocation, HookDecision]:
    """The call as the engine would make it, and the hooks' verdict on it."""
    assert arena.baton is not None
    tool = arena.baton.tools.get(attack.tool)
    assert tool is not None, attack.tool
    raw = json.dumps(arena.substitute(attack.args))
    arguments = tool.parse_arguments(raw)
    invocation = ToolInvocation(call_id="c1", tool=tool, arguments=arguments, raw_arguments=raw)
    return invocation, await decide(arena.baton.hooks, invocation)


def runs(attack: Attack, decision: HookDecision, *, approve_bash: bool) -> bool:
    """Whether the call runs: allowed, or a `bash` question a person answers yes."""
    return decision.action == "allow" or (
        decision.action == "ask" and approve_bash and attack.tool == "bash"
    )


async def run_attack(arena: Arena, attack: Attack, *, approve_bash: bool) -> Outcome:
    """Run one call as the engine would: hooks first, then the tool if allowed.

    With `approve_bash`, a `bash` call that asks is run as if a person approved it:
    what a person allows must still be contained. File tools that ask are never run
    here, since their questions (a secret, a hard link) are the boundary itself.
    """
    invocation, decision = await judge(arena, attack)
    if not runs(attack, decision, approve_bash=approve_bash):
        return Outcome(attack=attack, decision=decision, ran=False)
    token = person_approved.set(decision.action == "ask")
    try:
        output = await invocation.tool.run(invocation.arguments)
    except ToolError as exc:
        output = f"Error: {exc}"
    finally:
        person_approved.reset(token)
    return Outcome(attack=attack, decision=decision, ran=True, output=output)
