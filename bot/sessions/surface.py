"""What the turn machine needs of a surface (Slack, the terminal): two small interfaces.

A `Surface` is one platform: it says things in threads, reads what people attached,
names people, asks them to approve, and opens a `TurnView` for each run. A
`TurnView` shows one run as it goes: its events, its children's, the queue, its answer
and its end. Neither decides anything: what runs, when, and how it ends is the turn
machine's (bot/sessions/turns.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.access.admission import QueuePosition
from bot.access.refusal import Refusal
from bot.engine import ApprovalFunc, RunEvent
from bot.engine.messages import ImagePart
from bot.outcomes import RunEnd
from bot.sessions.workbench import PullContext, WorkChange
from bot.store import SessionKey, SessionRecord
from bot.store.runs import RunRecord
from bot.store.tasks import TaskRecord
from bot.store.thread_inbox import ThreadMessage
from bot.subagents import SubAgentEvent


@dataclass(frozen=True, slots=True)
class Where:
    """A thread of a surface: where a run answers."""

    channel_id: str
    thread_ts: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """A message as the model reads it: its text (naming every attached file, with the
    text files' content) and the images to send."""

    text: str
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTicket:
    """What a surface knows of a run it shows."""

    run_id: str
    where: Where
    user_id: str  # whose turn it is (who may decide its approvals, whose budget pays)
    team_id: str | None  # the team of that person (a stream goes to them)
    session_id: int
    is_dm: bool


class TurnView(Protocol):
    """One run as a surface shows it, from its start to its end."""

    async def open(self) -> str | None:
        """Show that the run is there; a handle (a message ts) kept in its record, so
        that another process can show its end if this one dies."""
        ...

    def queued(self, place: QueuePosition) -> None:
        """The run waits for a slot of `limits`."""
        ...

    def working(self) -> None:
        """The run has its slot and works."""
        ...

    def show(self, event: RunEvent) -> None:
        """An event of the main agent (a `ModelWaiting` that discards text voids the
        answer shown so far: the retried call writes it again)."""
        ...

    def show_child(self, update: SubAgentEvent) -> None:
        """An event of a foreground sub-agent of the main agent."""
        ...

    def show_direct(self, update: SubAgentEvent) -> None:
        """An event of an `@agent` run's agent: its words are the answer."""
        ...

    async def answer(
        self,
        text: str,
        *,
        end: RunEnd | None = None,
        agent: str | None = None,
        task_id: str | None = None,
    ) -> None:
        """The run's final answer, whole (what was shown of it as it came included),
        with how the run ended (`end`: what `finish` will be told) for a surface that
        shows the two together; an `@agent` run's names its agent and task."""
        ...

    async def finish(self, end: RunEnd) -> None:
        """The run is over: show how it ended (and keep what it wrote, if it had no
        answer). Never raises."""
        ...


class Surface(Protocol):
    """A platform people talk to Baton on."""

    # The kind of session this surface's conversations are (bot/store/sessions.py).
    kind: str

    def serves(self, key: SessionKey) -> bool:
        """Whether the conversation `key` is this surface's to run and recover (a
        terminal serves its one session, not every chat's)."""
        ...

    def clean(self, text: str) -> str:
        """`text` without the mentions of Baton it holds."""
        ...

    async def speaker(self, user_id: str) -> str:
        """How the model is told who wrote a message ("Alice <@U1>"); empty where only
        one person talks (the terminal)."""
        ...

    async def pull_context(self, where: Where, user_id: str) -> PullContext:
        """Where a pull request's work came from: the thread's link and who asked."""
        ...

    async def co_author(self, user_id: str) -> tuple[str, str] | None:
        """A person's name and email for a commit's `Co-authored-by`; None if unknown."""
        ...

    async def prompt(self, text: str, files: Sequence[dict[str, Any]]) -> Prompt:
        """A message with what was attached to it, as the model reads it."""
        ...

    async def thread_context(self, where: Where, before_ts: str) -> str | None:
        """What was said in the thread before `before_ts`, for a first turn; None if
        nothing (or the thread is the message itself)."""
        ...

    async def acknowledge(self, message: ThreadMessage, *, waits: bool) -> None:
        """Tell the author that their message reached the running agent, or (`waits`)
        that it was taken and waits for the running `@agent` run's end."""
        ...

    async def refuse(self, where: Where, *, user_id: str, refusal: Refusal, is_dm: bool) -> None:
        """Tell that person alone why nothing starts."""
        ...

    async def say(self, where: Where, text: str) -> None:
        """A short note in the thread."""
        ...

    async def not_handled(self, where: Where, *, authors: Sequence[str], why: str) -> None:
        """Messages that reached a run which ended (`why`) before reading them: tell
        their authors they were not acted on."""
        ...

    async def report(self, where: Where, text: str) -> None:
        """What went wrong, in the thread (escaped, whole)."""
        ...

    def describe_failure(self, exc: Exception) -> str | None:
        """What a failure of the surface itself means, in words; None for others."""
        ...

    async def offer_retry(self, where: Where, run_id: str) -> None:
        """Offer to run again a run a restart interrupted."""
        ...

    async def offer_change(self, where: Where, run_id: str, change: WorkChange) -> None:
        """Show what a run changed on the thread's branch, with what people can do
        with it (open a pull request, see the diff, discard it)."""
        ...

    async def show_interrupted(self, record: RunRecord, *, retryable: bool) -> None:
        """The run of a process that is gone ended: say so where it was shown."""
        ...

    def view(self, run: RunTicket) -> TurnView:
        """The view of a run about to start."""
        ...

    def approval(self, run: RunTicket) -> ApprovalFunc:
        """How the run's risky tool calls ask a person."""
        ...

    def where_of(self, session: SessionRecord) -> Where | None:
        """The thread of a stored session of this surface; None if it is another's."""
        ...

    def results_window_s(self) -> float:
        """How long finished background results may wait for their still running
        siblings, to go out in one message (the surface's pace between two messages)."""
        ...

    async def post_results(self, where: Where, waiting: list[TaskRecord]) -> None:
        """Post the next message of finished background tasks, taking from the front of
        `waiting` those it holds (at least one)."""
        ...
