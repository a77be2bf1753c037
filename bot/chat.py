"""`baton chat`: the main agent in a terminal, on the same engine and sessions as Slack."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TextIO

from bot.app import Baton, build_baton
from bot.config import Settings
from bot.engine import (
    ApprovalDecision,
    ApprovalRequest,
    Compacted,
    Done,
    ErrorEvent,
    ModelWaiting,
    RunEvent,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.sessions import UnknownAgentError
from bot.store import SessionKey
from bot.store.tasks import TaskRecord
from bot.subagents import SubAgentEvent
from bot.subagents.runner import describe_event

logger = logging.getLogger(__name__)

CHAT_STOP_NOTES = {
    "max_turns": " · stopped at the turn limit",
    "budget": " · stopped at the token budget",
    "length": " · answer cut at the model's output limit",
    "content_filter": " · stopped by the provider's content filter",
}

STATE_MARKS = {"running": "●", "completed": "✓", "failed": "✗", "cancelled": "⊘"}

HELP = """\
Type a message and press Enter. Commands:
  @AGENT TEXT   run one sub-agent directly (no main agent), e.g. @explore where is X?
  /agents       list the sub-agents
  /tasks [ID]   list this session's tasks, or show one with its log
  /cancel ID    cancel a running background task
  /help         this help
  /exit         leave (Ctrl-D works too)
