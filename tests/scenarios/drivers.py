"""One person's conversation with Baton, on Slack or at the terminal, behind one interface.

A `Driver` is one conversation: `ask` starts it (in Slack, a mention that opens a
thread) or continues it (a mention in that thread; at the terminal, another line).
What the person does while a run works (steer, approve, deny, cancel) and what they
see (`transcript`, `steps`, `status`) read the same on both surfaces, so a scenario
is written once and run on both (tests/scenarios/test_conversations.py).

Each operation waits until its surface has taken what the person did (Slack acked the
event and the bot reacted; the terminal read the line), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

from bot.app import build_baton
from bot.chat import TerminalChat
from bot.slack.approval_views import APPROVE, DENY
from bot.slack.blocks import CANCEL_RUN
from bot.store import SessionKey
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest
from tests.slack.harness import ALICE, BOT, MAIN_MARK, SlackHarness, next_ts, start_harness, until

CHANNEL = "C1"
# How long any one wait of a driver may take before the scenario fails.
PATIENCE_S = 10.0

_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&"}
_ENTITY = re.compile("|".join(_ENTITIES))
_CODE_FENCE = re.compile(r"^```\n?|\n?```$")


def unescape(mrkdwn: str) -> str:
    """Slack's escaped text as a person reads it."""
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], mrkdwn).replace("`\u200b``", "```")


