"""A run's answer, streamed into its thread as the model writes it.

Slack's chat streaming (`chat.startStream`, `chat.appendStream`, `chat.stopStream`)
shows the answer as it is written and the run's steps as a timeline of tasks. A
stream is not always there: the methods may be refused, the rate budget may have
no room for one, and a stream expires about five minutes after it started
(`message_not_in_streaming_state`). Then the same message carries on as a plain
message updated in place (or one is posted, when there is no message yet).

Either way the thread ends with the whole answer once: the stream keeps what the
Slack message shows (`shown`, the Markdown source of it) apart from what the
answer is (`text`), sends only the difference while they agree, and rewrites the
message when they do not (a retried model call that starts its answer again, an
expired stream, an answer too long for one message).

Slack's own helper (`AsyncWebClient.chat_stream`) buffers by size only and forgets
what it failed to send, so this class drives the three methods itself, with the
SDK's chunk models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import Chunk, MarkdownTextChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.answers import patiently, post_messages
from bot.slack.rate_budget import NoRoom, Priority, RateBudget, priority
from bot.slack.text import MARKDOWN_BLOCKS_LIMIT, AnswerMessage, defuse_pings, plan_answer

logger = logging.getLogger(__name__)

# How often appended text is sent while the model writes (the first words go at once).
STREAM_FLUSH_S = 0.4
# How often a plain message that stands in for a stream is rewritten.
UPDATE_INTERVAL_S = 1.0
# How long a stream's start may wait for the rate budget before a plain message
# (cheaper on Slack's limits: chat.startStream is Tier 2) takes over.
START_PATIENCE_S = 2.0
# What one streamed message holds; a longer answer is split or uploaded at the end.
STREAM_TEXT_LIMIT = MARKDOWN_BLOCKS_LIMIT
# Slack's limit of one task's title and details in a task_update chunk.
TASK_TEXT_LIMIT = 256
# The most tasks one timeline shows: a model calling tools by the thousand gets this
# many, the last one counting the rest, so no call carries an unbounded list of chunks.
MAX_TASKS = 50
OVERFLOW_TASK_ID = "baton-more-steps"
PARAGRAPH = "\n\n"

TaskStatus = Literal["pending", "in_progress", "complete", "error"]
Mode = Literal["idle", "streaming", "updating", "closed"]


class AnswerStream:
    """The answer message of one run, written while the run goes on.

    Feed it with `write` (answer text), `discard` (the model call's text so far is
    void: the call is being retried) and `step` (a tool call or a sub-agent, shown
    as a task of the timeline); end it with `finish` (the final answer) or
    `abandon` (the run ended without one). All Slack calls happen on one writer
    task, one at a time, so the order of what reaches Slack is the order of events.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str,
        recipient_user_id: str,
        recipient_team_id: str | None,
        budget: RateBudget | None = None,
        prefix: str = "",
        flush_s: float = STREAM_FLUSH_S,
        update_s: float = UPDATE_INTERVAL_S,
    ) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.recipient_user_id = recipient_user_id
        self.recipient_team_id = recipient_team_id
        self.budget = budget
        self.prefix = prefix
        self.flush_s = flush_s
        self.update_s = update_s
        self.text = ""  # the answer as it reads now
        self.shown = ""  # the Markdown source of what the Slack message shows
        self.ts: str | None = None
        self.mode: Mode = "idle"
        # Whether a plain message standing in for the stream is updated as the model
        # writes (False when Slack's budget is short: then it is posted when done).
        self.live = True
        self._call_start = 0  # where the text of the current model call begins
        self._gap = False  # a step came since the last text: the next text is a new paragraph
        self._tasks: dict[str, dict[str, str]] = {}  # every task shown, by id
        self._overflow = 0  # steps past MAX_TASKS, shown as one task
        self._overflowed: set[str] = set()  # the ids of the tasks it counts
        self._sent = 0  # characters of Markdown the stream carries (with defused pings)
        self._pending: dict[str, None] = {}  # ids of tasks changed since the last send
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._writer: asyncio.Task[None] | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._in_call = False  # the in-flight send has its budget slot: let it finish
        self._last_send = 0.0

    # ------------------------------------------------------------------ feeding

    def write(self, delta: str) -> None:
        """More of the answer."""
        if not delta:
            return
        if not self.text and self.prefix:
            self.text = self.prefix
        if self._gap and self.text.strip():
            self.text = self.text.rstrip("\n") + PARAGRAPH
        self._gap = False
        self.text += delta
        self._touch()

    def discard(self) -> None:
        """The current model call starts its answer again: forget what it wrote."""
        if len(self.text) > self._call_start:
            self.text = self.text[: self._call_start]
            self._touch()

    def step(
        self,
        task_id: str,
        *,
        title: str | None = None,
        status: TaskStatus,
        details: str | None = None,
        output: str | None = None,
    ) -> None:
        """A task of the timeline begins or changes (a tool call, a sub-agent)."""
        task = self._tasks.get(task_id)
        if task is None and len(self._tasks) >= MAX_TASKS - 1:
            # A flood of steps: the rest are counted by one last task.
            if task_id not in self._overflowed:
                self._overflowed.add(task_id)
                self._overflow += 1
            task_id = OVERFLOW_TASK_ID
            task = self._tasks.setdefault(task_id, {})
            title, details, output = f"… and {self._overflow:,} more steps", None, None
        if task is None:
            task = self._tasks[task_id] = {"title": _task_text(title or task_id)}
        elif title:
            task["title"] = _task_text(title)
        task["status"] = status
        if details is not None:
            task["details"] = _task_text(details)
        if output is not None:
            task["output"] = _task_text(output)
        self._pending[task_id] = None
        # The model's next words come from its next call, after this step.
        self._call_start = len(self.text)
        self._gap = True
        self._touch()

    def _touch(self) -> None:
        if self.mode == "closed":
            return
        self._dirty.set()
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_loop(), name="answer-stream")

    # ------------------------------------------------------------------ ending

    async def finish(self, final_text: str, *, footer: list[dict[str, Any]] | None = None) -> None:
        """End with the whole answer, once: the stream's text, or `final_text` when the
        stream missed it (never both)."""
        await self._stop_writer()
        answer = self.text if self.text.strip() else ""
        if final_text.strip() and final_text.strip() not in answer:
            # What was streamed is not the answer (or nothing was): the answer wins.
            answer = f"{self.prefix}{final_text}"
        async with self._lock:
            self.text = answer
            try:
                await self._finish(answer, footer or [])
            finally:
                self.mode = "closed"

    async def abandon(self) -> None:
        """The run ended without an answer (cancelled, failed): keep what was written."""
        await self._stop_writer()
        async with self._lock:
            try:
                if self.mode == "streaming":
                    await self._stop_stream(self._unsent())
                elif self.mode == "updating" and self.text.strip():
                    await self._update(self.text)
            except SlackApiError as exc:
                logger.warning("could not close the answer message: %s", _error(exc))
            finally:
                self.mode = "closed"

    async def _stop_writer(self) -> None:
        inflight = self._inflight
        if inflight is not None and not inflight.done() and not self._in_call:
            # Still waiting for the rate budget: nothing was sent, and the end of the
            # run says everything anyway. (A call already made is waited for.)
            inflight.cancel()
        if inflight is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([inflight])
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None

    async def _finish(self, answer: str, footer: list[dict[str, Any]]) -> None:
        if not answer.strip():
            if self.mode == "streaming":
                with contextlib.suppress(SlackApiError):
                    await self._stop_stream("")
            return
        plan = plan_answer(answer)
        whole = plan.file is None and len(plan.messages) == 1 and len(answer) <= STREAM_TEXT_LIMIT
        if self.mode == "streaming":
            rest = answer[len(self.shown) :] if answer.startswith(self.shown) else None
            if whole and rest is not None and self._fits(rest):
                try:
                    await self._stop_stream(rest, footer=footer)
                    return
                except SlackApiError as exc:
                    logger.info("stream ended before its answer (%s): updating it", _error(exc))
                except Exception:
                    logger.exception("could not end the stream with its answer: updating it")
            else:
                with contextlib.suppress(Exception):
                    await self._stop_stream("")
            self.mode = "updating"
        messages = list(plan.messages)
        if self.ts is not None:
            first, rest = messages[0], messages[1:]
            last = not rest and plan.file is None
            try:
                await self._replace(first, footer if last else [])
            except Exception as exc:
                # The message cannot be rewritten (deleted, or Slack refuses): say it all anew.
                reason = _error(exc) if isinstance(exc, SlackApiError) else type(exc).__name__
                logger.warning("could not rewrite the answer message: %s", reason)
                with contextlib.suppress(Exception):
                    await self.client.chat_delete(channel=self.channel, ts=self.ts)
                rest = messages
            messages = rest
            if not messages and plan.file is None:
                return
        await post_messages(
            self.client,
            channel=self.channel,
            thread_ts=self.thread_ts,
            messages=messages,
            file=plan.file,
            footer=footer,
        )

    # ------------------------------------------------------------------ writing

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._dirty.wait()
            interval = self.flush_s if self.mode in ("idle", "streaming") else self.update_s
            wait = self._last_send + interval - loop.time()
            if self._last_send and wait > 0:
                await asyncio.sleep(wait)
            self._dirty.clear()
            # Shielded: a send under way when the run ends completes (holding the lock
            # `finish` waits for), so nothing is sent twice or lost in between.
            self._in_call = False
            self._inflight = asyncio.create_task(self._send_once(), name="answer-stream-send")
            await asyncio.shield(self._inflight)
            self._last_send = loop.time()

    async def _send_once(self) -> None:
        try:
            async with self._lock:
                if self.mode != "closed":
                    await self._send()
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                self._dirty.set()  # again later, with everything that came meanwhile
            else:
                logger.warning("streaming the answer failed: %s", _error(exc))
        except Exception:
            logger.exception("streaming the answer failed")

    async def _send(self) -> None:
        if self.mode == "idle":
            await self._start()
        elif self.mode == "streaming":
            await self._append()
        elif self.mode == "updating" and self.live and self.text.strip():
            await self._update(self.text)

    async def _start(self) -> None:
        if not self.text and not self._pending:
            return
        try:
            # The stream's start is the answer's message: it goes first, like final
            # answers (its appends are the ones that yield to them).
            async with self._slot("chat.startStream", Priority.URGENT, START_PATIENCE_S):
                # Built once the slot is there: everything written meanwhile goes too.
                text = self._fitting(self.text)
                chunks = self._take_tasks()
                if text:
                    chunks.insert(0, _markdown(text))
                response = await self.client.chat_startStream(
                    channel=self.channel,
                    thread_ts=self.thread_ts,
                    recipient_user_id=self.recipient_user_id,
                    recipient_team_id=self.recipient_team_id,
                    task_display_mode="timeline",
                    chunks=chunks,
                )
        except NoRoom:
            # Slack's limits are busy: live updates would only add to it. The answer
            # is posted whole when it is done, in as few calls as it takes.
            logger.info("no room for a stream in Slack's budget: the answer comes whole")
            self.mode = "updating"
            self.live = False
            return
        except SlackApiError as exc:
            logger.info("no stream for this answer (%s): a message updated in place", _error(exc))
            self.mode = "updating"
            if self.text.strip():
                await self._update(self.text)
            return
        self.ts = str(response["ts"])
        self.shown = text
        self._sent = len(defuse_pings(text))
        self.mode = "streaming"

    async def _append(self) -> None:
        if not self.text.startswith(self.shown):
            # Words already shown were taken back: only a rewrite can say it right.
            with contextlib.suppress(SlackApiError):
                await self._stop_stream("")
            self.mode = "updating"
            await self._update(self.text)
            return
        if not self._unsent() and not self._pending:
            return
        assert self.ts is not None
        new, chunks = "", []
        try:
            async with self._slot("chat.appendStream", Priority.STREAM, None):
                # Built once the slot is there: all that came while it waited goes in one.
                new = self._unsent()
                chunks = self._take_tasks()
                if new:
                    chunks.insert(0, _markdown(new))
                await self.client.chat_appendStream(channel=self.channel, ts=self.ts, chunks=chunks)
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                self._requeue(chunks)
                raise
            # Expired (or refused): the message stays with what it shows; carry on
            # by rewriting it.
            logger.info("the stream ended early (%s): updating the message", _error(exc))
            self.mode = "updating"
            await self._update(self.text)
            return
        self.shown += new
        self._sent += len(defuse_pings(new))

    def _unsent(self) -> str:
        """The answer's text not yet in the stream (within what one message holds)."""
        if not self.text.startswith(self.shown):
            return ""
        return self._fitting(self.text[len(self.shown) :])

    def _fitting(self, more: str) -> str:
        """The beginning of `more` that the stream's message still has room for, counted
        as sent (pings defused)."""
        room = max(0, STREAM_TEXT_LIMIT - self._sent)
        piece = more[:room]
        while (over := len(defuse_pings(piece)) - room) > 0:
            piece = piece[: len(piece) - over]
        return piece

    def _fits(self, more: str) -> bool:
        return self._sent + len(defuse_pings(more)) <= STREAM_TEXT_LIMIT

    async def _stop_stream(self, text: str, *, footer: list[dict[str, Any]] | None = None) -> None:
        assert self.ts is not None
        chunks: list[Chunk] = self._take_tasks()
        if text:
            chunks.insert(0, _markdown(text))
        await patiently(
            lambda: self.client.chat_stopStream(
                channel=self.channel,
                ts=self.ts or "",
                chunks=chunks or None,
                blocks=footer or None,
            ),
            patience_s=60.0,
        )
        self.shown += text
        self._sent += len(defuse_pings(text))
        self.mode = "closed"

    async def _update(self, text: str) -> None:
        """Show `text` (as much as one message holds) as a plain message."""
        source = text[:STREAM_TEXT_LIMIT]
        if source == self.shown and self.ts is not None:
            return
        message = plan_answer(source).messages[0]
        if self.ts is None:
            async with self._slot("chat.postMessage", Priority.STREAM, None):
                response = await self.client.chat_postMessage(
                    channel=self.channel,
                    thread_ts=self.thread_ts,
                    text=message.text,
                    blocks=message.blocks,
                )
            self.ts = str(response["ts"])
        else:
            async with self._slot("chat.update", Priority.STREAM, None):
                await self.client.chat_update(
                    channel=self.channel, ts=self.ts, text=message.text, blocks=message.blocks
                )
        self.shown = source

    async def _replace(self, message: AnswerMessage, footer: list[dict[str, Any]]) -> None:
        assert self.ts is not None
        await patiently(
            lambda: self.client.chat_update(
                channel=self.channel,
                ts=self.ts or "",
                text=message.text,
                blocks=[*message.blocks, *footer],
            )
        )

    # ------------------------------------------------------------------ helpers

    def _take_tasks(self) -> list[Chunk]:
        chunks: list[Chunk] = [
            TaskUpdateChunk(id=task_id, **self._tasks[task_id])  # type: ignore[arg-type]
            for task_id in self._pending
        ]
        self._pending.clear()
        return chunks

    def _requeue(self, chunks: list[Chunk]) -> None:
        for chunk in chunks:
            if isinstance(chunk, TaskUpdateChunk):
                self._pending[chunk.id] = None

    @contextlib.asynccontextmanager
    async def _slot(
        self, method: str, level: Priority, patience_s: float | None
    ) -> AsyncIterator[None]:
        """The rate budget's turn for one call at `level`, waited for before the call's
        arguments are built; NoRoom (a TimeoutError) when it would not come within
        `patience_s` seconds, with nothing reserved. Until the turn comes the send may
        be dropped (the run ended: the final write says it all); from then on it is
        not, so no call is cut off halfway."""
        with priority(level):
            if self.budget is not None:
                async with self.budget.slot(method, self.channel, level, within=patience_s):
                    self._in_call = True
                    yield
                return
            self._in_call = True
            yield


def _markdown(text: str) -> MarkdownTextChunk:
    """Streamed answer text as a chunk, with nothing in it Slack would read as a ping."""
    return MarkdownTextChunk(text=defuse_pings(text))


def _task_text(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > TASK_TEXT_LIMIT:
        flat = flat[: TASK_TEXT_LIMIT - 1] + "…"
    # Defused after the cut, which may pass the limit by a few invisible characters:
    # cut again, a defused `<` is never left at the end without its space.
    defused = defuse_pings(flat)
    while len(defused) > TASK_TEXT_LIMIT:
        flat = flat[:-2] + "…"
        defused = defuse_pings(flat)
    return defused


def _error(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or exc.response.status_code)
