"""One run of a thread: its state, and its work from the queue to its end.

A run answers one question. It waits for a slot of `limits`, checks the asker's
budget again, runs the main agent (or, for `@agent …`, that agent directly), shows
its events through its `TurnView`, and ends with a `RunEnd`: an outcome and a cause,
from which every surface's words and the `baton_runs` metric are derived.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from bot import metrics
from bot.access.admission import Admission, QueuePosition, RunNotQueued
from bot.access.budgets import DailyBudgets, RunBudget
from bot.access.refusal import Refusal
from bot.engine import ChatMessage, Compacted, Done, ErrorEvent
from bot.outcomes import ChildUsage, RunEnd, RunOutcome, StopCause
from bot.redaction import Redactor
from bot.sessions.conversations import Conversations, UnknownAgentError
from bot.sessions.main_agent import Place
from bot.sessions.surface import Prompt, RunTicket, Surface, TurnView, Where
from bot.sessions.workbench import Workbench
from bot.store import SessionKey
from bot.store.usage import UsageStore
from bot.subagents import AgentRegistry, SubAgentEvent
from bot.tracing import DISABLED, INPUT_TOKENS, OUTPUT_TOKENS, Span, Tracing, failed

logger = logging.getLogger(__name__)

_DIRECT_AGENT = re.compile(r"@([A-Za-z0-9][\w.-]*)(?:\s+(.*))?", re.DOTALL)
_AGENT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")


def trigger_refusal(trigger: str, refusal: Refusal) -> str:
    """What a thread a trigger started is told when its owner may not run it now."""
    kind, _, name = trigger.partition(":")
    return (
        f"⊘ Not run: the {kind} *{name}* runs for its owner, who may not start runs now. "
        f"{refusal.text}"
    )


def parse_direct_agent(text: str) -> tuple[str, str] | None:
    """Read `@name task text` at the start of a message (its mentions of Baton removed).

    A typed `@explore` that is no Slack user arrives as plain text; a real user
    mention arrives as `<@U…>` and is never an agent.

    Returns:
        (agent name, the rest stripped), or None when the text does not start so.
    """
    match = _DIRECT_AGENT.fullmatch(text.strip())
    if match is None or not _AGENT_NAME.fullmatch(match.group(1)):
        return None
    return match.group(1), (match.group(2) or "").strip()


class RunState(StrEnum):
    """Where a run is. A run has one state; how it ended is its `RunEnd`."""

    QUEUED = "queued"  # waiting for a slot of `limits` (or not yet started)
    WORKING = "working"  # admitted: it does its work
    CANCELLED = "cancelled"  # a person (or the parent process) stopped it
    LOST = "lost"  # the other replicas took this process for dead and closed it
    HANDED_OVER = "handed_over"  # stopped before it started, for another process to run


@dataclass(slots=True)
class Steering:
    """A message that reached a run while it worked, until the run reads it."""

    message_id: int
    author: str
    text: str
    addressed: bool  # it asked Baton: if the run never reads it, it is the next turn


@dataclass(slots=True)
class ActiveRun:
    """A run going on in a thread; messages for it wait in `inbox`."""

    run_id: str
    key: SessionKey
    where: Where
    user_id: str
    is_dm: bool
    team_id: str | None = None  # the team of the person who asked (their streams go to them)
    author_id: str | None = None  # who wrote the question, when not `user_id` (a Retry)
    direct: bool = False  # an `@agent` run: it reads no steering; messages wait for its end
    trigger: str | None = None  # what started it when no person did (`schedule:<name>`, …)
    session_id: int | None = None  # set once the session is found, before the run starts
    state: RunState = RunState.QUEUED
    stopped_by: str | None = None  # who cancelled it
    inbox: list[ChatMessage] = field(default_factory=list)
    steering: list[Steering] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    # Held while messages are handed to the run, and by its end: a message taken for it
    # is in `steering` before the end reads what was never read (else it was lost).
    handing: asyncio.Lock = field(default_factory=asyncio.Lock)
    ended: bool = False  # its end read what reached it: nothing more is handed to it

    def take_inbox(self) -> list[ChatMessage]:
        taken = list(self.inbox)
        self.inbox.clear()
        self.steering.clear()
        return taken

    def stop(self, state: RunState, *, by: str | None = None) -> bool:
        """Stop the run's work, to end in `state`; False if it is not going on here."""
        if self.task is None or self.task.done():
            return False
        self.state = state
        self.stopped_by = by
        self.task.cancel()
        return True

    def ticket(self) -> RunTicket:
        assert self.session_id is not None
        return RunTicket(
            run_id=self.run_id,
            where=self.where,
            user_id=self.user_id,
            team_id=self.team_id,
            session_id=self.session_id,
            is_dm=self.is_dm,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunParts:
    """What a run's work needs, handed in by the turn machine."""

    surface: Surface
    admission: Admission
    budgets: DailyBudgets
    usage: UsageStore
    tokens_per_run: int
    redact: Redactor
    conversations_for: Callable[[str | None], Conversations]
    agents_for: Callable[[str | None], AgentRegistry]
    set_progress: Callable[[str, str], Awaitable[None]]
    spawn: Callable[..., asyncio.Task[object]]
    # Whether this process still takes work (False once shutdown began).
    accepting: Callable[[], bool]
    # A channel's threads' worktrees, when its workspace has a git remote.
    workbench_for: Callable[[str | None], Workbench | None] = lambda _channel: None
    # Frees the run's slot of `limits` for the next queued run (the run record is done).
    free_slot: Callable[[str], Awaitable[None]]
    # Waits (bounded) until the tools of servers still starting can be offered.
    tools_ready: Callable[[], Awaitable[None]] | None = None
    # The run is a span, its model calls, tools and sub-agents under it (traces on).
    tracing: Tracing = DISABLED


async def execute(run: ActiveRun, parts: RunParts, *, ts: str, text: str, files: list) -> RunEnd:
    """Do the work of `run`, which answers `text` (message `ts`, with `files`); how it
    ended."""
    with parts.tracing.run(
        run_id=run.run_id,
        conversation=run.key.key,
        channel_id=run.where.channel_id,
        thread_ts=run.where.thread_ts,
        user_id=run.user_id,
    ) as span:
        return await _execute(run, parts, span, ts=ts, text=text, files=files)


async def _execute(
    run: ActiveRun, parts: RunParts, span: Span, *, ts: str, text: str, files: list
) -> RunEnd:
    surface = parts.surface
    clean = surface.clean(text)
    direct = parse_direct_agent(clean)
    agents = parts.agents_for(run.where.channel_id)
    if direct is not None and agents.get(direct[0]) is None:
        available = ", ".join(f"`{n}`" for n in agents.names())
        said = f"I have no agent named `{direct[0]}`. Available agents: {available}."
        await surface.say(run.where, said)
        return RunEnd(outcome=RunOutcome.FAILED, cause=StopCause.UNKNOWN_AGENT, error=said)
    ticket = run.ticket()
    view = surface.view(ticket)

    async def show_view() -> None:
        handle = await view.open()
        if handle is not None:
            await parts.set_progress(run.run_id, handle)

    # The work does not wait for the view: in a busy channel Slack takes about a
    # message a second, and the model can be thinking meanwhile.
    showing = parts.spawn(show_view(), f"progress-{run.run_id}")
    end = RunEnd(outcome=RunOutcome.FAILED)
    try:
        queued = False

        async def show_queued(place: QueuePosition) -> None:
            nonlocal queued
            queued = True
            view.queued(place)

        await parts.admission.wait(run.run_id, run.user_id, on_queued=show_queued)
        run.state = RunState.WORKING
        # Checked again as the turn starts: a run that waited in the queue, or a
        # question that waited for the thread's turn (its asker's budget was not
        # checked when it arrived beside a running turn), may find it spent.
        refusal = await parts.budgets.refusal(user_id=run.user_id, channel_id=run.where.channel_id)
        if refusal is not None:
            cause = StopCause.BUDGET_SPENT_WAITING if queued else StopCause.BUDGET_SPENT
            end = RunEnd(outcome=RunOutcome.REFUSED, cause=cause)
            if run.trigger is not None:
                # Nobody asked in the thread: its owner's refusal is the thread's to read.
                await surface.say(run.where, trigger_refusal(run.trigger, refusal))
            else:
                await surface.refuse(
                    run.where, user_id=run.user_id, refusal=refusal, is_dm=run.is_dm
                )
            return end
        view.working()
        if parts.tools_ready is not None:
            await parts.tools_ready()  # right after start-up: MCP servers still starting
        work = _Work(run, parts, view, ticket)
        if direct is not None:
            prompt = await surface.prompt(direct[1], files)
            end = await work.agent(direct[0], prompt)
        else:
            prompt = await surface.prompt(clean, files)
            end = await work.main(ts.partition("~")[0], prompt)
    except asyncio.CancelledError:
        end = _stopped(run, accepting=parts.accepting())
        raise
    except RunNotQueued:
        end = RunEnd(outcome=RunOutcome.INTERRUPTED, cause=StopCause.QUEUE_CLOSED)
    except Exception as exc:
        logger.exception("run %s failed", run.run_id)
        said = surface.describe_failure(exc)
        reason = parts.redact(said or f"Something went wrong: {type(exc).__name__}: {exc}")
        end = RunEnd(outcome=RunOutcome.FAILED, cause=StopCause.ERROR, error=reason)
        await surface.report(run.where, reason)
    finally:
        _trace_end(span, end)
        # The work is over: its slot of `limits` goes to the next queued run now, not
        # after the surface has shown the end (Slack may take a while to).
        await asyncio.shield(parts.free_slot(run.run_id))
        # The view waits for what it was still opening, and shows the end in it.
        await asyncio.shield(view.finish(end))
        await asyncio.shield(asyncio.wait([showing]))
        metrics.record_run(end.outcome.value)
    return end


def _trace_end(span: Span, end: RunEnd) -> None:
    """How the run ended, on its span: the outcome and its cause, turns and tokens."""
    span.set_attribute("baton.run.outcome", end.outcome.value)
    if end.cause is not None:
        span.set_attribute("baton.run.cause", end.cause.value)
    if end.turns is not None:
        span.set_attribute("baton.run.turns", end.turns)
    span.set_attribute(INPUT_TOKENS, end.prompt_tokens)
    span.set_attribute(OUTPUT_TOKENS, end.completion_tokens)
    # With its sub-agents' (the two above are the main agent's own).
    span.set_attribute("baton.run.tokens", end.run_tokens)
    if end.outcome is RunOutcome.FAILED:
        failed(span, end.cause.value if end.cause is not None else "failed")


def _stopped(run: ActiveRun, *, accepting: bool) -> RunEnd:
    """The end of a run whose work was cancelled."""
    if run.state is RunState.HANDED_OVER:
        return RunEnd(outcome=RunOutcome.HANDED_OVER)
    if run.state is RunState.CANCELLED and run.stopped_by:
        return RunEnd(outcome=RunOutcome.CANCELLED, by=run.stopped_by)
    if run.state is RunState.LOST or not accepting:
        # Shutdown stopped it at the end of the grace period, or this process stalled
        # and the others closed the run as a dead replica's.
        return RunEnd(outcome=RunOutcome.INTERRUPTED, cause=StopCause.RESTART)
    return RunEnd(outcome=RunOutcome.CANCELLED)


class _Work:
    """The model's part of a run: the main agent's turn, or one agent's task."""

    def __init__(self, run: ActiveRun, parts: RunParts, view: TurnView, ticket: RunTicket):
        self.run = run
        self.parts = parts
        self.view = view
        self.ticket = ticket
        self.started = time.monotonic()
        self.budget = RunBudget(
            usage=parts.usage,
            limit=parts.tokens_per_run,
            run_id=run.run_id,
            user_id=run.user_id,
            channel_id=run.where.channel_id,
        )

    async def main(self, ts: str, prompt: Prompt) -> RunEnd:
        run, surface = self.run, self.parts.surface
        speaker = await surface.speaker(run.author_id or run.user_id)
        context = await self._thread_context(ts)
        children: dict[str, ChildUsage] = {}
        done: Done | None = None
        errors: list[str] = []

        def show_child(update: SubAgentEvent) -> None:
            if update.background:
                return  # background work reports when it finishes
            if isinstance(update.event, Done):
                tokens = update.event.usage.total_tokens
                children[update.task_id] = ChildUsage(update.task_id, update.agent, tokens)
            self.view.show_child(update)

        conversations = self.parts.conversations_for(run.where.channel_id)
        place = await self._place()
        try:
            async for event in conversations.run_turn(
                run.key,
                f"[{speaker}] {prompt.text}" if speaker else prompt.text,
                meter=self.budget,
                user_id=run.user_id,
                approval=surface.approval(self.ticket),
                progress=show_child,
                inbox=run.take_inbox,
                context=context,
                images=prompt.images,
                place=place,
            ):
                self.view.show(event)
                if isinstance(event, ErrorEvent):
                    errors.append(event.message)
                elif isinstance(event, Compacted) and event.newsworthy:
                    await surface.say(run.where, compaction_note(event))
                elif isinstance(event, Done):
                    done = event
            assert done is not None
            for message in errors:
                await surface.report(run.where, self.parts.redact(message))
            end = RunEnd(
                outcome=RunOutcome.of_stop(done.stop_reason),
                turns=done.turns,
                prompt_tokens=done.usage.prompt_tokens,
                completion_tokens=done.usage.completion_tokens,
                seconds=time.monotonic() - self.started,
                children=tuple(children.values()),
                run_tokens=self.budget.spent.total_tokens,
            )
            # The model's work is done: the next queued run need not wait for this
            # answer's turn in the channel.
            await self.parts.free_slot(run.run_id)
            await self.view.answer(done.final_text, end=end)
        finally:
            if place is not None:
                await asyncio.shield(self._keep_work(prompt.text))
        return end

    async def agent(self, agent: str, prompt: Prompt) -> RunEnd:
        run, surface = self.run, self.parts.surface
        if not prompt.text:
            await surface.say(
                run.where, f"Write the task after the agent's name: `@{agent} what to do`."
            )
            return RunEnd(outcome=RunOutcome.FAILED, cause=StopCause.NO_TASK)
        conversations = self.parts.conversations_for(run.where.channel_id)
        place = await self._place()
        try:
            outcome = await conversations.run_agent(
                run.key,
                agent,
                prompt.text,
                meter=self.budget,
                user_id=run.user_id,
                approval=surface.approval(self.ticket),
                progress=self.view.show_direct,
                images=prompt.images,
                place=place,
            )
        except UnknownAgentError as exc:
            await surface.report(run.where, str(exc))
            return RunEnd(outcome=RunOutcome.FAILED, cause=StopCause.UNKNOWN_AGENT)
        finally:
            if place is not None:
                await asyncio.shield(self._keep_work(f"@{agent} {prompt.text}"))
        body = outcome.text or "(no answer text)"
        if outcome.state != "completed":
            # The failure leads: what was shown is rewritten to say it first.
            body = f"✗ {self.parts.redact(outcome.error or outcome.state)}\n\n{body}"
        completed = outcome.state == "completed"
        end = RunEnd(
            outcome=RunOutcome.DONE if completed else RunOutcome.FAILED,
            agent=agent,
            agent_state=None if completed else outcome.state,
            turns=outcome.turns,
            prompt_tokens=outcome.usage.prompt_tokens,
            completion_tokens=outcome.usage.completion_tokens,
            seconds=time.monotonic() - self.started,
        )
        await self.parts.free_slot(run.run_id)
        await self.view.answer(body, end=end, agent=agent, task_id=outcome.task_id)
        return end

    async def _place(self) -> Place | None:
        """The thread's own worktree, on a workspace with a git remote, with what the
        agent's `open_pull_request` does there."""
        workbench = self.parts.workbench_for(self.run.where.channel_id)
        if workbench is None:
            return None
        place = await workbench.place(self.run.key, user_id=self.run.user_id)
        run, surface = self.run, self.parts.surface

        async def open_pull(title: str, body: str) -> tuple[bool, str]:
            # What the run changed so far is committed first: the PR holds it.
            await workbench.after_run(
                run.key,
                user_id=run.user_id,
                message=_commit_message(title),
                co_author=await surface.co_author(run.author_id or run.user_id),
            )
            context = await surface.pull_context(run.where, run.author_id or run.user_id)
            result = await workbench.open_pull(run.key, title=title, body=body, context=context)
            if result.ok:
                await surface.say(run.where, f"🔀 {result.text}")
            return result.ok, self.parts.redact(result.text)

        return replace(place, open_pull=open_pull)

    async def _keep_work(self, asked: str) -> None:
        """Commit what the run changed on the thread's branch and offer it to people;
        a failure is said in the thread (the files stay in the worktree)."""
        workbench = self.parts.workbench_for(self.run.where.channel_id)
        assert workbench is not None
        surface = self.parts.surface
        try:
            change = await workbench.after_run(
                self.run.key,
                user_id=self.run.user_id,
                message=_commit_message(asked),
                co_author=await surface.co_author(self.run.author_id or self.run.user_id),
            )
        except Exception as exc:
            logger.exception("run %s: could not keep its work", self.run.run_id)
            await surface.report(self.run.where, self.parts.redact(str(exc)))
            return
        if change is not None:
            await surface.offer_change(self.run.where, self.run.run_id, change)

    async def _thread_context(self, ts: str) -> str | None:
        """On a thread's first turn, what was said in it before Baton was asked."""
        run = self.run
        if run.where.thread_ts == ts:
            return None
        assert run.session_id is not None
        conversations = self.parts.conversations_for(run.where.channel_id)
        if await conversations.store.has_history(run.session_id):
            return None
        return await self.parts.surface.thread_context(run.where, ts)


def _commit_message(asked: str) -> str:
    """A commit's subject from what was asked: its first line, at most 72 characters."""
    first = next((line.strip() for line in asked.splitlines() if line.strip()), "")
    subject = first if len(first) <= 72 else first[:71].rstrip() + "…"
    return subject or "Work asked for in Slack"


def compaction_note(event: Compacted) -> str:
    """The short thread note saying that earlier messages were folded or left out."""
    return f"🗜 To fit the model's context window, I {event.describe()}."
