"""The turn machine: every turn of every thread, whatever surface or trigger started it.

A message for Baton is stored before its surface says it was taken: storing it is the
claim (a redelivery finds it stored and starts nothing). Then who sent it is checked
(access, budgets), and it joins the thread's running turn (steering; here, or on
another replica through a signal), or starts the thread's turn, or waits for it. A
thread runs one turn at a time across every replica: its lease in the database says
who runs it. Runs over the caps of `limits` wait in a visible queue. Cancels reach
runs here at once and on other replicas through the database; runs a restart
interrupted are offered again (Retry); the work of a process that died is taken over.

Surfaces only listen and render: they hand messages in (`intake`, `dispatch`) and show
what the machine tells them through `Surface` and `TurnView` (bot/sessions/surface.py).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from bot.access.admission import Admission
from bot.access.budgets import DailyBudgets
from bot.access.refusal import Refusal
from bot.config import LimitsConfig
from bot.engine import ChatMessage
from bot.outcomes import RunEnd, RunOutcome, StopCause
from bot.redaction import Redactor
from bot.sessions.conversations import Conversations
from bot.sessions.results import FinishedResults
from bot.sessions.run import (
    ActiveRun,
    RunParts,
    RunState,
    Steering,
    execute,
    parse_direct_agent,
    trigger_refusal,
)
from bot.sessions.surface import Surface, Where
from bot.sessions.workbench import Workbench
from bot.store import Database, SessionKey, SessionStore
from bot.store.instances import Instances
from bot.store.runs import FINISHED, QUEUED, RUNNING, RunRecord, RunStore
from bot.store.signals import Signals
from bot.store.tasks import TaskRecord
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
    Inbound,
    Lease,
    ThreadInbox,
    ThreadMessage,
)
from bot.store.thread_inbox import INTERRUPTED as INTERRUPTED_STATE
from bot.store.usage import UsageStore
from bot.subagents import AgentRegistry, TaskTracker
from bot.tracing import DISABLED, Tracing

logger = logging.getLogger(__name__)

# How often runs look for cancels and messages other replicas stored for them, when no
# signal woke them (SQLite; a lost notification).
CANCEL_WATCH_S = 1.0
STEER_WATCH_S = 1.0
# After the grace period, how long stopped runs may take for their last surface calls.
INTERRUPT_WAIT_S = 5.0
# What, alone in a DM, puts the conversation aside and starts a new one.
FRESH_START = frozenset({"new", "reset", "start over", "new conversation"})
GOING = frozenset({RUNNING, QUEUED})


class AccessGate(Protocol):
    """Who may start runs (bot/access/policy.py)."""

    async def may_start(
        self,
        *,
        user_id: str,
        channel_id: str,
        is_dm: bool,
        team_id: str | None,
        user_team: str | None = None,
        enterprise_id: str | None = None,
    ) -> Refusal | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerEnd:
    """How a run a trigger started ended (or why it never started: `run_id` is None)."""

    trigger: str  # `schedule:<name>`, `webhook:<name>`, `watch:<channel>`
    run_id: str | None
    where: Where
    end: RunEnd


# Told when a run a trigger started ends (a schedule counts its failures).
TriggerEnded = Callable[[TriggerEnd], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnParts:
    """What the turn machine works with, built once by the composition root."""

    database: Database
    instances: Instances
    signals: Signals
    tracker: TaskTracker
    sessions: SessionStore
    usage: UsageStore
    budgets: DailyBudgets
    limits: LimitsConfig
    # Every error text bound for a thread passes through it: exceptions quote database
    # URLs, SQL parameters and headers.
    redact: Redactor
    conversations_for: Callable[[str | None], Conversations]
    agents_for: Callable[[str | None], AgentRegistry]
    # A channel's threads' worktrees, when its workspace has a git remote.
    workbench_for: Callable[[str | None], Workbench | None] = lambda _channel: None
    # Waits (bounded) until the tools of servers still starting can be offered.
    tools_ready: Callable[[], Awaitable[None]] | None = None
    # Each run is a span, when traces are on.
    tracing: Tracing = DISABLED
    # Told how the runs triggers started ended.
    trigger_ended: TriggerEnded | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Where a run is and who started it; whether it is still going on."""

    run_id: str
    where: Where
    user_id: str
    going: bool


