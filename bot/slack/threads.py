"""Runs in Slack threads: one session per thread, live progress, steering, answers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.access.admission import Admission, QueuePosition, RunNotQueued
from bot.access.budgets import RunBudget
from bot.access.policy import AccessPolicy
from bot.access.refusal import Refusal
from bot.app import Baton
from bot.engine import (
    ApprovalFunc,
    ApprovalRequired,
    ChatMessage,
    Compacted,
    Done,
    ErrorEvent,
    ModelWaiting,
    RunEvent,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.engine.messages import ImagePart
from bot.sessions import UnknownAgentError
from bot.slack.answers import post_messages, post_text
from bot.slack.approvals import SlackApprovals
from bot.slack.blocks import (
    TaskPostBack,
    error_message,
    feedback_blocks,
    interrupted_message,
    progress_blocks,
    task_finished_message,
)
from bot.slack.directory import SlackDirectory
from bot.slack.events import parse_message_event, slack_id_or_none
from bot.slack.files import FileReader
from bot.slack.progress import ProgressMessage
from bot.slack.rate_budget import NoRoom, Priority, RateBudget
from bot.slack.streaming import AnswerStream
from bot.slack.text import (
    MARKDOWN_BLOCKS_LIMIT,
    MESSAGE_BLOCKS_LIMIT,
    AnswerMessage,
    fit_text,
    format_duration,
    format_tokens,
    mention_free,
    parse_direct_agent,
)
from bot.slack.timeline import redacted_event, show_child_step, show_step
from bot.store import SessionKey
from bot.store.runs import FINISHED, RunStore
from bot.store.tasks import TaskDetail, TaskRecord
from bot.store.thread_inbox import (
    DONE,
    DROPPED,
    NEW,
    OFFERED,
    PENDING,
    REFUSED,
    RETRIED,
    RETRYABLE,
    TAKEN,
    Lease,
    ThreadInbox,
    ThreadMessage,
)
from bot.store.thread_inbox import INTERRUPTED as INTERRUPTED_STATE
from bot.subagents import SubAgentEvent
from bot.subagents.runner import describe_event

logger = logging.getLogger(__name__)

# Subtypes that are real messages from people; everything else (edits, deletes,
# joins, bot messages) starts nothing.
PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
STATUS_REFRESH_S = 90.0  # assistant thread status expires after two minutes
# How long a thread status may wait for Slack's budget before it is skipped.
STATUS_PATIENCE_S = 1.0
MAX_CONTEXT_MESSAGES = 50
MAX_CONTEXT_CHARS = 2_000
MAX_REPLY_PAGES = 10
CANCEL_WATCH_S = 1.0
# How often runs look for messages other replicas stored for their threads, when no
# signal woke them (SQLite; a lost notification).
STEER_WATCH_S = 1.0
# A run that shutdown stopped, here or in a process that is gone.
INTERRUPTED = "✗ Interrupted by a restart: Retry runs it again"
# A run still queued for a slot when shutdown began: its question waits again.
HANDED_OVER = "↪ Not started here: Baton is restarting; it starts on the next free replica"
# After the grace period, how long stopped runs may take for their last Slack calls.
INTERRUPT_WAIT_S = 5.0
STOP_MARKS = {
    "completed": "✓ Done",
    "max_turns": "✗ Stopped at the turn limit",
    "budget": "✗ Stopped at the run's token budget",
    "length": "✗ Answer cut at the model's output limit",
    "content_filter": "✗ Stopped by the provider's content filter",
}
WORKING = "Working…"
RUN_OUTCOMES = {"completed": "done", "length": "cut", "content_filter": "filtered"}
# The session of a DM: one continuing conversation per DM channel.
DM_CONVERSATION = "dm"
# What, alone in a DM, puts the conversation aside and starts a new one.
FRESH_START = frozenset({"new", "reset", "start over", "new conversation"})
# The reaction that tells someone their message reached the running agent.
SEEN_REACTION = "eyes"
USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


# Event-loop turns a results poster yields, once no sibling runs, to results already on
# their way (an ending's callback is a task of its own; two turns see it started).
_ARRIVAL_TURNS = 3


@dataclass(slots=True)
class _FinishedTasks:
    """Background tasks whose results wait for their thread's next result message."""

    records: list[TaskRecord]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def join(self, record: TaskRecord) -> None:
        self.records.append(record)
        self.arrived.set()


