"""The bash tool: one shell command in the workspace, bounded in time and output.

Each command runs in the bubblewrap sandbox (`bot.sandbox`) when one is available:
then the call's end (exit, timeout, cancel) kills the sandbox's PID namespace and
everything in it; where Baton is root and the workspace is another user's, the
command runs as that user (`run_as`); the workspace's secret files, found again
before each call, are hidden from it (`bot.sandbox.secret_files`). Without a sandbox
it runs as the bot's user in a process group of its own, killed as a group; the
permission layer makes a person approve every such call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from pydantic import Field

from bot.errors import ToolError
from bot.sandbox import Sandbox, SandboxPolicy, minimal_environment
from bot.sandbox.secret_files import SecretFiles, hidden_note
from bot.tools.base import DEFAULT_OUTPUT_LIMIT, Tool, ToolArguments, cap_output
from bot.tools.workspace import Workspace

DEFAULT_TIMEOUT_S = 120
MAX_TIMEOUT_S = 600
# After killing a process group, how long to wait for its pipe to drain. A process
# that escaped the group with setsid() could hold the pipe open for ever.
DRAIN_AFTER_KILL_S = 2.0
# A kill stops a command's processes before it kills them; a stop lands within a tick
# of the scheduler, so waiting longer means one is stuck (in the kernel), killed anyway.
STOP_WAIT_S = 2.0
STOP_POLL_S = 0.002


class BashArgs(ToolArguments):
    command: str = Field(description="The command line, run with `bash -c` in the workspace.")
    timeout_s: int = Field(
        default=DEFAULT_TIMEOUT_S,
        ge=1,
        le=MAX_TIMEOUT_S,
        description=f"Seconds before the command is killed (default {DEFAULT_TIMEOUT_S}).",
    )


class _BoundedOutput:
    """Collects a stream's bytes keeping only the head and the tail, so memory stays bounded."""

    def __init__(self, limit: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.limit = limit
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.limit)]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.tail:
            return head
        skipped = self.total - len(self.head) - len(self.tail)
        tail = self.tail.decode("utf-8", errors="replace")
        middle = f"\n[… {skipped:,} bytes of output cut …]\n" if skipped else ""
        return head + middle + tail


