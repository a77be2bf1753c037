"""Slack as a surface of the turn machine: messages in, threads, progress and answers out.

`SlackThreadSurface` reads message events into the machine's inbound messages and
does in Slack what the machine asks (notes, refusals, reactions, Retry offers,
finished background results). `SlackTurnView` shows one run: its answer streamed
into the thread with its tool steps as a timeline and its final state beneath it
and, for a run that works longer than `REVEAL_AFTER_S`, a progress message updated
in place (with Cancel) and the thread's "is working…" status.

Slack's per-workspace Tier-3 methods (`chat.update`, `assistant.threads.setStatus`:
about 50 a minute for the whole deployment) are what a busy workspace runs out of,
so a run that answers quickly calls none of them: its answer (one message, paced
per channel) carries its final state. Only a run a person waits on shows more, and
what it shows beyond the answer takes Slack's spare capacity, never an answer's or
an approval's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.admission import QueuePosition
from bot.access.refusal import Refusal
from bot.describe import (
    INTERRUPTED,
    WORKING,
    describe_end,
    describe_event,
    queued_status,
    redacted_task,
    waiting_status,
)
from bot.engine import (
    ApprovalFunc,
    ApprovalRequired,
    ErrorEvent,
    ModelWaiting,
    RunEvent,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.forge.webhooks import forge_login
from bot.outcomes import RunEnd, RunOutcome, StopCause
from bot.sessions.surface import Prompt, RunTicket, Where
from bot.sessions.workbench import PullContext, WorkChange
from bot.slack.answers import post_messages, post_text
from bot.slack.approvals import SlackApprovals
from bot.slack.blocks import (
    TaskPostBack,
    context_block,
    ended_message,
    error_message,
    feedback_blocks,
    interrupted_message,
    progress_blocks,
    task_finished_message,
)
from bot.slack.directory import SlackDirectory
from bot.slack.events import parse_message_event, slack_id_or_none
from bot.slack.files import FileReader
from bot.slack.forge_views import change_message
from bot.slack.progress import ProgressMessage
from bot.slack.rate_budget import NoRoom, Priority, RateBudget
from bot.slack.streaming import AnswerStream
from bot.slack.text import (
    MARKDOWN_BLOCKS_LIMIT,
    MESSAGE_BLOCKS_LIMIT,
    AnswerMessage,
    fit_text,
    mention_free,
)
from bot.slack.timeline import show_child_step, show_step
from bot.store import SessionKey, SessionRecord
from bot.store.runs import RunRecord
from bot.store.sessions import DM_THREAD
from bot.store.tasks import TaskRecord
from bot.store.thread_inbox import Inbound, ThreadMessage
from bot.subagents import SubAgentEvent
from bot.triggers.launch import trigger_of

logger = logging.getLogger(__name__)

# Subtypes that are real messages from people; everything else (edits, deletes,
# joins, bot messages) starts nothing.
PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
STATUS_REFRESH_S = 90.0  # assistant thread status expires after two minutes
# A run still working this long after it began shows a progress message (with
# Cancel) and the thread's status; a quicker one shows only its answer.
REVEAL_AFTER_S = 2.0
MAX_CONTEXT_MESSAGES = 50
MAX_CONTEXT_CHARS = 2_000
MAX_REPLY_PAGES = 10
# The reaction that tells someone their message reached the running agent.
SEEN_REACTION = "eyes"
USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")

Redact = Callable[[str], str]


class SlackThreadSurface:
    """Slack threads and DMs, as the turn machine talks to them."""

    kind = "slack"

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        approvals: SlackApprovals,
        directory: SlackDirectory,
        redact: Redact,
    ) -> None:
        self.client = client
        self.approvals = approvals
        self.names = directory
        self.files = FileReader(client)
        self.redact = redact
        # How long a run works before its progress message and status show (tests
        # that click Cancel at once set 0).
        self.reveal_after_s = REVEAL_AFTER_S
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None

    @property
    def budget(self) -> RateBudget | None:
        """The rate budget every call of the client waits for (None: not paced)."""
        return getattr(self.client, "budget", None)

    async def identify(self) -> None:
        """Learn the bot's own user id, so its messages are never taken as input."""
        if self.bot_user_id is None:
            response = await self.client.auth_test()
            self.bot_user_id = response.get("user_id")
            self.bot_id = response.get("bot_id")
            self.team_id = response.get("team_id")

    # ------------------------------------------------------------------ listening

    def is_from_a_person(self, event: dict[str, Any]) -> bool:
        if event.get("bot_id") or event.get("subtype") not in PERSON_SUBTYPES:
            return False
        user = event.get("user")
        return bool(user) and user != self.bot_user_id

    async def inbound(
        self, event: dict[str, Any], *, team_id: str | None, enterprise_id: str | None = None
    ) -> tuple[Inbound, bool] | None:
        """A message event from a person as the turn machine reads it, and whether it
        mentions someone other than Baton; None for what is no person's message."""
        if not self.is_from_a_person(event):
            return None
        parsed = parse_message_event(event)
        if parsed is None:
            return None
        team_id, enterprise_id = slack_id_or_none(team_id), slack_id_or_none(enterprise_id)
        await self.identify()
        thread_ts = parsed.thread_ts or parsed.ts
        is_dm = parsed.channel_type == "im" or parsed.channel.startswith("D")
        mentioned = bool(self.bot_user_id) and f"<@{self.bot_user_id}" in parsed.text
        # A DM is one continuing conversation, whatever message it is in reply to.
        key = SessionKey.slack_thread(
            team_id=team_id or parsed.team or "-",
            channel_id=parsed.channel,
            thread_ts=DM_THREAD if is_dm else thread_ts,
        )
        message = Inbound(
            session_key=key.key,
            channel_id=parsed.channel,
            thread_ts=thread_ts,
            ts=parsed.ts,
            user_id=parsed.user,
            text=parsed.text,
            team_id=key.team_id,
            user_team=parsed.user_team or team_id or parsed.team,
            enterprise_id=enterprise_id,
            files=parsed.files,
            is_dm=is_dm,
            addressed=is_dm or mentioned,
        )
        others = any(user != self.bot_user_id for user in USER_MENTION.findall(parsed.text))
        return message, others

    # ------------------------------------------------------------------ reading

    def clean(self, text: str) -> str:
        return mention_free(text, self.bot_user_id or "")

    async def speaker(self, user_id: str) -> str:
        if (login := forge_login(user_id)) is not None:
            return f"GitHub user {login}"
        if (trigger := trigger_of(user_id)) is not None:
            return trigger
        return f"{await self.names.name_of(user_id)} <@{user_id}>"

    async def pull_context(self, where: Where, user_id: str) -> PullContext:
        link: str | None = None
        try:
            response = await self.client.chat_getPermalink(
                channel=where.channel_id, message_ts=where.thread_ts
            )
            link = response.get("permalink") or None
        except SlackApiError as exc:
            logger.info("no link to the thread: %s", exc.response.get("error"))
        return PullContext(thread_url=link, asked_by=await self.names.name_of(user_id))

    async def co_author(self, user_id: str) -> tuple[str, str] | None:
        if forge_login(user_id) is not None:
            return None  # their commits are credited on the forge, not by Slack's address
        if trigger_of(user_id) is not None:
            return None  # no person wrote it
        email = await self.names.email_of(user_id)
        if email is None:
            return None
        return await self.names.name_of(user_id), email

    async def prompt(self, text: str, files: Sequence[dict[str, Any]]) -> Prompt:
        return await self.files.prompt(text, files)

    async def thread_context(self, where: Where, before_ts: str) -> str | None:
        """What was said in the thread before Baton was asked (people only)."""
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_REPLY_PAGES):
                response = await self.client.conversations_replies(
                    channel=where.channel_id, ts=where.thread_ts, limit=200, cursor=cursor
                )
                messages += response.get("messages", [])
                cursor = (response.get("response_metadata") or {}).get("next_cursor")
                if not cursor or any(m.get("ts") == before_ts for m in messages):
                    break
        except SlackApiError as exc:
            logger.info("conversations.replies failed: %s", exc.response.get("error"))
            if not messages:
                return None
        lines = []
        for message in messages:
            if message.get("ts") == before_ts:
                break
            if message.get("bot_id") or message.get("user") == self.bot_user_id:
                continue
            user = message.get("user")
            if not user:
                continue
            text = self.clean(message.get("text") or "").strip()
            if not text:
                continue
            if len(text) > MAX_CONTEXT_CHARS:
                text = text[:MAX_CONTEXT_CHARS] + "…"
            lines.append(f"[{await self.names.name_of(user)} <@{user}>] {text}")
        if not lines:
            return None
        lines = lines[-MAX_CONTEXT_MESSAGES:]
        return (
            "<thread_context>\nEarlier messages in this Slack thread, oldest first (context "
            "only; you were not asked about them yet):\n" + "\n".join(lines) + "\n</thread_context>"
        )

    # ------------------------------------------------------------------ saying

    async def acknowledge(self, message: ThreadMessage, *, waits: bool) -> None:
        try:
            await self.client.reactions_add(
                channel=message.channel_id, timestamp=message.ts, name=SEEN_REACTION
            )
        except SlackApiError as exc:
            logger.info("could not acknowledge a steering message: %s", exc.response.get("error"))

    async def refuse(self, where: Where, *, user_id: str, refusal: Refusal, is_dm: bool) -> None:
        """Ephemeral in channels, a reply in DMs."""
        try:
            if is_dm:
                await post_text(
                    self.client,
                    channel=where.channel_id,
                    thread_ts=where.thread_ts,
                    text=refusal.text,
                )
            else:
                await self.client.chat_postEphemeral(
                    channel=where.channel_id,
                    user=user_id,
                    thread_ts=where.thread_ts,
                    text=refusal.text,
                )
        except SlackApiError as exc:
            logger.warning("could not deliver a refusal: %s", exc.response.get("error"))

    async def announce(self, channel_id: str, text: str) -> str:
        """Post a new top-level message (a trigger's, naming it): its ts, the thread of
        the run. Slack's refusal (not in the channel) propagates: nothing runs."""
        response = await self.client.chat_postMessage(
            channel=channel_id, text=text, unfurl_links=False, unfurl_media=False
        )
        ts = str(response.get("ts") or "")
        if not ts:
            raise SlackApiError("chat.postMessage gave no ts", response)
        return ts

    async def say(self, where: Where, text: str) -> None:
        try:
            await post_text(
                self.client, channel=where.channel_id, thread_ts=where.thread_ts, text=text
            )
        except SlackApiError as exc:
            logger.warning("could not post in the thread: %s", exc.response.get("error"))

    async def not_handled(self, where: Where, *, authors: Sequence[str], why: str) -> None:
        who = ", ".join(f"<@{author}>" for author in authors)
        await self.say(
            where,
            f"⊘ Not handled ({why}): the messages from {who} that came in while it worked. "
            "Mention me if they still matter.",
        )

    async def report(self, where: Where, text: str) -> None:
        message = error_message(self.redact(text))
        try:
            await post_messages(
                self.client,
                channel=where.channel_id,
                thread_ts=where.thread_ts,
                messages=[message],
            )
        except SlackApiError as exc:
            logger.warning("could not report in the thread: %s", exc.response.get("error"))

    def describe_failure(self, exc: Exception) -> str | None:
        if isinstance(exc, SlackApiError):
            logger.warning("Slack error during a run: %s", exc.response.get("error"))
            return f"Slack refused a message: {exc.response.get('error')}"
        return None

    async def offer_retry(self, where: Where, run_id: str) -> None:
        await self.post_blocks(where, interrupted_message(run_id, retry=True))

    async def offer_change(self, where: Where, run_id: str, change: WorkChange) -> None:
        await self.post_blocks(where, change_message(change))

    async def post_blocks(self, where: Where, post: TaskPostBack) -> None:
        """Post a message of Baton's own (text and blocks) in the thread."""
        try:
            await self.client.chat_postMessage(
                channel=where.channel_id,
                thread_ts=where.thread_ts,
                text=post.text,
                blocks=post.blocks,
            )
        except SlackApiError as exc:
            logger.warning("could not post in the thread: %s", exc.response.get("error"))

    async def show_interrupted(self, record: RunRecord, *, retryable: bool) -> None:
        post = interrupted_message(record.id, retry=retryable)
        try:
            if record.progress_ts:
                await self.client.chat_update(
                    channel=record.channel_id,
                    ts=record.progress_ts,
                    text=INTERRUPTED,
                    blocks=progress_blocks(
                        [], run_id=record.id, running=False, status=INTERRUPTED, retry=retryable
                    ),
                )
            elif retryable:
                await self.client.chat_postMessage(
                    channel=record.channel_id,
                    thread_ts=record.thread_ts,
                    text=post.text,
                    blocks=post.blocks,
                )
        except SlackApiError as exc:
            logger.info(
                "could not report interrupted run %s: %s", record.id, exc.response.get("error")
            )

    # ------------------------------------------------------------------ runs

    def view(self, run: RunTicket) -> SlackTurnView:
        return SlackTurnView(self, run)

    def approval(self, run: RunTicket) -> ApprovalFunc:
        return self.approvals.for_run(
            session_id=run.session_id,
            channel=run.where.channel_id,
            thread_ts=run.where.thread_ts,
            requested_by=run.user_id,
        )

    # ------------------------------------------------------------------ results

    def serves(self, key: SessionKey) -> bool:
        return key.kind == self.kind

    def where_of(self, session: SessionRecord) -> Where | None:
        if session.kind != self.kind or not session.channel_id or not session.thread_ts:
            return None
        return Where(session.channel_id, session.thread_ts)

    def results_window_s(self) -> float:
        budget = self.budget
        return budget.channel_limit.interval if budget is not None else 0.0

    async def post_results(self, where: Where, waiting: list[TaskRecord]) -> None:
        """Its slot first, then what it holds (what ended during the wait included)."""
        budget = self.budget
        slot = (
            budget.slot("chat.postMessage", where.channel_id, Priority.URGENT)
            if budget is not None
            else contextlib.nullcontext()
        )
        async with slot:
            posts = take_finished_posts(
                waiting, render=lambda r: task_finished_message(redacted_task(r, self.redact))
            )
            await post_messages(
                self.client,
                channel=where.channel_id,
                # A DM is one conversation over many Slack threads: its results are a
                # new message of it, not a reply to a thread named "dm".
                thread_ts=None if where.thread_ts == DM_THREAD else where.thread_ts,
                messages=[
                    AnswerMessage(
                        text=fit_text("\n\n".join(post.text for post in posts)),
                        blocks=[block for post in posts for block in post.blocks],
                    )
                ],
                file=posts[0].file,
            )