def is_main_request(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith(MAIN_MARK)


class Driver(Protocol):
    """One conversation with Baton, as a person has it on one surface."""

    name: str
    llm: FakeOpenAI
    workspace: Path

    async def ask(self, text: str) -> None:
        """Ask Baton something (the first call starts the conversation)."""

    async def say_while_running(self, text: str) -> None:
        """Say something while a run works; returns once Baton acknowledged it."""

    async def approve(self) -> None:
        """Approve the pending approval (waits for one to be asked)."""

    async def deny(self) -> None:
        """Deny the pending approval (waits for one to be asked)."""

    async def cancel(self) -> None:
        """Cancel the run going on (waits for one to be going)."""

    async def wait_idle(self) -> None:
        """Until nothing Baton started for this conversation is still going on."""

    def transcript(self) -> str:
        """Everything the person was shown, as plain text."""

    def steps(self) -> list[str]:
        """The run's event lines ("▸ write_file a.txt, hi", "✓", …), stripped."""

    def status(self) -> str:
        """The final state of the latest run ("✓ Done · 1 turn · …"), or "" if none."""

    def main_requests(self) -> list[RecordedRequest]:
        """The model requests of the main agent (not of sub-agents)."""


# --------------------------------------------------------------------------- Slack


class SlackDriver:
    """Alice, in channel C1: a mention opens the conversation's thread."""

    name = "slack"

    def __init__(self, harness: SlackHarness) -> None:
        self.harness = harness
        self.llm = harness.llm
        self.slack = harness.slack
        self.workspace = harness.baton.workspace.root
        self.thread_ts: str | None = None
        self._clicked: set[str] = set()  # the values of the buttons clicked

    async def ask(self, text: str) -> None:
        ts = await self.harness.mention(text, channel=CHANNEL, user=ALICE, thread_ts=self.thread_ts)
        self.thread_ts = self.thread_ts or ts

    async def say_while_running(self, text: str) -> None:
        """A reply in the thread (no mention), as people talk beside a run."""
        assert self.thread_ts is not None, "ask first"
        ts = next_ts()
        self.slack.add_message(CHANNEL, text, ALICE, ts=ts, thread_ts=self.thread_ts)
        event = {
            "type": "message",
            "channel_type": "channel",
            "channel": CHANNEL,
            "user": ALICE,
            "text": text,
            "ts": ts,
            "thread_ts": self.thread_ts,
            "event_ts": ts,
            "team": "T0001",
        }
        response = await self.harness.send_event(event)
        assert response.status == 200
        await until(lambda: self.slack.reactions.get((CHANNEL, ts)) == ["eyes"], PATIENCE_S)

    async def approve(self) -> None:
        await self._click_pending(APPROVE)

    async def deny(self) -> None:
        await self._click_pending(DENY)

    async def cancel(self) -> None:
        await self._click_pending(CANCEL_RUN)

    async def _click_pending(self, action_id: str) -> None:
        """Click the newest such button not clicked yet (an approval's buttons stay until
        its outcome is shown, so the next request must not be taken for the last one)."""
        assert self.thread_ts is not None, "ask first"
        thread = self.thread_ts

        def fresh() -> dict[str, Any] | None:
            found = self.harness.find_button(CHANNEL, thread, action_id)
            return None if found is None or found["button"]["value"] in self._clicked else found

        await until(lambda: fresh() is not None, PATIENCE_S)
        found = fresh()
        assert found is not None
        self._clicked.add(found["button"]["value"])
        status = await self.harness.click(
            action_id,
            found["button"]["value"],
            user=ALICE,
            channel=CHANNEL,
            message_ts=found["message"]["ts"],
        )
        assert status == 200

    async def wait_idle(self) -> None:
        await self.harness.settle(PATIENCE_S)

    def _bot_messages(self) -> list[dict[str, Any]]:
        if self.thread_ts is None:
            return []
        return [m for m in self.harness.thread(CHANNEL, self.thread_ts) if m.get("user") == BOT]

    def _progress_messages(self) -> list[dict[str, Any]]:
        """The runs' progress messages: a status (context) first, no markdown, no stream.
        (A finished task's post starts with a context too, but carries markdown.)"""
        return [
            m
            for m in self._bot_messages()
            if (blocks := m.get("blocks") or [])
            and blocks[0].get("type") == "context"
            and not any(b.get("type") == "markdown" for b in blocks)
            and self.slack.stream_state(CHANNEL, m["ts"]) is None
        ]

    def transcript(self) -> str:
        """The bot's messages in the thread (their text, the text of their blocks, the
        steps of streamed answers), then what it told Alice alone."""
        parts: list[str] = []
        for message in self._bot_messages():
            parts.append(message.get("text", ""))
            parts.extend(_block_texts(message.get("blocks") or []))
            for task in self.slack.stream_tasks(CHANNEL, message["ts"]):
                parts.extend(
                    str(task.get(k)) for k in ("title", "details", "output") if task.get(k)
                )
        parts.extend(
            e["text"]
            for e in self.slack.ephemerals
            if e["channel"] == CHANNEL and e.get("thread_ts") == self.thread_ts
        )
        return unescape("\n".join(parts))

    def steps(self) -> list[str]:
        """The lines of the progress messages, as their code blocks show them."""
        lines: list[str] = []
        for message in self._progress_messages():
            for block in message["blocks"][1:]:
                if block.get("type") == "section":
                    code = _CODE_FENCE.sub("", block["text"]["text"])
                    lines.extend(unescape(line).strip() for line in code.splitlines())
        return lines

    def status(self) -> str:
        progress = self._progress_messages()
        if not progress:
            return ""
        return unescape(progress[-1]["blocks"][0]["elements"][0]["text"])

    def main_requests(self) -> list[RecordedRequest]:
        return self.harness.main_requests()


def _block_texts(value: Any) -> list[str]:
    """Every text a person can read in blocks (mrkdwn, plain text, markdown)."""
    if isinstance(value, list):
        return [text for item in value for text in _block_texts(item)]
    if isinstance(value, dict):
        own = [value["text"]] if isinstance(value.get("text"), str) else []
        return own + [text for item in value.values() for text in _block_texts(item)]
    return []


@contextlib.asynccontextmanager
async def open_slack(tmp_path: Path, **settings: Any) -> AsyncIterator[SlackDriver]:
    async for harness in start_harness(tmp_path, **settings):
        yield SlackDriver(harness)


# ------------------------------------------------------------------------ terminal


class TerminalDriver:
    """A person at `baton chat` (a terminal: lines typed during a run steer it)."""

    name = "terminal"

    def __init__(self, chat: TerminalChat, llm: FakeOpenAI, typed: io.TextIOBase) -> None:
        self.chat = chat
        self.llm = llm
        self.workspace = chat.site.root
        self.out = chat.terminal.out
        self._typed = typed
        self.sent = 0  # lines typed that are messages or commands (not approval answers)
        self.handled = 0  # of those, how many the chat has acted on

        original = chat._handle

        async def handle(text: str) -> bool:
            try:
                return await original(text)
            finally:
                self.handled += 1

        chat._handle = handle  # type: ignore[method-assign]

    def _type(self, line: str) -> None:
        self._typed.write(line + "\n")
        self._typed.flush()

    async def ask(self, text: str) -> None:
        self.sent += 1
        self._type(text)
        await until(lambda: self.handled >= self.sent, PATIENCE_S)

    async def say_while_running(self, text: str) -> None:
        seen = self.transcript().count("✉")
        await self.ask(text)
        await until(lambda: self.transcript().count("✉") > seen, PATIENCE_S)

    async def approve(self) -> None:
        await self._answer("y")

    async def deny(self) -> None:
        await self._answer("n")

    async def _answer(self, answer: str) -> None:
        await until(lambda: self.chat._approval is not None, PATIENCE_S)
        asked = self.chat._approval
        assert asked is not None
        self._type(answer)
        await until(asked.done, PATIENCE_S)

    async def cancel(self) -> None:
        await until(lambda: bool(self.chat.turns.runs), PATIENCE_S)
        self.chat._interrupt()  # what Ctrl-C does

    async def wait_idle(self) -> None:
        await until(lambda: self.handled >= self.sent, PATIENCE_S)
        async with asyncio.timeout(PATIENCE_S):
            await self.chat.turns.idle()
            await self.chat.baton.tracker.wait_for_children()
            await self.chat.turns.idle()

    def transcript(self) -> str:
        return self.out.getvalue()  # type: ignore[attr-defined,no-any-return]

    def steps(self) -> list[str]:
        """Event lines are printed indented under the answer."""
        return [line.strip() for line in self.transcript().splitlines() if line.startswith("  ")]

    def status(self) -> str:
        ends = [line for line in self.transcript().splitlines() if line.startswith("── ")]
        return ends[-1].removeprefix("── ") if ends else ""

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in self.llm.requests if is_main_request(r)]