class Bash(Tool):
    name = "bash"
    description = (
        "Run a shell command with bash in the workspace directory and return its exit code "
        "and combined stdout/stderr. Non-interactive: stdin is empty. Default timeout "
        f"{DEFAULT_TIMEOUT_S} s; on timeout the command and all its child processes are killed."
    )
    arguments = BashArgs
    main_argument = "command"
    argument_kind = "command"

    def __init__(
        self,
        workspace: Workspace,
        *,
        sandbox: Sandbox | None = None,
        policy: SandboxPolicy | None = None,
        environment: Mapping[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        show_secrets: Sequence[str] = (),
        hide: Sequence[str] = (),
    ) -> None:
        """Set up the tool; `sandbox` is used only when its probe found it available.

        Args:
            workspace: Where commands run.
            sandbox: The probed sandbox; None or an unavailable one runs commands
                unsandboxed.
            policy: What sandboxed commands may touch; by default the workspace with
                its protected files read-only and its private files (Baton's
                database) masked, no network.
            environment: The bot's environment; only PATH, HOME, LANG and TERM pass.
            output_limit: Characters of output the model sees at most.
            show_secrets: Secret files commands may see after all
                (`sandbox.show_secrets`: workspace-relative paths and globs); the others
                are masked in the sandbox.
            hide: Globs of files no command may read (the patterns of `read_file` and
                `grep` deny rules), masked like secrets whatever `show_secrets` says.
        """
        self.workspace = workspace
        self.sandbox = sandbox if sandbox is not None and sandbox.available else None
        self.policy = policy or SandboxPolicy.for_workspace(
            workspace.root,
            read_only=workspace.given_protected_files,
            databases=workspace.private_files,
        )
        env = os.environ if environment is None else environment
        self.environment = (
            self.sandbox.environment(env) if self.sandbox else minimal_environment(env)
        )
        self.output_limit = output_limit
        self.secrets = (
            SecretFiles(self.policy, shown=show_secrets, denied=hide)
            if self.sandbox is not None
            else None
        )

    @property
    def sandboxed(self) -> bool:
        """Whether commands run in the sandbox; if not, every call must ask a person."""
        return self.sandbox is not None

    @property
    def run_as(self) -> tuple[int, int] | None:
        """The uid and gid commands run as when not Baton's own (see `bot.sandbox.run_as`).

        Only in the sandbox: unsandboxed commands run as Baton does.
        """
        return self.sandbox.run_as if self.sandbox is not None else None

    @contextlib.contextmanager
    def _command_line(
        self, command: str, hidden: Sequence[Path], notes: list[str]
    ) -> Iterator[list[str]]:
        argv = ["bash", "-c", command]
        if self.sandbox is None:
            yield argv
            return
        policy = self.policy
        if hidden:
            policy = dataclasses.replace(policy, masked=(*policy.masked, *hidden))
        with self.sandbox.command(policy, argv, notes=notes) as wrapped:
            yield wrapped

    async def run(self, args: BashArgs) -> str:
        if not args.command.strip():
            raise ToolError("the command is empty")
        # Found again for every call, off the event loop: a secret made since the last
        # call is hidden too.
        hidden = await asyncio.to_thread(self.secrets.find) if self.secrets is not None else ()
        # What the sandbox undid once the command was over (a planted .git/commondir),
        # so the model learns why its change is gone.
        notes: list[str] = []
        with self._command_line(args.command, hidden, notes) as argv:
            output = await self._run(argv, args.timeout_s)
        if self.secrets is not None and hidden:
            names = [self.secrets.relative(path) + "/" * path.is_dir() for path in hidden]
            if note := hidden_note(names, args.command, output):
                notes.insert(0, note)
        return "\n".join([output, *notes])

    async def _run(self, argv: list[str], timeout_s: int) -> str:
        starting = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *argv,
                cwd=self.workspace.root,
                env=self.environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # Its own process group, so a timeout or cancel can kill every child too.
                # In the sandbox, killing bwrap kills its PID namespace (--die-with-parent).
                start_new_session=True,
                **(self.sandbox.credentials() if self.sandbox is not None else {}),
            )
        )
        try:
            process = await asyncio.shield(starting)
        except OSError as exc:
            raise ToolError(f"could not start {argv[0]}: {exc}") from exc
        except asyncio.CancelledError:
            # Cancelled while it was being started: the command may run already (and
            # start others), so it is killed like any cancelled command.
            with contextlib.suppress(Exception):
                started = await starting
                await self._kill(started, None)
            raise
        output = _BoundedOutput(self.output_limit)
        reader = asyncio.create_task(self._collect(process, output))
        try:
            # One deadline for reading and exiting: a command that closes its output and
            # goes on running is still bound by the timeout.
            code = await asyncio.wait_for(self._finish(process, reader), timeout=timeout_s)
        except TimeoutError:
            await self._kill(process, reader)
            return cap_output(
                f"{output.text()}\n[command timed out after {timeout_s} s; it and its "
                "child processes were killed]",
                self.output_limit,
            )
        except asyncio.CancelledError:
            await self._kill(process, reader)
            raise
        text = output.text()
        body = f"exit code {code}\n{text}" if text else f"exit code {code} (no output)"
        return cap_output(body, self.output_limit)

    @staticmethod
    async def _finish(process: asyncio.subprocess.Process, reader: asyncio.Task[None]) -> int:
        await asyncio.shield(reader)
        return await process.wait()

    @staticmethod
    async def _collect(process: asyncio.subprocess.Process, output: _BoundedOutput) -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            output.add(chunk)

    @staticmethod
    async def _kill(process: asyncio.subprocess.Process, reader: asyncio.Task[None] | None) -> None:
        # Shielded: a second cancel (a shutdown after a cancel) must not stop it halfway.
        await asyncio.shield(kill_tree(process.pid))
        if reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(reader), timeout=DRAIN_AFTER_KILL_S)
            except (TimeoutError, asyncio.CancelledError):
                reader.cancel()
        with contextlib.suppress(ProcessLookupError):
            await process.wait()
        # A pipe nobody read to its end (the reader gave up) keeps the transport open:
        # close it, or it is only closed (with a ResourceWarning) when collected.
        transport = getattr(process, "_transport", None)
        if transport is not None:
            transport.close()


async def kill_tree(root: int) -> None:
    """Kill `root` and every process below it, and none can fork away meanwhile.

    The tree, not only the group: bwrap's inner process starts a session of its own,
    and killed before it armed --die-with-parent it would outlive the group. Every
    process found is stopped first, and the tree is read again until it shows no new
    process and all of it has stopped (a stopped process cannot fork); then all of
    it is killed. A process that will not stop is killed after STOP_WAIT_S anyway.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STOP_WAIT_S
    found: list[int] = []
    while True:
        tree = [root, *descendants(root)]
        new = [pid for pid in tree if pid not in found]
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        found.extend(new)
        if (not new and all(_stopped(pid) for pid in tree)) or loop.time() > deadline:
            break
        await asyncio.sleep(STOP_POLL_S)
    for pid in found:
        _signal(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _stopped(pid: int) -> bool:
    """Whether `pid` is stopped, a zombie or gone: it cannot start anything any more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"T", b"t", b"Z", b"X", b"x")


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children first), read from /proc; empty elsewhere."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    # The parent is the second field after the name, which may hold spaces.
                    parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    queue = list(children.get(pid, ()))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, ()))
    return found