class SlackTurnView:
    """One run in its thread: the answer (streamed, with its steps as a timeline and
    its final state beneath it); for a run that works long enough for a person to
    wait on it, also a progress message (with Cancel) and the thread's status."""

    def __init__(self, surface: SlackThreadSurface, run: RunTicket) -> None:
        self.surface = surface
        self.client = surface.client
        self.redact = surface.redact
        self.run = run
        where = run.where
        self.progress = ProgressMessage(
            self.client, channel=where.channel_id, thread_ts=where.thread_ts, run_id=run.run_id
        )
        self.stream = AnswerStream(
            self.client,
            channel=where.channel_id,
            thread_ts=where.thread_ts,
            recipient_user_id=run.user_id,
            recipient_team_id=run.team_id,
            budget=surface.budget,
        )
        self._status: asyncio.Task[None] | None = None
        # Set once the work is over (answered or ended): nothing more needs showing.
        self._over = asyncio.Event()
        self._opening: asyncio.Task[Any] | None = None
        self._working = False
        self._answered = False
        # Whether the thread's status was set (a message Baton posts afterwards clears it).
        self._status_shown = False

    async def open(self) -> str | None:
        """The progress message, once the run has worked `reveal_after_s` without
        being over; None (nothing posted) for a run that was quicker."""
        self._opening = asyncio.current_task()
        delay = self.surface.reveal_after_s
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._over.wait()
        if self._over.is_set():
            return None
        # Answers and approvals take the channel's slots first.
        await self.progress.start(level=Priority.STREAM)
        if self.progress.ts is not None and self._working and not self._over.is_set():
            self._start_status()
        return self.progress.ts

    def queued(self, place: QueuePosition) -> None:
        self.progress.set_status(queued_status(place))

    def working(self) -> None:
        self.progress.set_status(WORKING)
        self._working = True
        if self.progress.ts is not None:
            self._start_status()  # shown while it was queued

    def show(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            self.stream.write(event.text)
        elif isinstance(event, ModelWaiting):
            self.progress.set_status(waiting_status(event))
            if event.discard_text:
                self.stream.discard()  # the retried call writes its answer again
            return
        if self.progress.status != WORKING:
            self.progress.set_status(WORKING)  # the model answers again
        self._line(event)
        show_step(self.stream, event, redact=self.redact)

    def show_child(self, update: SubAgentEvent) -> None:
        self._line(update.event, agent=update.agent)
        show_child_step(self.stream, update, redact=self.redact)

    def show_direct(self, update: SubAgentEvent) -> None:
        """An `@agent` run: its own words are the answer; its steps, the timeline."""
        event = update.event
        if isinstance(event, TextDelta):
            self.stream.prefix = direct_header(update.agent, update.task_id)
            self.stream.write(event.text)
            return
        if isinstance(event, ModelWaiting) and event.discard_text:
            self.stream.discard()
        self._line(event, agent=update.agent)
        show_step(self.stream, event, redact=self.redact)

    def _line(self, event: RunEvent, *, agent: str | None = None) -> None:
        if agent is None and not isinstance(
            event, ToolStart | ToolResult | ErrorEvent | ApprovalRequired
        ):
            return
        if line := describe_event(event, redact=self.redact):
            self.progress.add(self.redact(f"[{agent}] {line}" if agent else line))

    async def answer(
        self,
        text: str,
        *,
        end: RunEnd | None = None,
        agent: str | None = None,
        task_id: str | None = None,
    ) -> None:
        # The work is done: a run that has not shown its progress yet never will.
        self._over.set()
        self._answered = True
        if agent is not None and task_id is not None:
            self.stream.prefix = direct_header(agent, task_id)
        footer = feedback_blocks(self.run.run_id)
        if end is not None:
            footer = [context_block(describe_end(end)), *footer]
        await self.stream.finish(text, footer=footer)

    async def finish(self, end: RunEnd) -> None:
        self._over.set()
        opening = self._opening
        if opening is not None and opening is not asyncio.current_task():
            if not self.progress.posting:
                # Still waiting for its turn in Slack's budget: never posted, now not
                # needed (the answer, or the end below, says it all).
                opening.cancel()
            # A progress message being posted is waited for: its end is written below.
            await asyncio.wait([opening])
        if self._status is not None:
            self._status.cancel()
            await asyncio.gather(self._status, return_exceptions=True)
        if self.stream.mode != "closed":
            # Ended without its answer (cancelled, failed): keep what was written.
            await self.stream.abandon()
        if self.progress.ts is not None:
            # With an answer, its last lines already say how it ended: the progress
            # message's last write (the outcome in place of Cancel) takes Slack's
            # spare capacity first. Without one, it is how the thread learns the end.
            await self.progress.finish(describe_end(end), retry=end.retryable, spare=self._answered)
        elif not self._answered and self._says_its_end(end):
            await self.surface.post_blocks(self.run.where, ended_message(self.run.run_id, end))
        if self._status_shown and not self._cleared_by_a_message():
            with contextlib.suppress(SlackApiError):
                await self._set_status("", level=Priority.URGENT)

    @staticmethod
    def _says_its_end(end: RunEnd) -> bool:
        """Whether a run that showed nothing tells the thread how it ended: a hand-over
        is silent (the thread's next run answers), and a refusal or an error was said
        already."""
        if end.outcome in (RunOutcome.HANDED_OVER, RunOutcome.REFUSED):
            return False
        return end.cause not in (StopCause.ERROR, StopCause.NO_TASK, StopCause.UNKNOWN_AGENT)

    def _cleared_by_a_message(self) -> bool:
        """Slack clears a thread's status when the app posts in the thread; the status
        is set only while the answer has no message yet, so the answer's clears it."""
        return self._answered or self.stream.ts is not None

    def _start_status(self) -> None:
        if self._status is None and not self._over.is_set():
            self._status = asyncio.create_task(
                self._keep_status(), name=f"status-{self.run.run_id}"
            )

    async def _keep_status(self) -> None:
        """Show "is working…" under the thread (DMs and channel threads alike), refreshed
        before it expires; where Slack refuses it, the progress message suffices."""
        try:
            while not self._over.is_set():
                # Not once the answer shows: its message is the sign of work then.
                if self.stream.ts is None and await self._set_status(
                    "is working…", level=Priority.PROGRESS
                ):
                    self._status_shown = True
                await asyncio.sleep(STATUS_REFRESH_S)
        except SlackApiError:
            return  # not an assistant thread, or the feature is off: the message path suffices

    async def _set_status(self, status: str, *, level: Priority) -> bool:
        """Set the thread's status; a nicety that takes Slack's budget only when it has
        room now (False, nothing sent, when it has none)."""
        budget = self.surface.budget
        call = functools.partial(
            self.client.assistant_threads_setStatus,
            channel_id=self.run.where.channel_id,
            thread_ts=self.run.where.thread_ts,
            status=status,
        )
        if budget is None:
            await call()
            return True
        try:
            async with budget.slot("assistant.threads.setStatus", None, level, within=0.0):
                await call()
        except NoRoom:
            logger.debug("no room in Slack's budget for the thread status; skipped")
            return False
        return True


def direct_header(agent: str, task_id: str) -> str:
    """The first line of an `@agent` run's answer: whose it is, and its task."""
    return f"*{agent}* · `{task_id}`\n\n"


def take_finished_posts(
    waiting: list[TaskRecord], *, render: Callable[[TaskRecord], TaskPostBack]
) -> list[TaskPostBack]:
    """Take from the front of `waiting` the task results one Slack message holds (at
    least one): within its block and markdown limits, and a result with a file alone."""
    posts: list[TaskPostBack] = []
    blocks = markdown = 0
    while waiting:
        post = render(waiting[0])
        size = sum(len(b.get("text", "")) for b in post.blocks if b.get("type") == "markdown")
        if posts and (
            post.file is not None
            or posts[0].file is not None
            or blocks + len(post.blocks) > MESSAGE_BLOCKS_LIMIT
            or markdown + size > MARKDOWN_BLOCKS_LIMIT
        ):
            break
        posts.append(post)
        blocks += len(post.blocks)
        markdown += size
        waiting.pop(0)
    return posts