class Cancelled(Enum):
    """What asking to cancel a run did."""

    HERE = "here"  # it ran here, and stops now
    ELSEWHERE = "elsewhere"  # another replica runs it; it was asked to stop it
    OVER = "over"  # nothing to cancel: it finished


class TurnMachine:
    """Turns messages into runs, one turn per thread at a time, for one surface."""

    def __init__(
        self,
        surface: Surface,
        parts: TurnParts,
        *,
        access: AccessGate,
        admission_poll_s: float = 1.0,
    ) -> None:
        self.surface = surface
        self.parts = parts
        self.access = access
        self.redact = parts.redact
        self.instances = parts.instances
        self.signals = parts.signals
        self.inbox = ThreadInbox(parts.database)
        self.run_store = RunStore(parts.database)
        self.admission = Admission(
            self.run_store,
            parts.instances,
            parts.limits,
            poll_s=admission_poll_s,
            signals=parts.signals,
        )
        self.results = FinishedResults(surface, sessions=parts.sessions, tracker=parts.tracker)
        self.runs: dict[str, ActiveRun] = {}  # by run id
        self.threads: dict[str, ActiveRun] = {}  # by session key
        # Runs whose slot of `limits` is free already (their work is over; their
        # surface may still be showing the end).
        self._freed: set[str] = set()
        self._starting: set[str] = set()  # threads whose waiting turn pick_up is starting
        self._cancel_watch: asyncio.Task[None] | None = None
        self._steer_watch: asyncio.Task[None] | None = None
        self.accepting = True
        self._tasks: set[asyncio.Task[Any]] = set()
        self._side: set[asyncio.Task[Any]] = set()  # those that carry no run

    # ----------------------------------------------------------------- lifecycle

    def spawn(
        self, work: Coroutine[Any, Any, Any], name: str, *, run: bool = False
    ) -> asyncio.Task[Any]:
        """Run `work` outside the caller (a listener acks at once); owned, its failure
        logged, and counted until it ends (`idle`). `run`: it may carry a run (a
        dispatch, a turn), so it lasts as long as that run."""
        task = asyncio.create_task(self._guard(work, name), name=name)
        self._tasks.add(task)
        if not run:
            self._side.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._side.discard(task)

    @staticmethod
    async def _guard(work: Coroutine[Any, Any, Any], name: str) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s failed", name)

    @property
    def busy(self) -> bool:
        """Whether anything this machine started is going on."""
        return bool(self._tasks)

    async def idle(self, *, runs: bool = True) -> None:
        """Return once nothing this machine started is going on: no run, no note being
        posted, no click being handled. With `runs=False`, runs may go on: only what
        else was started must be over (a click while a run waits for a person). Tests
        wait on this, instead of sleeping, to prove that nothing else happened."""
        while pending := (self._tasks if runs else self._side):
            await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
            # What the one that ended started in its end is owned too: look again.
            await asyncio.sleep(0)

    async def drain(self, grace_s: float) -> None:
        """Stop taking work and let what is going on (and what it starts, such as the
        notes a finished run posts) finish, for up to `grace_s` seconds."""
        self.accepting = False
        # Runs still queued for a slot have done nothing yet: rather than wait here, they
        # go back to the thread's waiting questions, for another replica (or this
        # service's next process) to run.
        for run in list(self.runs.values()):
            if run.state is RunState.QUEUED:
                run.stop(RunState.HANDED_OVER)
        await self._wait_tasks(grace_s)

    async def interrupt(self) -> None:
        """Stop what still goes on after the grace period. Runs end as "Interrupted by a
        restart" (never "Cancelled": nobody cancelled them); the wait for their last
        surface calls is bounded."""
        self.accepting = False
        still = [t for t in self._tasks if not t.done()]
        if not still:
            return
        if self.runs:
            logger.warning("interrupting %d run(s) still going after the grace", len(self.runs))
        for task in still:
            task.cancel()
        if pending := await self._wait_tasks(INTERRUPT_WAIT_S):
            logger.warning("%d task(s) did not end within %.0f s", pending, INTERRUPT_WAIT_S)

    async def _wait_tasks(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for the owned tasks; how many still run then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (pending := [t for t in self._tasks if not t.done()]) and (
            remaining := deadline - loop.time()
        ) > 0:
            await asyncio.wait(pending, timeout=remaining)
        return len([t for t in self._tasks if not t.done()])

    async def stop_watching(self) -> None:
        watches = [w for w in (self._cancel_watch, self._steer_watch) if w is not None]
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)

    # ------------------------------------------------------------------ messages

    async def intake(
        self, message: Inbound, *, mentions_others: bool = False
    ) -> ThreadMessage | None:
        """Before the surface says a message was taken: whether it is for Baton (it is
        addressed to Baton, or it is talk in a thread whose turn runs now), and if so,
        store it.

        Storing it is the claim: a retry, or the same message arriving twice, finds it
        stored and starts nothing (a redelivered message whose run a restart
        interrupted gets a Retry offer). A database error propagates, so the surface
        does not say the message was taken, and it comes again.
        """
        if not self.accepting:
            return None
        if not SessionKey.parse(message.session_key).holds(message.channel_id, message.thread_ts):
            # A surface's bug, never a person's doing: a message must not reach another
            # thread's conversation (or steer its run).
            logger.warning("refused a message whose session is not its thread's")
            return None
        if not message.addressed:
            if message.thread_ts == message.ts:
                return None  # talk outside any thread steers nothing
            # People talking to each other, or beside an `@agent` run (which reads no
            # steering): not for Baton.
            lease = await self._lease_of(message.session_key)
            if lease is None or lease.direct or mentions_others:
                return None
        stored = await self.inbox.receive(message, holder=self.instances.id)
        if stored is None:
            await self._redelivered(message.channel_id, message.ts)
        return stored

    async def _lease_of(self, session_key: str) -> Lease | None:
        local = self.threads.get(session_key)
        if local is not None:
            return Lease(session_key, self.instances.id, local.run_id, local.direct)
        return await self.inbox.holder(session_key, alive=await self.instances.alive())

    async def dispatch(self, message: ThreadMessage) -> None:
        """After the surface answered: who may start runs (and steer them) is checked
        before anything else happens, a refusal going to that person alone. Then the
        message joins the thread's running turn (here or on another replica), or starts
        the thread's turn, or waits for it."""
        key = SessionKey.parse(message.session_key)
        local = self.threads.get(key.key)
        lease = await self._lease_of(key.key)
        refusal = await self._refusal(message, checks_budget=lease is None)
        if refusal is not None:
            await self.inbox.move([message.id], REFUSED, only_from=[NEW])
            await self._wake(key)  # what came after it in the thread waited for this check
            where = Where(message.channel_id, message.thread_ts)
            if message.trigger is not None:
                # Nobody asked in the thread: its owner's refusal is the thread's to read.
                await self.surface.say(where, trigger_refusal(message.trigger, refusal))
                end = RunEnd(outcome=RunOutcome.REFUSED, cause=StopCause.ACCESS)
                await self._trigger_ended(message.trigger, None, where, end)
            elif message.addressed:
                await self.surface.refuse(
                    where, user_id=message.user_id, refusal=refusal, is_dm=message.is_dm
                )
            else:
                # Talk from someone who may not start runs does not steer one either.
                logger.info(
                    "not steering with a message from %s: %s", message.user_id, refusal.reason
                )
            return
        fresh = self.surface.clean(message.text).strip().lower() in FRESH_START
        if message.is_dm and lease is None and fresh:
            await self.inbox.move([message.id], DONE, only_from=[NEW])
            await self._start_fresh(key, Where(message.channel_id, message.thread_ts))
            return
        if not await self.inbox.move([message.id], PENDING, only_from=[NEW]):
            return  # another replica took it over meanwhile (it took this one for dead)
        if local is not None or (lease is not None and lease.owner != self.instances.id):
            await self._wake(key)
        else:
            await self.take_turns(key)

    async def _refusal(self, message: ThreadMessage, *, checks_budget: bool) -> Refusal | None:
        """Why `message`'s sender may not act on it now; None if they may."""
        try:
            refusal = await self.access.may_start(
                user_id=message.user_id,
                channel_id=message.channel_id,
                is_dm=message.is_dm,
                team_id=message.team_id if message.team_id != "-" else None,
                user_team=message.user_team,
                enterprise_id=message.enterprise_id,
            )
            if refusal is None and checks_budget and message.addressed:
                refusal = await self.parts.budgets.refusal(
                    user_id=message.user_id, channel_id=message.channel_id
                )
            return refusal
        except Exception as exc:
            # Who sent it could not be checked (the platform or the database failing):
            # nothing runs on it, and its sender is told to ask again.
            logger.exception("could not check who may act on message %s", message.id)
            return Refusal(
                reason="check_failed",
                text=self.redact(
                    f"I could not check who may ask me ({type(exc).__name__}); "
                    "please ask again in a moment."
                ),
            )

    async def _wake(self, key: SessionKey) -> None:
        """Have the thread's running turn read what waits for it: here at once, on
        another replica through a signal."""
        local = self.threads.get(key.key)
        if local is not None:
            await self._deliver(local)
        else:
            await self.signals.notify("steer", key.key)

    async def _start_fresh(self, key: SessionKey, where: Where) -> None:
        """Put a DM's conversation aside: the next message starts a new one."""
        archived = await self.parts.sessions.archive(key)
        await self.surface.say(
            where,
            "Starting fresh: I've put our earlier conversation aside."
            if archived
            else "Starting fresh: there was no earlier conversation to put aside.",
        )

    # ------------------------------------------------------------------ turns

    async def take_turns(self, key: SessionKey) -> None:
        """Run the thread's turns while questions wait for them, holding its lease; if
        another process holds it, that one runs them (it is woken to look)."""
        while self.accepting:
            run_id = uuid.uuid4().hex[:12]
            alive = await self.instances.alive()
            if not await self.inbox.lease(
                key.key, owner=self.instances.id, run_id=run_id, alive=alive
            ):
                await self.signals.notify("steer", key.key)
                return
            try:
                taken = await self.inbox.take(
                    key.key, run_id=run_id, holder=self.instances.id, questions_only=True
                )
                if taken:
                    turn = self.spawn(self._turn(key, taken[0], run_id), f"turn-{run_id}", run=True)
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
        run = ActiveRun(
            run_id=run_id,
            key=key,
            where=Where(question.channel_id, question.thread_ts),
            user_id=question.user_id,
            is_dm=question.is_dm,
            direct=parse_direct_agent(self.surface.clean(question.text)) is not None,
            team_id=question.user_team,
            author_id=question.author_id,
            trigger=question.trigger,
        )
        if run.direct:
            await self.inbox.mark_direct(key.key, run_id)
        self.runs[run.run_id] = run
        self.threads[key.key] = run
        run.task = asyncio.current_task()  # type: ignore[assignment]
        self._watch_runs()
        end = RunEnd(outcome=RunOutcome.FAILED)
        try:
            session = await self.parts.sessions.get_or_create(key)
            run.session_id = session.id
            await self.run_store.start(
                run_id=run.run_id,
                owner=self.instances.id,
                session_id=session.id,
                channel_id=run.where.channel_id,
                thread_ts=run.where.thread_ts,
                user_id=run.user_id,
                state="queued",
                trigger=run.trigger,
            )
            await self._deliver(run)  # what came in while the lease was taken
            end = await execute(
                run,
                self._run_parts(),
                ts=question.ts,
                text=question.text,
                files=list(question.files),
            )
        except asyncio.CancelledError:
            cancelled = run.state is RunState.CANCELLED
            end = RunEnd(outcome=RunOutcome.CANCELLED if cancelled else RunOutcome.INTERRUPTED)
            raise
        finally:
            self.runs.pop(run.run_id, None)
            if self.threads.get(key.key) is run:
                self.threads.pop(key.key, None)
            await asyncio.shield(self._end_turn(run))
            if run.trigger is not None:
                await asyncio.shield(self._trigger_ended(run.trigger, run.run_id, run.where, end))

    async def _trigger_ended(
        self, trigger: str, run_id: str | None, where: Where, end: RunEnd
    ) -> None:
        """Tell the triggers how a run one of them started ended; never raises."""
        if self.parts.trigger_ended is None:
            return
        try:
            await self.parts.trigger_ended(
                TriggerEnd(trigger=trigger, run_id=run_id, where=where, end=end)
            )
        except Exception:
            logger.exception("could not record how the run of %s ended", trigger)

    def _run_parts(self) -> RunParts:
        parts = self.parts
        return RunParts(
            surface=self.surface,
            admission=self.admission,
            budgets=parts.budgets,
            usage=parts.usage,
            tokens_per_run=parts.limits.tokens_per_run,
            redact=self.redact,
            conversations_for=parts.conversations_for,
            agents_for=parts.agents_for,
            set_progress=self.run_store.set_progress,
            free_slot=self._free_slot,
            spawn=self.spawn,
            accepting=lambda: self.accepting,
            workbench_for=parts.workbench_for,
            tools_ready=parts.tools_ready,
            tracing=parts.tracing,
        )

    async def _free_slot(self, run_id: str) -> None:
        """The run's work is over: its record is done, and a run waiting for its slot
        of `limits` (here, or on another replica through the signal) starts now."""
        if run_id in self._freed:
            return
        self._freed.add(run_id)
        await self.run_store.finish(run_id)
        self.admission.release()

    async def _end_turn(self, run: ActiveRun) -> None:
        await self._free_slot(run.run_id)  # when the run ended before its work began
        self._freed.discard(run.run_id)
        if run.state is RunState.HANDED_OVER:
            # It never started: its question (and what reached it) waits again, in the
            # thread's order, and whoever runs the thread next reads it all.
            async with run.handing:
                run.ended = True
                held = await self.inbox.of_run(run.run_id, states=[TAKEN])
                await self.inbox.move([m.id for m in held], PENDING, only_from=[TAKEN])
            await self.signals.notify("steer", run.key.key)
            return
        cancelled = run.state is RunState.CANCELLED
        lost = run.state is RunState.LOST
        interrupted = lost or (not self.accepting and not cancelled)
        # What reached the run but was never read, and what waited undelivered; a
        # message being handed to it now is waited for (taken for the run, it is read
        # here or by nobody).
        async with run.handing:
            run.ended = True
            leftovers = list(run.steering)
            run.take_inbox()
            if not lost:
                waiting = await self.inbox.take(
                    run.key.key, run_id=run.run_id, holder=self.instances.id, questions_only=False
                )
                leftovers += [Steering(m.id, m.user_id, m.text, m.addressed) for m in waiting]
        # Questions that came too late for this run are the thread's next turn (on
        # this replica or, when this one is stopping, another); talk nobody read is
        # dropped, and its authors told so.
        again = [s.message_id for s in leftovers if s.addressed and not cancelled]
        unread = [s for s in leftovers if s.message_id not in again]
        await self.inbox.move(again, PENDING, only_from=[TAKEN])
        await self.inbox.move([s.message_id for s in unread], DROPPED, only_from=[TAKEN])
        if not lost:
            await self.inbox.end_run(run.run_id, INTERRUPTED_STATE if interrupted else DONE)
        if unread:
            why = (
                "the run was cancelled"
                if cancelled
                else (
                    "Baton is restarting"
                    if interrupted or not self.accepting
                    else "the run ended first"
                )
            )
            authors = sorted({s.author for s in unread})
            self.spawn(
                self.surface.not_handled(run.where, authors=authors, why=why),
                f"not-handled-{run.run_id}",
            )
        if again and not self.accepting:
            await self.signals.notify("steer", run.key.key)  # for another replica

    # ------------------------------------------------------------------ steering

    async def _deliver(self, run: ActiveRun) -> None:
        """Hand the thread's waiting messages to `run` (in their order), each
        acknowledged to its author. An `@agent` run reads none: they wait for its end
        (its questions are the thread's next turn)."""
        async with run.handing:
            if run.ended:
                return  # its end took what waited; the rest is the thread's next turn
            taken = await self.inbox.take(
                run.key.key, run_id=run.run_id, holder=self.instances.id, questions_only=False
            )
            for message in taken:
                await self._steer(run, message)

    async def _steer(self, run: ActiveRun, message: ThreadMessage) -> None:
        """Pass a message (and its files) to the running agent; its author is told."""
        # Its author: a review from the forge steers as the forge's user, not as the
        # person whose turn it is.
        speaker = await self.surface.speaker(message.author_id or message.user_id)
        clean = self.surface.clean(message.text)
        read = await self.surface.prompt(clean, list(message.files))
        said = f"{speaker}, while you were working" if speaker else "while you were working"
        run.inbox.append(
            ChatMessage(role="user", content=f"[{said}] {read.text}", images=list(read.images))
        )
        run.steering.append(Steering(message.id, message.user_id, clean, message.addressed))
        await self.surface.acknowledge(message, waits=run.direct)

    def _watch_runs(self) -> None:
        """While this process runs turns: cancels and steering that reached other
        replicas reach them (woken by a signal, or by polling at worst)."""
        if self._cancel_watch is None or self._cancel_watch.done():
            self._cancel_watch = asyncio.create_task(self._cancels(), name="run-cancel-watch")
        if self._steer_watch is None or self._steer_watch.done():
            self._steer_watch = asyncio.create_task(self._steering(), name="run-steer-watch")

    async def _cancels(self) -> None:
        """Cancel runs of this process that a click on another replica asked to stop."""
        woken = self.signals.subscribe("cancel")
        try:
            while self.runs:
                await woken.wait(CANCEL_WATCH_S)
                try:
                    requests = await self.run_store.cancel_requests(self.instances.id)
                except Exception:
                    logger.exception("could not read cancel requests")
                    continue
                for record in requests:
                    if record.cancel_requested_by and (run := self.runs.get(record.id)):
                        run.stop(RunState.CANCELLED, by=record.cancel_requested_by)
        finally:
            woken.close()

    async def _steering(self) -> None:
        """Hand this process's runs the messages other replicas stored for their threads."""
        woken = self.signals.subscribe("steer")
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

    # ------------------------------------------------------------------ cancel

    async def run_info(self, run_id: str) -> RunInfo | None:
        """Run `run_id` as it is known: here, or in the database (another replica's,
        or one that ended)."""
        local = self.runs.get(run_id)
        if local is not None:
            return RunInfo(run_id, local.where, local.user_id, going=True)
        record = await self.run_store.get(run_id)
        if record is None:
            return None
        where = Where(record.channel_id, record.thread_ts)
        return RunInfo(run_id, where, record.user_id, going=record.state in GOING)

    async def cancel(self, run_id: str, *, by: str) -> Cancelled:
        """Stop run `run_id` for person `by` (their authority is the surface's to check):
        here at once, on another replica through the database and a signal."""
        local = self.runs.get(run_id)
        if local is not None and local.stop(RunState.CANCELLED, by=by):
            return Cancelled.HERE
        if await self.run_store.request_cancel(run_id, by=by):
            await self.signals.notify("cancel", run_id)
            return Cancelled.ELSEWHERE
        return Cancelled.OVER

    def on_lost(self) -> None:
        """This process was taken for dead while it stalled (its heartbeat says so):
        the runs the others closed meanwhile stop here too, so none runs twice."""
        self.spawn(self._stop_lost_runs(), "stop-lost-runs")

    async def _stop_lost_runs(self) -> None:
        for run in list(self.runs.values()):
            record = await self.run_store.get(run.run_id)
            if record is None or record.state == FINISHED:
                logger.warning("run %s was closed by another replica: stopping it", run.run_id)
                run.stop(RunState.LOST)

    # ------------------------------------------------------------ Retry, recovery

    async def _redelivered(self, channel: str, ts: str) -> None:
        """A message Baton already took came again. Swallowed, unless its run was
        interrupted by a restart (then a Retry is offered once) or the process that
        took it died before looking at it (then it is handled here)."""
        stored = await self.inbox.find(channel, ts)
        if stored is None:
            return
        if stored.state == INTERRUPTED_STATE and stored.run_id:
            if await self.inbox.move([stored.id], OFFERED, only_from=[INTERRUPTED_STATE]):
                where = Where(stored.channel_id, stored.thread_ts)
                self.spawn(
                    self.surface.offer_retry(where, stored.run_id), f"offer-retry-{stored.run_id}"
                )
        elif stored.state == NEW and stored.holder not in await self.instances.alive():
            self.spawn(self._dispatch_unclaimed(stored), f"redelivered-{stored.id}", run=True)

    async def retry(
        self,
        run_id: str,
        *,
        user_id: str,
        team_id: str | None,
        enterprise_id: str | None,
        user_team: str | None,
    ) -> str | None:
        """Run again what run `run_id` was asked before a restart interrupted it, with the
        thread's history so far, as `user_id`'s turn. None when it starts (or waits for
        the thread's turn); else why not, for that person alone."""
        record = await self.run_store.get(run_id)
        if record is None:
            return "That run is not known here."
        refusal = await self.access.may_start(
            user_id=user_id,
            channel_id=record.channel_id,
            is_dm=record.channel_id.startswith("D"),
            team_id=team_id,
            user_team=user_team,
            enterprise_id=enterprise_id,
        )
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
            question = message is interrupted[0]
            copy = await self.inbox.receive(
                Inbound(
                    session_key=message.session_key,
                    channel_id=message.channel_id,
                    thread_ts=message.thread_ts,
                    ts=f"{message.ts}~{suffix}",
                    user_id=user_id if question else message.user_id,
                    author_id=message.author_id,
                    text=message.text,
                    team_id=message.team_id,
                    user_team=user_team or message.user_team,
                    enterprise_id=message.enterprise_id,
                    files=message.files,
                    is_dm=message.is_dm,
                    addressed=message.addressed or question,
                ),
                holder=self.instances.id,
                state=PENDING,
            )
            first = first or copy
        if first is not None:
            key = SessionKey.parse(first.session_key)
            local = self.threads.get(key.key)
            if local is not None:
                await self._deliver(local)
            else:
                self.spawn(self.take_turns(key), f"retry-{run_id}", run=True)
        return None

    async def pick_up(self, *, alive: Collection[str]) -> None:
        """Questions no live process is answering: a dead receiver's unread messages are
        read here; threads whose questions wait with nobody running their turn (their
        process died or stopped) get their turn here."""
        if not self.accepting:
            return
        for message in await self.inbox.unclaimed(alive=alive):
            if self._ours(message.session_key):
                self.spawn(self._dispatch_unclaimed(message), f"unclaimed-{message.id}", run=True)
        for message in await self.inbox.waiting(alive=alive):
            if not self._ours(message.session_key):
                continue
            key = SessionKey.parse(message.session_key)
            if key.key not in self.threads and key.key not in self._starting:
                self._starting.add(key.key)
                self.spawn(self._start_waiting(key), f"waiting-{message.id}", run=True)

    def _ours(self, session_key: str) -> bool:
        """Whether a session is this machine's surface's: the others' are theirs."""
        return self.surface.serves(SessionKey.parse(session_key))

    async def _dispatch_unclaimed(self, message: ThreadMessage) -> None:
        if await self.inbox.take_over(message, holder=self.instances.id):
            await self.dispatch(message)

    async def _start_waiting(self, key: SessionKey) -> None:
        try:
            await self.take_turns(key)
        finally:
            self._starting.discard(key.key)

    async def close_orphaned_runs(self) -> None:
        """Runs whose process is gone: their thread is told the run was interrupted by a
        restart, with a Retry that runs its question again (one replica does this for
        each run: the one that closes it)."""
        for record in await self.run_store.orphans(alive=await self.instances.alive()):
            session = await self.parts.sessions.get(record.session_id)
            if session is not None and not self._ours(session.key):
                continue  # another surface's (a terminal chat beside Slack, on one database)
            if not await self.run_store.close(record.id):
                continue  # another replica closed it first
            retryable = await self.inbox.end_run(record.id, INTERRUPTED_STATE) > 0
            await self.surface.show_interrupted(record, retryable=retryable)

    @property
    def running(self) -> int:
        """How many runs this machine has going (for health reports)."""
        return len(self.runs)

    async def triggered_runs(
        self, *, channel_id: str | None = None, user_id: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        """Runs a trigger started, newest first: of one channel, of one owner, or both."""
        return await self.run_store.triggered(channel_id=channel_id, user_id=user_id, limit=limit)

    async def prune(self) -> None:
        """Forget the thread messages kept past their week."""
        await self.inbox.prune()

    async def tidy(self) -> None:
        """Take care of what processes that are gone left: their runs, leases and
        messages (every replica does this, every second or so)."""
        await self.close_orphaned_runs()
        alive = await self.instances.alive()
        await self.inbox.forget_dead_leases(alive=alive)
        await self.pick_up(alive=alive)

    # ------------------------------------------------------------ results, tasks

    async def post_task_finished(self, record: TaskRecord) -> None:
        """A background task ended: tell the thread that started it (its result reaches
        the model in the thread's next turn)."""
        await self.results.post(record)