@contextlib.asynccontextmanager
async def open_terminal(tmp_path: Path, **settings: Any) -> AsyncIterator[TerminalDriver]:
    async with FakeOpenAI() as llm:
        baton = await build_baton(make_settings(tmp_path, llm.url, **settings))
        read_end, write_end = os.pipe()
        stdin = os.fdopen(read_end, "r")
        typed = os.fdopen(write_end, "w")
        try:
            chat = TerminalChat(
                baton,
                SessionKey.terminal("scenario"),
                stdin=stdin,
                stdout=io.StringIO(),
                steer=True,
            )
            driver = TerminalDriver(chat, llm, typed)
            looping = asyncio.create_task(chat.loop(), name="terminal-chat")
            try:
                await until(lambda: looping.done() or "Baton chat" in driver.transcript())
                yield driver
            finally:
                typed.close()  # end of input: the chat leaves
                try:
                    async with asyncio.timeout(PATIENCE_S):
                        await looping
                finally:
                    if not looping.done():
                        looping.cancel()
                        await asyncio.gather(looping, return_exceptions=True)
        finally:
            if not typed.closed:
                typed.close()
            await baton.close()
            stdin.close()


DRIVERS: dict[str, Callable[..., contextlib.AbstractAsyncContextManager[Driver]]] = {
    "slack": open_slack,
    "terminal": open_terminal,
}
