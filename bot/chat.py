"""`baton chat`: the terminal as a surface of the turn machine, as Slack is.

A line is a message of the session's one thread: it is stored, checked against the
budgets, queued under `limits`, and run as a turn, exactly as a mention in Slack. A
line typed while a run works steers it (at a terminal; piped input is a script, read
one turn at a time), a pending approval takes the next line, Ctrl-C cancels the run,
and a run a restart interrupted is offered again (`/retry`). Events are described as
in Slack's progress message (bot/describe.py), redacted
the same way. Library logs never print between the prompt and the answer: they go
to stderr at WARNING (see bot/cli.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TextIO

from bot.access.admission import QueuePosition
from bot.access.refusal import Refusal
from bot.app import Baton, build_baton
from bot.config import Settings
from bot.describe import (
    describe_end,
    describe_event,
    queued_status,
    redacted_detail,
    redacted_event,
    task_mark,
)
from bot.engine import (
    ApprovalDecision,
    ApprovalFunc,
    ApprovalRequest,
    ApprovalRequired,
    ErrorEvent,
    ModelWaiting,
    RunEvent,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.outcomes import RunEnd
from bot.sessions.surface import Prompt, RunTicket, Where
from bot.sessions.turns import TurnMachine
from bot.sessions.workbench import PullContext, WorkChange
from bot.store import SessionKey, SessionRecord
from bot.store.instances import HEARTBEAT_EVERY_S
from bot.store.runs import RunRecord
from bot.store.tasks import TaskRecord
from bot.store.thread_inbox import Inbound, ThreadMessage
from bot.subagents import SubAgentEvent

logger = logging.getLogger(__name__)

# Who the person at the terminal is, to budgets, limits and run records.
TERMINAL_USER = "terminal"
TERMINAL_CHANNEL = "terminal"
# How long /exit lets background tasks finish before stopping them (Ctrl-C stops sooner).
EXIT_GRACE_S = 3600.0

HELP = """\
Type a message and press Enter. Commands:
  @AGENT TEXT   run one sub-agent directly (no main agent), e.g. @explore where is X?
  /agents       list the sub-agents
  /tasks [ID]   list this session's tasks, or show one with its log
  /cancel ID    cancel a running background task
  /retry [RUN]  run again a run a restart interrupted
  /help         this help
  /exit         leave (Ctrl-D works too)
A line typed while an answer is being written steers it. Ctrl-C stops the answer in
progress. The conversation is kept: run `baton chat` again to continue it, or
`baton chat --session NAME` for a separate one."""


class LineReader:
    """Reads stdin on a daemon thread, so a pending read never keeps the process alive."""

    def __init__(self, stream: TextIO, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._stream = stream
        self._loop = loop
        threading.Thread(target=self._run, name="baton-chat-stdin", daemon=True).start()

    def _run(self) -> None:
        for line in self._stream:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, line.rstrip("\n"))
        self._loop.call_soon_threadsafe(self.queue.put_nowait, None)

    async def next(self) -> str | None:
        line = await self.queue.get()
        if line is None:
            self.queue.put_nowait(None)  # stay at end of input for later reads
        return line


class Terminal:
    """Lines out, with a notion of whether the cursor is mid-line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        if text:
            self.mid_line = not text.endswith("\n")

    def line(self, text: str) -> None:
        if self.mid_line:
            self.write("\n")
        self.write(text + "\n")


def thread_of(name: str) -> str:
    """The thread id of a named chat session (ids are short: names need not be)."""
    return hashlib.sha256(name.encode()).hexdigest()[:24]