@dataclass(slots=True)
class ActiveRun:
    """A run going on in a thread; messages for it wait in `inbox`."""

    run_id: str
    key: SessionKey
    user_id: str
    channel: str
    thread_ts: str
    inbox: list[ChatMessage] = field(default_factory=list)
    # (stored message id, author, text, whether it asked Baton) of each inbox message:
    # those the run never read are the thread's next turn, or dropped, once it is over.
    authors: list[tuple[int, str, str, bool]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    cancelled_by: str | None = None
    direct: bool = False  # an `@agent` run: it reads no steering; messages wait for its end
    session_id: int | None = None  # set once the session is found, before the run starts
    team_id: str | None = None  # the team of the person who asked (their streams go to them)
    lost: bool = False  # another replica took this process for dead and closed the run
    author_id: str | None = None  # who wrote the question, when not `user_id` (a Retry)
    admitted: bool = False  # past the queue of `limits`: it has started its work
    handed_over: bool = False  # stopped before it started, for another process to run

    def take_inbox(self) -> list[ChatMessage]:
        taken = list(self.inbox)
        self.inbox.clear()
        self.authors.clear()
        return taken


class SlackThreads:
    """Turns Slack messages into runs, and runs into thread messages."""

    def __init__(
        self,
        baton: Baton,
        client: AsyncWebClient,
        approvals: SlackApprovals,
        *,
        access: AccessPolicy,
        directory: SlackDirectory,
        admission_poll_s: float = 1.0,
    ) -> None:
        self.baton = baton
        self.client = client
        self.approvals = approvals
        self.access = access
        limits = baton.settings.limits
        self.budgets = baton.budgets
        # Every error text bound for the thread passes through it: exceptions quote
        # database URLs, SQL parameters and headers.
        self.redact = baton.redact
        self.run_store = RunStore(baton.database)
        self.admission = Admission(
            self.run_store, baton.instances, limits, poll_s=admission_poll_s, signals=baton.signals
        )
        self._cancel_watch: asyncio.Task[None] | None = None
        self.names = directory
        self.files = FileReader(client)
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.inbox = ThreadInbox(baton.database)
        self.runs: dict[str, ActiveRun] = {}
        self.threads: dict[str, ActiveRun] = {}
        self._starting: set[str] = set()  # threads whose waiting turn pick_up is starting
        self._steer_watch: asyncio.Task[None] | None = None
        self.accepting = True
        self._tasks: set[asyncio.Task[Any]] = set()
        # Finished background tasks whose result waits for its thread's next message,
        # by thread and by session (a session's later results join without a lookup).
        self._finished: dict[tuple[str, str], _FinishedTasks] = {}
        self._finished_in: dict[int, _FinishedTasks] = {}

    # ----------------------------------------------------------------- lifecycle

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `work` outside the listener; owned, its failure logged."""
        task = asyncio.create_task(self._guard(work, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def _guard(work: Coroutine[Any, Any, Any], name: str) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s failed", name)

    async def identify(self) -> None:
        """Learn the bot's own user id, so its messages are never taken as input."""
        if self.bot_user_id is None:
            response = await self.client.auth_test()
            self.bot_user_id = response.get("user_id")
            self.bot_id = response.get("bot_id")

    async def drain(self, grace_s: float) -> None:
        """Stop taking work and let what is going on (and what it starts, such as the
        notes a finished run posts) finish, for up to `grace_s` seconds."""
        self.accepting = False
        # Runs still queued for a slot have done nothing yet: rather than wait here, they
        # go back to the thread's waiting questions, for another replica (or this
        # service's next process) to run.
        for run in list(self.runs.values()):
            if not run.admitted and run.task is not None:
                run.handed_over = True
                run.task.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while (pending := [t for t in self._tasks if not t.done()]) and (
            remaining := deadline - loop.time()
        ) > 0:
            await asyncio.wait(pending, timeout=remaining)

    async def interrupt(self) -> None:
        """Stop what still goes on after the grace period. Runs end as "Interrupted by a
        restart" (never "Cancelled": nobody cancelled them), their progress and metric
        say so; the wait for their last Slack calls is bounded."""
        self.accepting = False
        still = [t for t in self._tasks if not t.done()]
        if not still:
            return
        if self.runs:
            logger.warning("interrupting %d run(s) still going after the grace", len(self.runs))
        for task in still:
            task.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INTERRUPT_WAIT_S
        while (pending := [t for t in self._tasks if not t.done()]) and (
            remaining := deadline - loop.time()
        ) > 0:
            await asyncio.wait(pending, timeout=remaining)
        if pending:
            logger.warning("%d task(s) did not end within %.0f s", len(pending), INTERRUPT_WAIT_S)

    # ------------------------------------------------------------------ messages

    def is_from_a_person(self, event: dict[str, Any]) -> bool:
        if event.get("bot_id") or event.get("subtype") not in PERSON_SUBTYPES:
            return False
        user = event.get("user")
        return bool(user) and user != self.bot_user_id

    async def intake(
        self, event: dict[str, Any], *, team_id: str | None, enterprise_id: str | None = None
    ) -> ThreadMessage | None:
        """Before Slack is answered: whether a message is for Baton (a mention, a DM, or
        talk in a thread whose turn runs now), and if so, store it.

        Storing it is the claim: a retry, or the same message arriving as both
        app_mention and message.channels, finds it stored and starts nothing (a
        redelivered message whose run a restart interrupted gets a Retry offer). A
        database error propagates, so Slack is not told the message was taken and
        sends it again.
        """
        if not self.accepting or not self.is_from_a_person(event):
            return None
        parsed = parse_message_event(event)
        if parsed is None:
            return None
        team_id, enterprise_id = slack_id_or_none(team_id), slack_id_or_none(enterprise_id)
        await self.identify()
        channel = parsed.channel
        ts = parsed.ts
        thread_ts = parsed.thread_ts or ts
        text = parsed.text
        is_dm = parsed.channel_type == "im" or channel.startswith("D")
        mentioned = bool(self.bot_user_id) and f"<@{self.bot_user_id}" in text
        # A DM is one continuing conversation, whatever message it is in reply to.
        key = SessionKey.slack_thread(
            team_id=team_id or parsed.team or "-",
            channel_id=channel,
            thread_ts=DM_CONVERSATION if is_dm else thread_ts,
        )
        addressed = is_dm or mentioned
        if not addressed:
            if thread_ts == ts:
                return None  # talk outside any thread steers nothing
            # People talking to each other, or beside an `@agent` run (which reads no
            # steering): not for Baton.
            lease = await self._lease_of(key.key)
            if lease is None or lease.direct or self._mentions_someone_else(text):
                return None
        stored = await self.inbox.receive(
            session_key=key.key,
            channel_id=channel,
            thread_ts=thread_ts,
            ts=ts,
            user_id=parsed.user,
            text=text,
            holder=self.baton.instances.id,
            team_id=key.team_id,
            user_team=parsed.user_team or team_id or parsed.team,
            enterprise_id=enterprise_id,
            files=parsed.files,
            is_dm=is_dm,
            addressed=addressed,
        )
        if stored is None:
            await self._redelivered(channel, ts)
        return stored

    async def _lease_of(self, session_key: str) -> Lease | None:
        local = self.threads.get(session_key)
        if local is not None:
            return Lease(session_key, self.baton.instances.id, local.run_id, local.direct)
        return await self.inbox.holder(session_key, alive=await self.baton.instances.alive())

    async def dispatch(self, message: ThreadMessage) -> None:
        """After Slack is answered: who may start runs (and steer them) is checked before
        anything else happens, a refusal going to that person alone. Then the message
        joins the thread's running turn (here or on another replica), or starts the
        thread's turn, or waits for it. A run over the concurrency caps waits in a
        visible queue."""
        key = session_key_of(message)
        local = self.threads.get(key.key)
        lease = await self._lease_of(key.key)
        try:
            refusal = await self.access.may_start(
                user_id=message.user_id,
                channel_id=message.channel_id,
                is_dm=message.is_dm,
                team_id=message.team_id if message.team_id != "-" else None,
                user_team=message.user_team,
                enterprise_id=message.enterprise_id,
            )
            if refusal is None and lease is None and message.addressed:
                refusal = await self.budgets.refusal(
                    user_id=message.user_id, channel_id=message.channel_id
                )
        except Exception as exc:
            # Who sent it could not be checked (Slack or the database failing): nothing
            # runs on it, and its sender is told to ask again.
            logger.exception("could not check who may act on message %s", message.id)
            refusal = Refusal(
                reason="check_failed",
                text=self.redact(
                    f"I could not check who may ask me ({type(exc).__name__}); "
                    "please ask again in a moment."
                ),
            )
        if refusal is not None:
            await self.inbox.move([message.id], REFUSED, only_from=[NEW])
            await self._wake(key)  # what came after it in the thread waited for this check
            if message.addressed:
                await self._refuse(
                    refusal, user=message.user_id, channel=message.channel_id,
                    thread_ts=message.thread_ts, dm=message.is_dm,
                )  # fmt: skip
            else:
                # Talk from someone who may not start runs does not steer one either.
                logger.info(
                    "not steering with a message from %s: %s", message.user_id, refusal.reason
                )
            return
        fresh = mention_free(message.text, self.bot_user_id or "").strip().lower() in FRESH_START
        if message.is_dm and lease is None and fresh:
            await self.inbox.move([message.id], DONE, only_from=[NEW])
            await self._start_fresh(key, channel=message.channel_id, thread_ts=message.thread_ts)
            return
        if not await self.inbox.move([message.id], PENDING, only_from=[NEW]):
            return  # another replica took it over meanwhile (it took this one for dead)
        if local is not None or (lease is not None and lease.owner != self.baton.instances.id):
            await self._wake(key)
        else:
            await self.take_turns(key)

    async def _wake(self, key: SessionKey) -> None:
        """Have the thread's running turn read what waits for it: here at once, on
        another replica through a signal."""
        local = self.threads.get(key.key)
        if local is not None:
            await self._deliver(local)
        else:
            await self.baton.signals.notify("steer", key.key)

    async def take_turns(self, key: SessionKey) -> None:
        """Run the thread's turns while questions wait for them, holding its lease; if
        another process holds it, that one runs them (it is woken to look)."""
        while self.accepting:
            run_id = uuid.uuid4().hex[:12]
            alive = await self.baton.instances.alive()
            if not await self.inbox.lease(
                key.key, owner=self.baton.instances.id, run_id=run_id, alive=alive
            ):
                await self.baton.signals.notify("steer", key.key)
                return
            try:
                taken = await self.inbox.take(
                    key.key, run_id=run_id, holder=self.baton.instances.id, questions_only=True
                )
                if taken:
                    turn = self.spawn(self._turn(key, taken[0], run_id), f"turn-{run_id}")
                    await asyncio.wait([turn])
            finally:
                await asyncio.shield(self.inbox.release(key.key, run_id))
            # After the release: a question stored while this process held the lease
            # (whose receiver then found the lease taken) is seen here.
            if not await self.inbox.has_questions(key.key):
                await self.inbox.drop_talk(key.key)
                return

    async def _turn(self, key: SessionKey, question: ThreadMessage, run_id: str) -> None:
        """One run of a thread: `question` is what it answers."""
        clean = mention_free(question.text, self.bot_user_id or "")
        run = ActiveRun(
            run_id=run_id,
            key=key,
            user_id=question.user_id,
            channel=question.channel_id,
            thread_ts=question.thread_ts,
            direct=parse_direct_agent(clean) is not None,
            team_id=question.user_team,
            author_id=question.author_id,
        )
        if run.direct:
            await self.inbox.mark_direct(key.key, run_id)
        self.runs[run.run_id] = run
        self.threads[key.key] = run
        run.task = asyncio.current_task()  # type: ignore[assignment]
        self._watch_runs()
        messages_end = "done"
        try:
            session = await self.baton.conversations.store.get_or_create(key)
            run.session_id = session.id
            await self.run_store.start(
                run_id=run.run_id,
                owner=self.baton.instances.id,
                session_id=session.id,
                channel_id=run.channel,
                thread_ts=run.thread_ts,
                user_id=run.user_id,
                state="queued",
            )
            await self._deliver(run)  # what came in while the lease was taken
            await self._run(
                run, ts=question.ts, text=question.text, is_dm=question.is_dm,
                files=list(question.files),
            )  # fmt: skip
        except asyncio.CancelledError:
            if run.handed_over:
                messages_end = "handed_over"
            elif run.lost or (not self.accepting and not run.cancelled_by):
                messages_end = "interrupted"
            raise
        finally:
            self.runs.pop(run.run_id, None)
            if self.threads.get(key.key) is run:
                self.threads.pop(key.key, None)
            await asyncio.shield(self._end_turn(run, messages_end))

    async def _end_turn(self, run: ActiveRun, messages_end: str) -> None:
        await self.run_store.finish(run.run_id)
        self.admission.release()
        if messages_end == "handed_over":
            # It never started: its question (and what reached it) waits again, in the
            # thread's order, and whoever runs the thread next reads it all.
            held = await self.inbox.of_run(run.run_id, states=[TAKEN])
            await self.inbox.move([m.id for m in held], PENDING, only_from=[TAKEN])
            await self.baton.signals.notify("steer", run.key.key)
            return
        interrupted = messages_end == "interrupted"
        stopped = bool(run.cancelled_by or interrupted or not self.accepting)
        # What reached the run but was never read, and what waited undelivered.
        leftovers = list(run.authors)
        run.take_inbox()
        if not run.lost:
            waiting = await self.inbox.take(
                run.key.key, run_id=run.run_id, holder=self.baton.instances.id,
                questions_only=False,
            )  # fmt: skip
            leftovers += [(m.id, m.user_id, m.text, m.addressed) for m in waiting]
        # Questions that came too late for this run are the thread's next turn (on
        # this replica or, when this one is stopping, another); talk nobody read is
        # dropped, and its authors told so.
        again = [i for i, _, _, addressed in leftovers if addressed and not run.cancelled_by]
        unread = [(i, author) for i, author, _, _ in leftovers if i not in again]
        await self.inbox.move(again, PENDING, only_from=[TAKEN])
        await self.inbox.move([i for i, _ in unread], DROPPED, only_from=[TAKEN])
        if not run.lost:
            await self.inbox.end_run(run.run_id, INTERRUPTED_STATE if interrupted else DONE)
        if unread:
            who = ", ".join(sorted({f"<@{author}>" for _, author in unread}))
            why = (
                "the run was cancelled"
                if run.cancelled_by
                else ("Baton is restarting" if stopped else "the run ended first")
            )
            self.spawn(
                self._say(run, f"⊘ Not handled ({why}): the messages from {who} that came "
                          "in while it worked. Mention me if they still matter."),
                f"not-handled-{run.run_id}",
            )  # fmt: skip
        if again and not self.accepting:
            await self.baton.signals.notify("steer", run.key.key)  # for another replica

    async def _deliver(self, run: ActiveRun) -> None:
        """Hand the thread's waiting messages to `run` (in Slack's order), each
        acknowledged with a reaction."""
        taken = await self.inbox.take(
            run.key.key, run_id=run.run_id, holder=self.baton.instances.id, questions_only=False
        )
        for message in taken:
            await self._steer(run, message)

    async def _redelivered(self, channel: str, ts: str) -> None:
        """A message Baton already took came again. Swallowed, unless its run was
        interrupted by a restart (then a Retry is offered once) or the process that
        took it died before looking at it (then it is handled here)."""
        stored = await self.inbox.find(channel, ts)
        if stored is None:
            return
        if stored.state == INTERRUPTED_STATE and stored.run_id:
            if await self.inbox.move([stored.id], OFFERED, only_from=[INTERRUPTED_STATE]):
                self.spawn(
                    self._offer_retry(stored.channel_id, stored.thread_ts, stored.run_id),
                    f"offer-retry-{stored.run_id}",
                )
        elif stored.state == NEW and stored.holder not in await self.baton.instances.alive():
            self.spawn(self._dispatch_unclaimed(stored), f"redelivered-{stored.id}")

    async def _offer_retry(self, channel: str, thread_ts: str, run_id: str) -> None:
        post = interrupted_message(run_id, retry=True)
        try:
            await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=post.text, blocks=post.blocks
            )
        except SlackApiError as exc:
            logger.warning("could not offer a retry: %s", exc.response.get("error"))

    async def retry(
        self, run_id: str, *, user_id: str, team_id: str | None, enterprise_id: str | None,
        user_team: str | None,
    ) -> str | None:  # fmt: skip
        """Run again what run `run_id` was asked before a restart interrupted it, with the
        thread's history so far, as `user_id`'s turn. None when it starts (or waits for
        the thread's turn); else why not, for that person alone."""
        record = await self.run_store.get(run_id)
        if record is None:
            return "That run is not known here."
        refusal = await self.access.may_start(
            user_id=user_id, channel_id=record.channel_id,
            is_dm=record.channel_id.startswith("D"), team_id=team_id,
            user_team=user_team, enterprise_id=enterprise_id,
        )  # fmt: skip
        if refusal is not None:
            return refusal.text
        interrupted = await self.inbox.of_run(run_id, states=RETRYABLE)
        if not interrupted or not await self.inbox.move(
            [m.id for m in interrupted], RETRIED, only_from=RETRYABLE
        ):
            return "Nothing to retry: it was retried already, or it was not interrupted."
        suffix = uuid.uuid4().hex[:8]
        first = None
        for message in interrupted:
            copy = await self.inbox.receive(
                session_key=message.session_key, channel_id=message.channel_id,
                thread_ts=message.thread_ts, ts=f"{message.ts}~{suffix}",
                user_id=user_id if message is interrupted[0] else message.user_id,
                author_id=message.author_id, text=message.text,
                holder=self.baton.instances.id, team_id=message.team_id,
                user_team=user_team or message.user_team, enterprise_id=message.enterprise_id,
                files=message.files, is_dm=message.is_dm,
                addressed=message.addressed or message is interrupted[0], state=PENDING,
            )  # fmt: skip
            first = first or copy
        if first is not None:
            key = session_key_of(first)
            local = self.threads.get(key.key)
            if local is not None:
                await self._deliver(local)
            else:
                self.spawn(self.take_turns(key), f"retry-{run_id}")
        return None

    async def pick_up(self, *, alive: Collection[str]) -> None:
        """Questions no live process is answering: a dead receiver's unread messages are
        read here; threads whose questions wait with nobody running their turn (their
        process died or stopped) get their turn here."""
        if not self.accepting:
            return
        for message in await self.inbox.unclaimed(alive=alive):
            self.spawn(self._dispatch_unclaimed(message), f"unclaimed-{message.id}")
        for message in await self.inbox.waiting(alive=alive):
            key = session_key_of(message)
            if key.key not in self.threads and key.key not in self._starting:
                self._starting.add(key.key)
                self.spawn(self._start_waiting(key), f"waiting-{message.id}")

    async def _dispatch_unclaimed(self, message: ThreadMessage) -> None:
        if await self.inbox.take_over(message, holder=self.baton.instances.id):
            await self.dispatch(message)

    async def _start_waiting(self, key: SessionKey) -> None:
        try:
            await self.take_turns(key)
        finally:
            self._starting.discard(key.key)

    async def _refuse(
        self, refusal: Refusal, *, user: str, channel: str, thread_ts: str, dm: bool
    ) -> None:
        """Tell that person alone why nothing starts: ephemeral in channels, a reply in DMs."""
        try:
            if dm:
                await post_text(
                    self.client, channel=channel, thread_ts=thread_ts, text=refusal.text
                )
            else:
                await self.client.chat_postEphemeral(
                    channel=channel, user=user, thread_ts=thread_ts, text=refusal.text
                )
        except SlackApiError as exc:
            logger.warning("could not deliver a refusal: %s", exc.response.get("error"))

    async def _say(self, run: ActiveRun, text: str) -> None:
        try:
            await post_text(self.client, channel=run.channel, thread_ts=run.thread_ts, text=text)
        except SlackApiError as exc:
            logger.warning("could not post in the thread: %s", exc.response.get("error"))

    async def _steer(self, run: ActiveRun, message: ThreadMessage) -> None:
        """Pass a message (and its files) to the running agent, acknowledged with a reaction."""
        user = message.user_id
        name = await self.names.name_of(user)
        clean = mention_free(message.text, self.bot_user_id or "")
        read = await self.files.prompt(clean, list(message.files))
        run.inbox.append(
            ChatMessage(
                role="user",
                content=f"[{name} <@{user}>, while you were working] {read.text}",
                images=read.images,
            )
        )
        run.authors.append((message.id, user, clean, message.addressed))
        try:
            await self.client.reactions_add(
                channel=message.channel_id, timestamp=message.ts, name=SEEN_REACTION
            )
        except SlackApiError as exc:
            logger.info("could not acknowledge a steering message: %s", exc.response.get("error"))

    def _mentions_someone_else(self, text: str) -> bool:
        return any(user != self.bot_user_id for user in USER_MENTION.findall(text))

    async def _start_fresh(self, key: SessionKey, *, channel: str, thread_ts: str) -> None:
        """Put a DM's conversation aside: the next message starts a new one."""
        archived = await self.baton.conversations.store.archive(key)
        text = (
            "Starting fresh: I've put our earlier conversation aside."
            if archived
            else "Starting fresh: there was no earlier conversation to put aside."
        )
        await post_text(self.client, channel=channel, thread_ts=thread_ts, text=text)

    # ---------------------------------------------------------------------- runs

    async def _run(
        self, run: ActiveRun, *, ts: str, text: str, is_dm: bool,
        files: list[dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        clean = mention_free(text, self.bot_user_id or "")
        direct = parse_direct_agent(clean)
        agents = self.baton.site_for(run.channel).agents
        if direct is not None and agents.get(direct[0]) is None:
            available = ", ".join(f"`{n}`" for n in agents.names())
            await self.client.chat_postMessage(
                channel=run.channel,
                thread_ts=run.thread_ts,
                text=f"I have no agent named `{direct[0]}`. Available agents: {available}.",
            )
            return
        progress = ProgressMessage(
            self.client, channel=run.channel, thread_ts=run.thread_ts, run_id=run.run_id
        )
        stream = AnswerStream(
            self.client,
            channel=run.channel,
            thread_ts=run.thread_ts,
            recipient_user_id=run.user_id,
            recipient_team_id=run.team_id,
            budget=getattr(self.client, "budget", None),
        )
        started = time.monotonic()
        status_task: asyncio.Task[Any] | None = None
        final = "✗ Stopped"

        async def show_progress() -> None:
            await progress.start()
            if progress.ts is not None:
                await self.run_store.set_progress(run.run_id, progress.ts)

        # The work does not wait for the progress message: in a busy channel Slack takes
        # about a message a second, and the model can be thinking meanwhile.
        posting = self.spawn(show_progress(), f"progress-{run.run_id}")
        try:
            queued = False

            async def show_queued(place: QueuePosition) -> None:
                nonlocal queued
                queued = True
                progress.set_status(queued_status(place))

            await self.admission.wait(run.run_id, run.user_id, on_queued=show_queued)
            run.admitted = True
            # Checked again as the turn starts: a run that waited in the queue, or a
            # question that waited for the thread's turn (its asker's budget was not
            # checked when it arrived beside a running turn), may find it spent.
            refusal = await self.budgets.refusal(user_id=run.user_id, channel_id=run.channel)
            if refusal is not None:
                final = (
                    "✗ Not started: the daily token budget was spent while it waited"
                    if queued
                    else "✗ Not started: the daily token budget is spent"
                )
                await self._refuse(
                    refusal, user=run.user_id, channel=run.channel, thread_ts=run.thread_ts,
                    dm=is_dm,
                )  # fmt: skip
                return
            progress.set_status(WORKING)
            status_task = self.spawn(self._keep_status(run), f"status-{run.run_id}")
            started = time.monotonic()
            if direct is not None:
                task = await self.files.prompt(direct[1], files)
                final = await self._run_agent(
                    run, progress, stream, direct[0], task.text, started, images=task.images
                )
            else:
                prompt = await self.files.prompt(clean, files)
                final = await self._run_main(
                    run, progress, stream, ts.partition("~")[0], prompt.text, started,
                    images=prompt.images,
                )  # fmt: skip
        except asyncio.CancelledError:
            if run.handed_over:
                final = HANDED_OVER
            elif run.cancelled_by:
                final = f"⊘ Cancelled by <@{run.cancelled_by}>"
            elif run.lost or not self.accepting:
                # Shutdown stopped it at the end of the grace period, or this process
                # stalled and the others closed the run as a dead replica's.
                final = INTERRUPTED
            else:
                final = "⊘ Cancelled"
            raise
        except RunNotQueued:
            final = "✗ Interrupted: the run was closed while it waited in the queue; ask again"
        except SlackApiError as exc:
            reason = f"Slack refused a message: {exc.response.get('error')}"
            final = f"✗ {reason}"
            logger.warning("Slack error during a run: %s", exc.response.get("error"))
            await self._report(run, reason)
        except Exception as exc:
            logger.exception("run %s failed", run.run_id)
            reason = self.redact(f"Something went wrong: {type(exc).__name__}: {exc}")
            final = f"✗ {reason}"
            await self._report(run, reason)
        finally:
            if status_task is not None:
                status_task.cancel()
            if stream.mode != "closed":
                # Ended without its answer (cancelled, failed): keep what was written.
                await asyncio.shield(stream.abandon())
            await asyncio.shield(asyncio.wait([posting]))  # the final state needs the message
            await asyncio.shield(progress.finish(final, retry=final == INTERRUPTED))
            metrics.record_run(run_outcome(final))

    def _budget(self, run: ActiveRun) -> RunBudget:
        return RunBudget(
            usage=self.baton.usage,
            limit=self.baton.settings.limits.tokens_per_run,
            run_id=run.run_id,
            user_id=run.user_id,
            channel_id=run.channel,
        )

    async def _report(self, run: ActiveRun, text: str) -> None:
        """Say in the thread what went wrong (escaped, whole), through rate limits."""
        message = error_message(self.redact(text))
        try:
            await post_messages(
                self.client, channel=run.channel, thread_ts=run.thread_ts, messages=[message]
            )
        except SlackApiError as exc:
            logger.warning("could not report in the thread: %s", exc.response.get("error"))

    async def _run_main(
        self,
        run: ActiveRun,
        progress: ProgressMessage,
        stream: AnswerStream,
        ts: str,
        text: str,
        started: float,
        *,
        images: Sequence[ImagePart] = (),
    ) -> str:
        author = run.author_id or run.user_id
        name = await self.names.name_of(author)
        context = await self._thread_context(run, ts)
        child_usage: dict[str, tuple[str, int]] = {}
        done: Done | None = None
        errors: list[str] = []
        budget = self._budget(run)
        async for event in self.baton.site_for(run.channel).conversations.run_turn(
            run.key,
            f"[{name} <@{author}>] {text}",
            meter=budget,
            user_id=run.user_id,
            approval=self._approval_for(run),
            progress=lambda update: self._show_child(progress, stream, update, child_usage),
            inbox=run.take_inbox,
            context=context,
            images=images,
        ):
            self._show(progress, stream, event)
            if isinstance(event, ErrorEvent):
                errors.append(event.message)
            elif isinstance(event, Compacted) and event.newsworthy:
                await self._say(run, compaction_note(event))
            elif isinstance(event, Done):
                done = event
        assert done is not None
        for message in errors:
            await self._report(run, message)
        await stream.finish(done.final_text, footer=feedback_blocks(run.run_id))
        mark = STOP_MARKS.get(done.stop_reason, "✗ Failed")
        parts = [
            mark,
            f"{done.turns} turn{'s' if done.turns != 1 else ''}",
            format_tokens(done.usage.prompt_tokens, done.usage.completion_tokens),
            format_duration(time.monotonic() - started),
        ]
        parts += [
            f"{agent} {task_id}: {tokens:,} tokens"
            for task_id, (agent, tokens) in child_usage.items()
        ]
        if child_usage:
            parts.append(f"run total {budget.spent.total_tokens:,} tokens")
        return " · ".join(parts)

    async def _run_agent(
        self,
        run: ActiveRun,
        progress: ProgressMessage,
        stream: AnswerStream,
        agent: str,
        text: str,
        started: float,
        *,
        images: Sequence[ImagePart] = (),
    ) -> str:
        if not text:
            await post_text(
                self.client,
                channel=run.channel,
                thread_ts=run.thread_ts,
                text=f"Write the task after the agent's name: `@{agent} what to do`.",
            )
            return "✗ No task given"
        try:
            outcome = await self.baton.site_for(run.channel).conversations.run_agent(
                run.key,
                agent,
                text,
                meter=self._budget(run),
                user_id=run.user_id,
                approval=self._approval_for(run),
                progress=lambda update: self._show_direct(progress, stream, update),
                images=images,
            )
        except UnknownAgentError as exc:
            await self._report(run, str(exc))
            return "✗ Unknown agent"
        body = outcome.text or "(no answer text)"
        if outcome.state != "completed":
            # The failure leads: what was streamed is rewritten to say it first.
            body = f"✗ {self.redact(outcome.error or outcome.state)}\n\n{body}"
        stream.prefix = direct_header(agent, outcome.task_id)
        await stream.finish(body, footer=feedback_blocks(run.run_id))
        mark = "✓ Done" if outcome.state == "completed" else f"✗ {outcome.state.capitalize()}"
        return " · ".join(
            [
                f"{mark} ({agent})",
                f"{outcome.turns} turns",
                format_tokens(outcome.usage.prompt_tokens, outcome.usage.completion_tokens),
                format_duration(time.monotonic() - started),
            ]
        )

    def _approval_for(self, run: ActiveRun) -> ApprovalFunc:
        assert run.session_id is not None
        return self.approvals.for_run(
            session_id=run.session_id,
            channel=run.channel,
            thread_ts=run.thread_ts,
            requested_by=run.user_id,
        )

    def _show(self, progress: ProgressMessage, stream: AnswerStream, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            stream.write(event.text)
        elif isinstance(event, ModelWaiting):
            progress.set_status(waiting_status(event))
            if event.discard_text:
                stream.discard()  # the retried call writes its answer again
            return
        if progress.status != WORKING:
            progress.set_status(WORKING)  # the model answers again
        if isinstance(event, ToolStart | ToolResult | ErrorEvent | ApprovalRequired):
            if line := describe_event(redacted_event(event, self.redact)):
                progress.add(self.redact(line))
        show_step(stream, event, redact=self.redact)

    def _show_child(
        self,
        progress: ProgressMessage,
        stream: AnswerStream,
        update: SubAgentEvent,
        usage: dict[str, tuple[str, int]],
    ) -> None:
        if update.background:
            return  # background work reports when it finishes
        if isinstance(update.event, Done):
            usage[update.task_id] = (update.agent, update.event.usage.total_tokens)
        if line := describe_event(redacted_event(update.event, self.redact)):
            progress.add(self.redact(f"[{update.agent}] {line}"))
        show_child_step(stream, update, redact=self.redact)

    def _show_direct(
        self, progress: ProgressMessage, stream: AnswerStream, update: SubAgentEvent
    ) -> None:
        """An `@agent` run: its own words are the answer; its steps, the timeline."""
        event = update.event
        if isinstance(event, TextDelta):
            stream.prefix = direct_header(update.agent, update.task_id)
            stream.write(event.text)
            return
        if isinstance(event, ModelWaiting) and event.discard_text:
            stream.discard()
        if line := describe_event(redacted_event(event, self.redact)):
            progress.add(self.redact(f"[{update.agent}] {line}"))
        show_step(stream, event, redact=self.redact)

    async def _keep_status(self, run: ActiveRun) -> None:
        """Show "is working…" under the thread (DMs and channel threads alike), refreshed
        before it expires; where Slack refuses it, the progress message suffices."""
        try:
            while True:
                await self._set_status(run, "is working…")
                await asyncio.sleep(STATUS_REFRESH_S)
        except SlackApiError:
            return  # not an assistant thread, or the feature is off: the message path suffices
        finally:
            with contextlib.suppress(SlackApiError, asyncio.CancelledError):
                await asyncio.shield(self._set_status(run, ""))

    async def _set_status(self, run: ActiveRun, status: str) -> None:
        """Set the thread's status if Slack's budget has room for it soon; a nicety, it
        never makes an answer or an approval wait (skipped when there is no room)."""
        budget: RateBudget | None = getattr(self.client, "budget", None)
        call = functools.partial(
            self.client.assistant_threads_setStatus,
            channel_id=run.channel,
            thread_ts=run.thread_ts,
            status=status,
        )
        if budget is None:
            await call()
            return
        try:
            async with budget.slot(
                "assistant.threads.setStatus", None, Priority.URGENT, within=STATUS_PATIENCE_S
            ):
                await call()
        except NoRoom:
            logger.debug("no room in Slack's budget for the thread status; skipped")

    async def _thread_context(self, run: ActiveRun, ts: str) -> str | None:
        """On a thread's first turn, what was said in it before Baton was asked."""
        if run.thread_ts == ts:
            return None
        assert run.session_id is not None
        if await self.baton.conversations.store.has_history(run.session_id):
            return None
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_REPLY_PAGES):
                response = await self.client.conversations_replies(
                    channel=run.channel, ts=run.thread_ts, limit=200, cursor=cursor
                )
                messages += response.get("messages", [])
                cursor = (response.get("response_metadata") or {}).get("next_cursor")
                if not cursor or any(m.get("ts") == ts for m in messages):
                    break
        except SlackApiError as exc:
            logger.info("conversations.replies failed: %s", exc.response.get("error"))
            if not messages:
                return None
        lines = []
        for message in messages:
            if message.get("ts") == ts:
                break
            if message.get("bot_id") or message.get("user") == self.bot_user_id:
                continue
            user = message.get("user")
            if not user:
                continue
            text = mention_free(message.get("text") or "", self.bot_user_id or "").strip()
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

    # ------------------------------------------------------------ cancel, tasks

    def on_lost(self) -> None:
        """This process was taken for dead while it stalled (its heartbeat says so):
        the runs the others closed meanwhile stop here too, so none runs twice."""
        self.spawn(self._stop_lost_runs(), "stop-lost-runs")

    async def _stop_lost_runs(self) -> None:
        for run in list(self.runs.values()):
            record = await self.run_store.get(run.run_id)
            if (record is None or record.state == FINISHED) and run.task is not None:
                logger.warning("run %s was closed by another replica: stopping it", run.run_id)
                run.lost = True
                run.task.cancel()

    def cancel_run(self, run_id: str, user_id: str) -> ActiveRun | None:
        run = self.runs.get(run_id)
        if run is None or run.task is None:
            return None
        run.cancelled_by = user_id
        run.task.cancel()
        return run

    def _watch_runs(self) -> None:
        """While this process runs turns: cancels and steering that reached other
        replicas reach them (woken by a signal, or by polling at worst)."""
        if self._cancel_watch is None or self._cancel_watch.done():
            self._cancel_watch = asyncio.create_task(self._cancels(), name="run-cancel-watch")
        if self._steer_watch is None or self._steer_watch.done():
            self._steer_watch = asyncio.create_task(self._steering(), name="run-steer-watch")

    async def _cancels(self) -> None:
        """Cancel runs of this process that a click on another replica asked to stop."""
        woken = self.baton.signals.subscribe("cancel")
        try:
            while self.runs:
                await woken.wait(CANCEL_WATCH_S)
                try:
                    requests = await self.run_store.cancel_requests(self.baton.instances.id)
                except Exception:
                    logger.exception("could not read cancel requests")
                    continue
                for record in requests:
                    if record.cancel_requested_by:
                        self.cancel_run(record.id, record.cancel_requested_by)
        finally:
            woken.close()

    async def _steering(self) -> None:
        """Hand this process's runs the messages other replicas stored for their threads."""
        woken = self.baton.signals.subscribe("steer")
        try:
            while self.runs:
                await woken.wait(STEER_WATCH_S)
                # Not started yet: a run takes what waits when it starts.
                started = {r.key.key: r for r in self.runs.values() if r.session_id is not None}
                try:
                    waiting = await self.inbox.with_pending(started)
                except Exception:
                    logger.exception("could not look for messages waiting for runs")
                    continue
                for key in waiting:
                    run = started[key]
                    try:
                        await self._deliver(run)
                    except Exception:
                        logger.exception("could not hand waiting messages to run %s", run.run_id)
        finally:
            woken.close()

    async def close_orphaned_runs(self) -> None:
        """Runs whose process is gone: their thread is told the run was interrupted by a
        restart, with a Retry button that runs its question again (one replica does
        this for each run: the one that closes it)."""
        for record in await self.run_store.orphans(alive=await self.baton.instances.alive()):
            if not await self.run_store.close(record.id):
                continue  # another replica closed it first
            retryable = await self.inbox.end_run(record.id, INTERRUPTED_STATE) > 0
            post = interrupted_message(record.id, retry=retryable)
            try:
                if record.progress_ts:
                    await self.client.chat_update(
                        channel=record.channel_id,
                        ts=record.progress_ts,
                        text=INTERRUPTED,
                        blocks=progress_blocks(
                            [], run_id=record.id, running=False, status=INTERRUPTED,
                            retry=retryable,
                        ),
                    )  # fmt: skip
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

    async def stop_watching(self) -> None:
        watches = [w for w in (self._cancel_watch, self._steer_watch) if w is not None]
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)

    def redacted_task(self, record: TaskRecord) -> TaskRecord:
        """`record` as people may see it: its error without credentials."""
        return replace(record, error=self.redact(record.error) if record.error else record.error)

    def redacted_detail(self, detail: TaskDetail) -> TaskDetail:
        """`detail` as people may see it: its error and log lines without credentials."""
        return replace(
            detail,
            task=self.redacted_task(detail.task),
            log=tuple(self.redact(line) for line in detail.log),
        )

    async def post_task_finished(self, record: TaskRecord) -> None:
        """Tell the thread that started a background task how it ended.

        Slack takes about one message a second in a channel: the results of a fan-out,
        ending close together, go in one message (as many as it holds), not one message
        each a second apart. What ends while the thread's result message waits for its
        slot, or for its still running siblings, goes in it.
        """
        if not record.background:
            return
        if (waiting := self._finished_in.get(record.session_id)) is not None:
            waiting.join(record)  # the thread's poster takes it with its next message
            return
        session = await self.baton.conversations.store.get(record.session_id)
        if session is None or session.kind != "slack" or not session.channel_id:
            return
        assert session.thread_ts is not None
        where = (session.channel_id, session.thread_ts)
        if (waiting := self._finished.get(where)) is not None:
            waiting.join(record)
            return
        self._finished[where] = self._finished_in[session.id] = waiting = _FinishedTasks(
            records=[record]
        )
        try:
            while waiting.records:
                try:
                    await self._gather_siblings(session.id, waiting)
                    await self._post_finished(*where, waiting.records)
                except Exception:
                    logger.exception("could not post finished tasks in %s/%s", *where)
        finally:
            del self._finished[where], self._finished_in[session.id]

    async def _gather_siblings(self, session_id: int, waiting: _FinishedTasks) -> None:
        """While other background tasks of the session still run, wait for them to end,
        for at most the time Slack takes between two messages in a channel: past it the
        next message would have to wait for its slot anyway."""
        budget: RateBudget | None = getattr(self.client, "budget", None)
        if budget is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget.channel_limit.interval
        tracker = self.baton.tracker
        while True:
            waiting.arrived.clear()
            # Siblings running here end through this poster: no need to ask the database
            # (which also counts those on other replicas) until none is left here.
            if tracker.unended_here(session_id) == 0 and (
                await tracker.running_background(session_id) == 0
            ):
                # The last ones may have ended a moment before their results reach us
                # (their callbacks are scheduled, not yet run): give them those turns.
                for _ in range(_ARRIVAL_TURNS):
                    await asyncio.sleep(0)
                if not waiting.arrived.is_set():
                    return
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await waiting.arrived.wait()

    async def _post_finished(self, channel: str, thread_ts: str, waiting: list[TaskRecord]) -> None:
        """Post the next message of finished tasks; its slot first, then what it holds
        (what ended during the wait included)."""
        budget: RateBudget | None = getattr(self.client, "budget", None)
        slot = (
            budget.slot("chat.postMessage", channel, Priority.URGENT)
            if budget is not None
            else contextlib.nullcontext()
        )
        async with slot:
            posts = take_finished_posts(
                waiting, render=lambda r: task_finished_message(self.redacted_task(r))
            )
            await post_messages(
                self.client,
                channel=channel,
                thread_ts=thread_ts,
                messages=[
                    AnswerMessage(
                        text=fit_text("\n\n".join(post.text for post in posts)),
                        blocks=[block for post in posts for block in post.blocks],
                    )
                ],
                file=posts[0].file,
            )


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


def session_key_of(message: ThreadMessage) -> SessionKey:
    """The session (thread, or DM conversation) a stored message belongs to."""
    return SessionKey.slack_thread(
        team_id=message.team_id or "-",
        channel_id=message.channel_id,
        thread_ts=DM_CONVERSATION if message.is_dm else message.thread_ts,
    )


def direct_header(agent: str, task_id: str) -> str:
    """The first line of an `@agent` run's answer: whose it is, and its task."""
    return f"*{agent}* · `{task_id}`\n\n"


def waiting_status(event: ModelWaiting) -> str:
    """The progress status while a model call waits to be retried."""
    text = event.describe()
    return f"⏳ {text[:1].upper()}{text[1:]}"


def compaction_note(event: Compacted) -> str:
    """The short thread note saying that earlier messages were folded or left out."""
    return f"🗜 To fit the model's context window, I {event.describe()}."


def run_outcome(final: str) -> str:
    """The metrics label of a run's end, read from its final progress status."""
    for reason, mark in STOP_MARKS.items():
        if final.startswith(mark):
            return RUN_OUTCOMES.get(reason, reason)
    if final.startswith("✓"):
        return "done"
    if final.startswith("⊘"):
        return "cancelled"
    if final.startswith("✗ Not started"):
        return "refused"
    if final.startswith("✗ Interrupted"):
        return "interrupted"
    if final.startswith("↪"):
        return "handed_over"
    return "failed"


def queued_status(place: QueuePosition) -> str:
    """The progress status of a run waiting for a slot."""
    if place.reason == "user":
        why = "you already have as many runs going as one person may"
        if place.ahead:
            why += f", and {place.ahead} run{'s' if place.ahead != 1 else ''} wait ahead"
    elif place.ahead:
        why = f"{place.ahead} run{'s' if place.ahead != 1 else ''} ahead"
    else:
        why = "next in line; every slot is taken"
    return f"⏳ Queued: {why}. It starts by itself when a slot frees; Cancel withdraws it."
