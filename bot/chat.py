"""`baton chat`: the main agent in a terminal, on the same engine and sessions as Slack."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from typing import TextIO

from bot.app import Baton, build_baton
from bot.config import Settings
from bot.engine import (
    ApprovalDecision,
    ApprovalRequest,
    Done,
    ErrorEvent,
    RunEvent,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.store import SessionKey

HELP = """\
Type a message and press Enter. Commands:
  /help   this help
  /exit   leave (Ctrl-D works too)
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
        self.key = key
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
        history = await self.baton.conversations.history(self.key)
        resumed = f", {len(history)} earlier messages" if history else ""
        self.line(
            f"Baton chat · session {self.key.name!r}{resumed} · model {self.baton.model} · "
            f"workspace {self.baton.workspace.root}\n/help for commands, Ctrl-D to leave."
        )
        while True:
            self.write("> ")
            text = await self.reader.next()
            if text is None:
                self.line("")
                return
            text = text.strip()
            if not text:
                continue
            if text in {"/exit", "/quit"}:
                return
            if text == "/help":
                self.line(HELP)
                continue
            await self._run_turn(text)

    async def _run_turn(self, text: str) -> None:
        loop = asyncio.get_running_loop()
        turn = asyncio.create_task(self._consume(text))
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, turn.cancel)
        try:
            await turn
        except asyncio.CancelledError:
            if not turn.cancelled():
                raise
            self.line("⊘ stopped")
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)

    async def _consume(self, text: str) -> None:
        async for event in self.baton.conversations.run_turn(
            self.key, text, approval=self._approve
        ):
            self._show(event)

    def _show(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            self.write(event.text)
        elif isinstance(event, ToolStart):
            self.line(f"  ▸ {event.name} {_summary(event.arguments)}")
        elif isinstance(event, ToolResult):
            if event.is_error:
                first = event.output.strip().splitlines()[0] if event.output.strip() else ""
                self.line(f"  ✗ {event.name}: {first[:200]}")
            else:
                self.line(f"  ✓ {event.name}")
        elif isinstance(event, ErrorEvent):
            self.line(f"✗ {event.message}")
        elif isinstance(event, Done):
            note = " · stopped at the turn limit" if event.stop_reason == "max_turns" else ""
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
