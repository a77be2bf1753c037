"""The live progress message of a run: one message, updated in place, rate-limited.

Updates are the least urgent Slack calls (`Priority.PROGRESS` in the rate budget):
they take a slot only when `chat.update` has spare capacity, and the update is built
after the slot is granted, so what is sent is the latest state, never a stale one;
states that changed while it waited are coalesced into it. The post that creates
the message and the final write (the outcome, replacing the Cancel button) take
the priority their caller gives: a run whose answer already says how it ended lets
answers and approvals go first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack.answers import patiently, retry_after
from bot.slack.blocks import progress_blocks, progress_text
from bot.slack.rate_budget import NoRoom, Priority, RateBudget, priority

logger = logging.getLogger(__name__)

VISIBLE_LINES = 12
MIN_UPDATE_INTERVAL_S = 1.0
FINAL_PATIENCE_S = 60.0
START_PATIENCE_S = 30.0
# How long a final write that may use spare capacity waits for it before taking its turn.
SPARE_PATIENCE_S = 10.0

# Of every progress message of the process, for benchmarks: "changes" (states shown
# while running), "updates" (chat.update calls made for them), "finals".
totals: Counter[str] = Counter()


class ProgressMessage:
    """Shows the last lines of a run and a Cancel button while it works.

    Updates are coalesced: at most one `chat.update` per `interval` seconds, and
    only when the client's rate budget (if it has one) has room at PROGRESS level;
    the text is built once the slot is granted, so the latest state wins. Under
    HTTP 429 the writer waits for Retry-After. The final state is always written
    (URGENT, retried through rate limits), since it replaces the Cancel button with
    the outcome.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str,
        run_id: str,
        interval: float = MIN_UPDATE_INTERVAL_S,
    ) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.run_id = run_id
        self.interval = interval
        self.lines: deque[str] = deque(maxlen=VISIBLE_LINES)
        self.status = "Working…"
        self.ts: str | None = None
        self.updates = 0
        self.changes = 0
        # Whether the post that makes the message is under way (or done): from then on
        # it is not dropped.
        self.posting = False
        self.budget: RateBudget | None = getattr(client, "budget", None)
        self._dirty = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._last_write = 0.0

    async def start(self, *, level: Priority = Priority.URGENT) -> None:
        """Post the message (at `level` in Slack's budget); if Slack will not take it,
        the run goes on without one."""
        posted: tuple[tuple[str, ...], str] = ((), "")

        async def post() -> AsyncSlackResponse:
            nonlocal posted
            lines = list(self.lines)
            posted = (tuple(lines), self.status)
            return await self.client.chat_postMessage(
                channel=self.channel,
                thread_ts=self.thread_ts,
                text=progress_text(lines, self.status),
                blocks=progress_blocks(lines, run_id=self.run_id, running=True, status=self.status),
            )

        try:
            with priority(level):
                # Its slot first: until it comes the post may be dropped (the run ended
                # meanwhile, and its answer says all); from then on it is not.
                async with self._slot_for("chat.postMessage", level):
                    self.posting = True
                    response = await patiently(post, patience_s=START_PATIENCE_S)
        except SlackApiError as exc:
            logger.warning("no progress message for this run: %s", exc.response.get("error"))
            return
        self.ts = response["ts"]
        self._last_write = time.monotonic()
        self._writer = asyncio.create_task(self._write_loop(), name=f"progress-{self.run_id}")
        if posted != (tuple(self.lines), self.status):
            # The run went on while the post waited for Slack (the run does not wait
            # for it): show where it is now.
            self._changed()

    def add(self, line: str) -> None:
        self.lines.append(line)
        self._changed()

    def set_status(self, status: str) -> None:
        self.status = status
        self._changed()

    def _changed(self) -> None:
        if self.ts is not None:
            self.changes += 1
            totals["changes"] += 1
            self._dirty.set()

    def _slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._slot_for("chat.update", Priority.PROGRESS)

    def _slot_for(
        self, method: str, level: Priority
    ) -> contextlib.AbstractAsyncContextManager[None]:
        if self.budget is None:
            return contextlib.nullcontext()
        return self.budget.slot(method, self.channel, level)

    async def _write_loop(self) -> None:
        while True:
            await self._dirty.wait()
            wait = self._last_write + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                # The slot first, the state after: what waited is shown as it is now.
                async with self._slot():
                    self._dirty.clear()
                    await self._write(running=True)
                    totals["updates"] += 1
            except SlackApiError as exc:
                if exc.response.status_code == 429:
                    self._dirty.set()
                    await asyncio.sleep(retry_after(exc))
                else:
                    logger.warning("progress update failed: %s", exc.response.get("error"))
            except Exception:
                logger.exception("progress update failed")

    async def _write(self, *, running: bool, retry: bool = False) -> None:
        assert self.ts is not None
        lines = list(self.lines)
        await self.client.chat_update(
            channel=self.channel,
            ts=self.ts,
            text=progress_text(lines, self.status),
            blocks=progress_blocks(
                lines, run_id=self.run_id, running=running, status=self.status, retry=retry
            ),
        )
        self.updates += 1
        self._last_write = time.monotonic()

    async def finish(self, status: str, *, retry: bool = False, spare: bool = False) -> None:
        """Write the final state (no Cancel button; a Retry button with `retry`),
        retried through rate limits. With `spare`, it first waits a while for Slack's
        spare capacity (answers and approvals go first), then takes its turn."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        self.status = status
        if self.ts is None:
            return

        async def write() -> None:
            await patiently(
                lambda: self._write(running=False, retry=retry), patience_s=FINAL_PATIENCE_S
            )

        try:
            if spare and self.budget is not None:
                try:
                    async with self.budget.slot(
                        "chat.update", self.channel, Priority.PROGRESS, within=SPARE_PATIENCE_S
                    ):
                        await write()
                    totals["finals"] += 1
                    return
                except NoRoom:
                    pass
            with priority(Priority.URGENT):
                await write()
            totals["finals"] += 1
        except SlackApiError as exc:
            logger.warning("final progress update failed: %s", exc.response.get("error"))