class TerminalSurface:
    """The terminal, as the turn machine talks to it: one session's thread."""

    kind = "chat"

    def __init__(self, key: SessionKey, terminal: Terminal, *, redact: Any) -> None:
        self.key = key
        self.where = Where(TERMINAL_CHANNEL, thread_of(key.name or "default"))
        self.terminal = terminal
        self.redact = redact
        self.approver: ApprovalFunc | None = None
        # Called with each run as it starts (a Ctrl-C typed before it did cancels it).
        self.on_run: Callable[[RunTicket], None] | None = None
        # Whether the prompt shows again once a run ends (lines steer while it works).
        self.prompt_after_run = False
        self.retryable: list[str] = []  # runs a restart interrupted, newest last

    def clean(self, text: str) -> str:
        return text.strip()

    async def speaker(self, user_id: str) -> str:
        return ""  # one person talks: the model needs no name

    async def pull_context(self, where: Where, user_id: str) -> PullContext:
        return PullContext(thread_url=None, asked_by="a person at Baton's terminal")

    async def co_author(self, user_id: str) -> tuple[str, str] | None:
        return None  # the terminal's person has no known address

    async def prompt(self, text: str, files: Sequence[dict[str, Any]]) -> Prompt:
        return Prompt(text=text)

    async def thread_context(self, where: Where, before_ts: str) -> str | None:
        return None

    async def acknowledge(self, message: ThreadMessage, *, waits: bool) -> None:
        if waits:
            self.terminal.line("  ✉ taken: it is answered once this agent's run ends")
        else:
            self.terminal.line("  ✉ the agent reads this before its next model call")

    async def refuse(self, where: Where, *, user_id: str, refusal: Refusal, is_dm: bool) -> None:
        self.terminal.line(f"✗ {refusal.text}")

    async def say(self, where: Where, text: str) -> None:
        self.terminal.line(text)

    async def not_handled(self, where: Where, *, authors: Sequence[str], why: str) -> None:
        self.terminal.line(
            f"⊘ Not handled ({why}): what you typed while it worked. Send it again if it "
            "still matters."
        )

    async def report(self, where: Where, text: str) -> None:
        self.terminal.line(f"✗ {self.redact(text)}")

    def describe_failure(self, exc: Exception) -> str | None:
        return None

    async def offer_retry(self, where: Where, run_id: str) -> None:
        self._offer(run_id)

    async def offer_change(self, where: Where, run_id: str, change: WorkChange) -> None:
        note = f"\n  {change.note}" if change.note else ""
        await self.say(where, f"✎ Changes on {change.branch}: {change.summary}{note}")

    async def show_interrupted(self, record: RunRecord, *, retryable: bool) -> None:
        if Where(record.channel_id, record.thread_ts) == self.where and retryable:
            self._offer(record.id)

    def _offer(self, run_id: str) -> None:
        self.retryable.append(run_id)
        self.terminal.line(f"✗ Run {run_id} was interrupted by a restart: /retry runs it again")

    def view(self, run: RunTicket) -> TerminalTurnView:
        if self.on_run is not None:
            self.on_run(run)
        return TerminalTurnView(self.terminal, redact=self.redact, prompt=self.prompt_after_run)

    def approval(self, run: RunTicket) -> ApprovalFunc:
        assert self.approver is not None
        return self.approver

    def serves(self, key: SessionKey) -> bool:
        # Every `baton chat` is of kind "chat": each serves its own session only.
        return key.key == self.key.key

    def where_of(self, session: SessionRecord) -> Where | None:
        return self.where if session.key == self.key.key else None

    def results_window_s(self) -> float:
        return 0.0  # a terminal prints as fast as tasks end

    async def post_results(self, where: Where, waiting: list[TaskRecord]) -> None:
        for record in waiting:
            mark = task_mark(record.state)
            self.terminal.line(
                f"{mark} background {record.id} ({record.agent}) {record.state}; its result "
                f"goes into your next message. /tasks {record.id} shows it."
            )
        waiting.clear()