Ctrl-C stops the answer in progress. The conversation is kept: run `baton chat` again
to continue it, or `baton chat --session NAME` for a separate one."""


class _LineReader:
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


class TerminalChat:
    """A read-eval-print loop over one session."""

    def __init__(self, baton: Baton, key: SessionKey, *, stdin: TextIO, stdout: TextIO) -> None:
        self.baton = baton
        # The terminal has no channel: it works in the default workspace.
        self.site = baton.default_site
        self.key = key
        # Error texts quote database URLs, SQL parameters and headers: never shown whole.
        self.redact = baton.redact
        self.stdin = stdin
        self.out = stdout
        self._approval_lock = asyncio.Lock()
        self._mid_line = False

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        if text:
            self._mid_line = not text.endswith("\n")

    def line(self, text: str) -> None:
        if self._mid_line:
            self.write("\n")
        self.write(text + "\n")

    async def loop(self) -> None:
        self.reader = _LineReader(self.stdin, asyncio.get_running_loop())
        self.session_id = (await self.site.conversations.store.get_or_create(self.key)).id
        self.baton.tracker.on_finish(self.notify_finished)
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
        while True:
            self.write("> ")
            text = await self.reader.next()
            if text is None or text.strip() in {"/exit", "/quit"}:
                self.line("")
                await self._finish_background()
                return
            text = text.strip()
            if not text:
                continue
            if text == "/help":
                self.line(HELP)
            elif text == "/agents":
                self._show_agents()
            elif text == "/tasks" or text.startswith("/tasks "):
                await self._show_tasks(text.removeprefix("/tasks").strip())
            elif text.startswith("/cancel"):
                await self._cancel(text.removeprefix("/cancel").strip())
            elif text.startswith("@"):
                name, _, rest = text[1:].partition(" ")
                await self._run_turn(self._direct(name, rest.strip()))
            else:
                await self._run_turn(self._consume(text))

    async def _run_turn(self, work: Coroutine[Any, Any, None]) -> None:
        loop = asyncio.get_running_loop()
        turn = asyncio.create_task(work)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, turn.cancel)
        try:
            await turn
        except asyncio.CancelledError:
            if not turn.cancelled():
                raise
            self.line("⊘ stopped")
        except Exception as exc:
            # The traceback holds what redaction removes; --log-level DEBUG shows it.
            logger.debug("turn failed", exc_info=True)
            self.line(self.redact(f"✗ Something went wrong: {type(exc).__name__}: {exc}"))
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)

    async def _consume(self, text: str) -> None:
        async for event in self.site.conversations.run_turn(
            self.key, text, approval=self._approve, progress=self._show_child
        ):
            self._show(event)

    async def _direct(self, name: str, text: str) -> None:
        if not text:
            self.line(f"Write the task after the name: @{name or 'explore'} what to do")
            return
        try:
            outcome = await self.site.conversations.run_agent(
                self.key, name, text, approval=self._approve, progress=self._show_child
            )
        except UnknownAgentError as exc:
            self.line(f"✗ {exc}")
            return
        self.line(f"◆ {outcome.agent} ({outcome.task_id}, {outcome.state}):")
        if outcome.error:
            self.line(f"✗ {self.redact(outcome.error)}")
        self.line(outcome.text or "(no text)")
        self.line(
            f"── {outcome.turns} turns · {outcome.usage.prompt_tokens:,} in / "
            f"{outcome.usage.completion_tokens:,} out tokens"
        )

    async def _finish_background(self) -> None:
        running = self.baton.tracker.running_here
        if not running:
            return
        self.line(f"Waiting for {running} background task(s) to finish (Ctrl-C stops them)…")
        await self._run_turn(self.baton.tracker.wait_for_children())

    def _show_child(self, update: SubAgentEvent) -> None:
        if update.background:
            return  # background work is reported when it finishes
        if line := describe_event(update.event):
            self.line(self.redact(f"  [{update.agent}] {line}"))

    async def notify_finished(self, record: TaskRecord) -> None:
        """Tell the person a background task of this session ended."""
        if record.session_id != self.session_id:
            return
        mark = STATE_MARKS.get(record.state, "?")
        self.line(
            f"{mark} background {record.id} ({record.agent}) {record.state}; its result "
            "goes into your next message. /tasks " + record.id + " shows it."
        )

    def _show_agents(self) -> None:
        for definition in self.site.agents.definitions():
            self.line(f"  {definition.name}: {definition.description}")

    async def _show_tasks(self, task_id: str) -> None:
        if task_id:
            detail = await self.baton.tracker.get(task_id)
            if detail is None or detail.task.session_id != self.session_id:
                self.line(f"✗ no task {task_id!r} in this session")
                return
            task = detail.task
            self.line(f"{STATE_MARKS.get(task.state, '?')} {task.id} · {task.agent} · {task.state}")
            self.line(f"prompt: {task.prompt}")
            for entry in detail.log:
                self.line(f"  {self.redact(entry)}")
            if task.result:
                self.line("— result —")
                self.line(task.result)
            if task.error:
                self.line(f"error: {self.redact(task.error)}")
            return
        tasks = await self.baton.tracker.list(session_id=self.session_id)
        if not tasks:
            self.line("no tasks in this session yet")
            return
        running, done = await self.baton.tracker.counts(session_id=self.session_id)
        self.line(f"⚙ {running} running · {done} done")
        for task in tasks:
            prompt = " ".join(task.prompt.split())[:48]
            self.line(
                f"  {STATE_MARKS.get(task.state, '?')} {task.id}  {task.agent}  "
                f'{task.description}  "{prompt}"'
            )

    async def _cancel(self, task_id: str) -> None:
        detail = await self.baton.tracker.get(task_id) if task_id else None
        if detail is None or detail.task.session_id != self.session_id:
            self.line(f"✗ no task {task_id!r} in this session")
            return
        record = await self.baton.tracker.cancel(task_id, by="the terminal")
        self.line(f"⊘ cancelled {task_id}" if record else f"{task_id} is not running")

    def _show(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            self.write(event.text)
        elif isinstance(event, ToolStart):
            self.line(f"  ▸ {event.name} {_summary(event.arguments)}")
        elif isinstance(event, ToolResult):
            if event.is_error:
                first = event.output.strip().splitlines()[0] if event.output.strip() else ""
                self.line(f"  ✗ {event.name}: {self.redact(first)[:200]}")
            else:
                self.line(f"  ✓ {event.name}")
        elif isinstance(event, ErrorEvent):
            self.line(f"✗ {self.redact(event.message)}")
        elif isinstance(event, ModelWaiting):
            void = "; the answer above starts again" if event.discard_text else ""
            self.line(f"… {event.describe()}{void}")
        elif isinstance(event, Compacted) and event.newsworthy:
            self.line(f"🗜 to fit the model's context window, {event.describe()}")
        elif isinstance(event, Done):
            note = CHAT_STOP_NOTES.get(event.stop_reason, "")
            self.line(
                f"── {event.turns} turn{'s' if event.turns != 1 else ''} · "
                f"{event.usage.prompt_tokens:,} in / {event.usage.completion_tokens:,} out "
                f"tokens{note}"
            )

    async def _approve(self, request: ApprovalRequest) -> ApprovalDecision:
        # Parallel tool calls may ask at once; one question at a time on the terminal.
        async with self._approval_lock:
            self.line(f"⚠ {request.tool_name} needs your approval: {request.reason}")
            self.line(f"  arguments: {_pretty(request.arguments)}")
            self.write("  Approve? [y/N] ")
            answer = await self.reader.next()
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


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False)
    except json.JSONDecodeError:
        return arguments


def _summary(arguments: str, limit: int = 80) -> str:
    try:
        data = json.loads(arguments)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and data:
        first = next(iter(data.values()))
        text = first if isinstance(first, str) else json.dumps(first)
    else:
        text = arguments
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