class TerminalTurnView:
    """One run at the terminal: its answer as it is written, its steps as lines."""

    def __init__(self, terminal: Terminal, *, redact: Any, prompt: bool = False) -> None:
        self.terminal = terminal
        self.redact = redact
        self.prompt = prompt
        # The text of the model's current message as shown so far: the final answer is
        # the last one, after the last tool call.
        self.written = ""
        self.header_shown = False

    async def open(self) -> str | None:
        return None

    def queued(self, place: QueuePosition) -> None:
        self.terminal.line(queued_status(place).replace("Cancel withdraws", "Ctrl-C withdraws"))

    def working(self) -> None:
        return None

    def show(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            self._write(event.text)
        elif isinstance(event, ModelWaiting):
            void = "; the answer above starts again" if event.discard_text else ""
            self.terminal.line(f"… {event.describe()}{void}")
            if event.discard_text:
                self.written = ""
        elif isinstance(event, ToolStart | ToolResult):
            # An ErrorEvent is reported whole (Surface.report), an approval asked as such.
            self.written = ""  # text before a tool call is not the answer
            self._line(event)

    def show_child(self, update: SubAgentEvent) -> None:
        self._line(update.event, agent=update.agent)

    def show_direct(self, update: SubAgentEvent) -> None:
        event = update.event
        if isinstance(event, TextDelta):
            self._header(update.agent, update.task_id)
            self._write(event.text)
        elif isinstance(event, ModelWaiting) and event.discard_text:
            self.written = ""
            self.terminal.line(f"… {event.describe()}; the answer above starts again")
        elif not isinstance(event, ErrorEvent | ApprovalRequired):
            if isinstance(event, ToolStart):
                self.written = ""
            self._line(event, agent=update.agent)

    def _header(self, agent: str, task_id: str) -> None:
        if not self.header_shown:
            self.header_shown = True
            self.terminal.line(f"◆ {agent} · {task_id}")

    def _write(self, text: str) -> None:
        self.written += text
        self.terminal.write(text)

    def _line(self, event: RunEvent, *, agent: str | None = None) -> None:
        if line := describe_event(event, redact=self.redact):
            line = self.redact(f"[{agent}] {line}" if agent else line)
            self.terminal.line(f"  {line}")

    async def answer(
        self,
        text: str,
        *,
        end: RunEnd | None = None,
        agent: str | None = None,
        task_id: str | None = None,
    ) -> None:
        if agent is not None and task_id is not None:
            self._header(agent, task_id)
        if text.strip() != self.written.strip():
            # Not (all) shown as it came: a failure leads it, or it came whole.
            self.terminal.line(text)
        elif self.terminal.mid_line:
            self.terminal.write("\n")

    async def finish(self, end: RunEnd) -> None:
        self.terminal.line(f"── {describe_end(end)}")
        if self.prompt:
            self.terminal.write("> ")


class TerminalChat:
    """A read-eval-print loop over one session, on the turn machine."""

    def __init__(
        self,
        baton: Baton,
        key: SessionKey,
        *,
        stdin: TextIO,
        stdout: TextIO,
        steer: bool | None = None,
    ) -> None:
        self.baton = baton
        # The terminal has no channel: it works in the default workspace.
        self.site = baton.default_site
        self.key = key
        self.redact = baton.redact
        self.stdin = stdin
        self.terminal = Terminal(stdout)
        self.surface = TerminalSurface(key, self.terminal, redact=baton.redact)
        self.surface.approver = self._approve
        self.surface.on_run = self._run_started
        self._cancel_next = False  # Ctrl-C came before the run it meant had started
        self.turns = TurnMachine(self.surface, baton.turn_parts(), access=_Operator())
        # At a terminal a line typed during a run steers it; piped input is a script.
        self.steer = stdin.isatty() if steer is None else steer
        self.surface.prompt_after_run = self.steer
        self._approval: asyncio.Future[str | None] | None = None
        self._approval_lock = asyncio.Lock()
        self._wants_line = asyncio.Event()
        self._maintenance: asyncio.Task[None] | None = None

    def line(self, text: str) -> None:
        self.terminal.line(text)

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        self.reader = LineReader(self.stdin, loop)
        self.session_id = (await self.site.conversations.store.get_or_create(self.key)).id
        self.baton.tracker.on_finish(self.turns.post_task_finished)
        self.baton.instances.on_lost(self.turns.on_lost)
        self.baton.start_heartbeat()
        await self.baton.recover_tasks()
        await self.baton.recover_worktrees()
        history = await self.site.conversations.history(self.key)
        resumed = f", {len(history)} earlier messages" if history else ""
        self.line(
            f"Baton chat · session {self.key.name!r}{resumed} · model {self.baton.model} · "
            f"workspace {self.site.root}\n/help for commands, Ctrl-D to leave."
        )
        if self.site.sandbox_notice:
            self.line(f"⚠ {self.site.sandbox_notice}")
        await self.turns.tidy()
        self._maintenance = asyncio.create_task(self._maintain(), name="chat-maintenance")
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        try:
            async for text in self._lines():
                if not await self._handle(text):
                    break
            await self.turns.idle()
            await self._finish_background()
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
            if self._maintenance is not None:
                self._maintenance.cancel()
                await asyncio.gather(self._maintenance, return_exceptions=True)
            await self.turns.drain(0)
            await self.turns.interrupt()
            await self.turns.stop_watching()

    async def _lines(self) -> AsyncIterator[str]:
        """The person's lines: each one when the chat can take it (an approval's answer
        goes to the approval, not here)."""
        while True:
            await self._ready()
            if not self.turns.busy and self._approval is None:
                self.terminal.write("> ")
            text = await self.reader.next()
            if self._approval is not None:
                self._approval.set_result(text)
                self._approval = None  # the next line is not its answer
                continue
            if text is None or text.strip() in {"/exit", "/quit"}:
                self.line("")
                return
            if text.strip():
                yield text.strip()

    async def _ready(self) -> None:
        """Until a line may be read: at once when steering, or when a run waits for an
        approval; otherwise once the turn machine is idle."""
        if self.steer or self._approval is not None:
            return
        idle = asyncio.create_task(self.turns.idle())
        asking = asyncio.create_task(self._wants_line.wait())
        try:
            await asyncio.wait([idle, asking], return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            asking.cancel()
        self._wants_line.clear()

    async def _handle(self, text: str) -> bool:
        """Act on one line; False to leave."""
        if text == "/help":
            self.line(HELP)
        elif text == "/agents":
            for definition in self.site.agents.definitions():
                self.line(f"  {definition.name}: {definition.description}")
        elif text == "/tasks" or text.startswith("/tasks "):
            await self._show_tasks(text.removeprefix("/tasks").strip())
        elif text.startswith("/cancel"):
            await self._cancel(text.removeprefix("/cancel").strip())
        elif text == "/retry" or text.startswith("/retry "):
            await self._retry(text.removeprefix("/retry").strip())
        else:
            await self._send(text)
        return True

    async def _send(self, text: str) -> None:
        """A message of the session: stored, then dispatched like any surface's."""
        stored = await self.turns.intake(
            Inbound(
                session_key=self.key.key,
                channel_id=self.surface.where.channel_id,
                thread_ts=self.surface.where.thread_ts,
                # Unique, and in the order typed (as Slack's ts are).
                ts=f"{time.time():.6f}-{uuid.uuid4().hex[:8]}",
                user_id=TERMINAL_USER,
                text=text,
            )
        )
        if stored is None:
            self.line("✗ Not taken: Baton is stopping")
            return
        self.turns.spawn(self.turns.dispatch(stored), f"message-{stored.id}", run=True)
        # Let the dispatch start before the next line is awaited.
        await asyncio.sleep(0)

    def _interrupt(self) -> None:
        """Ctrl-C: cancel the runs going on (or the one about to start); at the prompt,
        leave."""
        if self.turns.runs:
            for run_id in list(self.turns.runs):
                self.turns.spawn(self.turns.cancel(run_id, by=""), f"cancel-{run_id}")
        elif self.turns.busy:
            self._cancel_next = True
        else:
            self.reader.queue.put_nowait(None)

    def _run_started(self, run: RunTicket) -> None:
        if self._cancel_next:
            self._cancel_next = False
            self.turns.spawn(self.turns.cancel(run.run_id, by=""), f"cancel-{run.run_id}")

    async def _retry(self, run_id: str) -> None:
        run_id = run_id or (self.surface.retryable[-1] if self.surface.retryable else "")
        if not run_id:
            self.line("✗ no interrupted run to retry")
            return
        why_not = await self.turns.retry(
            run_id, user_id=TERMINAL_USER, team_id=None, enterprise_id=None, user_team=None
        )
        if why_not is not None:
            self.line(f"✗ {why_not}")

    async def _maintain(self) -> None:
        # A previous chat that died mid-run: its run is offered again once it is known
        # dead (its heartbeat expired), even if that is after this chat started.
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            try:
                await self.turns.tidy()
            except Exception:
                logger.exception("chat maintenance failed")

    async def _finish_background(self) -> None:
        running = self.baton.tracker.running_here
        if not running:
            return
        self.line(f"Waiting for {running} background task(s) to finish (Ctrl-C stops them)…")
        waiting = asyncio.create_task(self.baton.tracker.wait_for_children())
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, waiting.cancel)
        try:
            await asyncio.wait_for(waiting, EXIT_GRACE_S)
        except (asyncio.CancelledError, TimeoutError):
            self.line("⊘ stopped")
        await self.turns.idle()  # their results are told before leaving

    async def _show_tasks(self, task_id: str) -> None:
        tracker = self.baton.tracker
        if task_id:
            detail = await tracker.get(task_id)
            if detail is None or detail.task.session_id != self.session_id:
                self.line(f"✗ no task {task_id!r} in this session")
                return
            detail = redacted_detail(detail, self.redact)
            task = detail.task
            self.line(f"{task_mark(task.state)} {task.id} · {task.agent} · {task.state}")
            self.line(f"prompt: {task.prompt}")
            for entry in detail.log:
                self.line(f"  {entry}")
            if task.result:
                self.line("— result —")
                self.line(task.result)
            if task.error:
                self.line(f"error: {task.error}")
            return
        tasks = await tracker.list(session_id=self.session_id)
        if not tasks:
            self.line("no tasks in this session yet")
            return
        running, done = await tracker.counts(session_id=self.session_id)
        self.line(f"⚙ {running} running · {done} done")
        for task in tasks:
            prompt = " ".join(task.prompt.split())[:48]
            self.line(
                f'  {task_mark(task.state)} {task.id}  {task.agent}  {task.description}  "{prompt}"'
            )

    async def _cancel(self, task_id: str) -> None:
        detail = await self.baton.tracker.get(task_id) if task_id else None
        if detail is None or detail.task.session_id != self.session_id:
            self.line(f"✗ no task {task_id!r} in this session")
            return
        record = await self.baton.tracker.cancel(task_id, by="the terminal")
        self.line(f"⊘ cancelled {task_id}" if record else f"{task_id} is not running")

    async def _approve(self, request: ApprovalRequest) -> ApprovalDecision:
        # Parallel tool calls may ask at once; one question at a time on the terminal.
        async with self._approval_lock:
            shown = redacted_event(
                ApprovalRequired(
                    call_id=request.call_id,
                    name=request.tool_name,
                    arguments=request.arguments,
                    reason=request.reason,
                    risk=request.risk,
                ),
                self.redact,
            )
            assert isinstance(shown, ApprovalRequired)
            reason = self.redact(request.reason)
            self.line(f"⚠ {request.tool_name} needs your approval: {reason}")
            self.line(f"  arguments: {shown.arguments}")
            self.terminal.write("  Approve? [y/N] ")
            self._approval = asked = asyncio.get_running_loop().create_future()
            self._wants_line.set()
            try:
                answer = await asked
            finally:
                if self._approval is asked:
                    self._approval = None
            if answer is None:
                self.line("")
                return ApprovalDecision(
                    approved=False, message="denied: nobody answered (input closed)"
                )
            if answer.strip().lower() in {"y", "yes"}:
                return ApprovalDecision(approved=True, message="approved at the terminal")
            return ApprovalDecision(
                approved=False, message="the person at the terminal denied this call"
            )


class _Operator:
    """The terminal's access: its person runs the process, and may do what it does."""

    async def may_start(self, **_: object) -> Refusal | None:
        return None


async def run_chat(
    settings: Settings,
    *,
    session_name: str = "default",
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run the terminal chat until the person leaves."""
    baton = await build_baton(settings)
    try:
        chat = TerminalChat(
            baton,
            SessionKey.terminal(session_name),
            stdin=stdin or sys.stdin,
            stdout=stdout or sys.stdout,
        )
        await chat.loop()
    finally:
        await baton.close()
    return 0
