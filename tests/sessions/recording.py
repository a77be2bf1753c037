"""The turn machine on a surface that only records: no Slack, no terminal.

`RecordingSurface` implements `Surface` and `RecordingView` implements `TurnView`
(bot/sessions/surface.py); every call they get that says, shows or asks something is
kept as plain data, a `Call` (kind, where, payload, run id), in one list in the order
the machine made them (`clean`, `speaker` and `prompt` only read, and are not). An
approval asks the test: the request is recorded, and the decision comes from
`surface.decide` (by default, the next item of the `surface.decisions` queue).

`start_machine` builds what the surfaces build (bot/slack/surface.py, bot/chat.py):
Baton over `make_settings` with the model provider faked over its real HTTP
(`FakeOpenAI`), and a `TurnMachine` on the recording surface, with an access gate the
test controls (`Gate`: everyone may, unless refused by user). `Machine.send` hands a
message in as a surface does: `intake`, then `dispatch` spawned by the machine.

Sessions are Slack threads (`SessionKey.slack_thread`, kind "slack"), since
`TurnMachine._ours` compares a session's kind with `surface.kind`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from bot.access.admission import QueuePosition
from bot.access.refusal import Refusal
from bot.app import Baton, build_baton
from bot.engine import ApprovalDecision, ApprovalFunc, ApprovalRequest, RunEvent
from bot.outcomes import RunEnd
from bot.sessions.surface import Prompt, RunTicket, Surface, TurnView, Where
from bot.sessions.turns import TurnMachine
from bot.store import SessionKey, SessionRecord
from bot.store.runs import RunRecord
from bot.store.tasks import TaskRecord
from bot.store.thread_inbox import Inbound, ThreadMessage
from bot.subagents import SubAgentEvent
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest

KIND = "slack"
TEAM = "T0001"
BOT = "UBOT"
ALICE = "UALICE"
BOB = "UBOB"
CAROL = "UCAROL"
MAIN_MARK = "You are Baton"  # how the main agent's system prompt starts

_counter = itertools.count(1)


def next_ts() -> str:
    """A fresh Slack-like ts, increasing (threads are read in ts order)."""
    n = next(_counter)
    return f"{1_700_000_000 + n}.{n:06d}"


def thread_key(thread_ts: str, channel: str = "C1") -> SessionKey:
    return SessionKey.slack_thread(team_id=TEAM, channel_id=channel, thread_ts=thread_ts)


class Call(NamedTuple):
    """One call the machine made on the surface or on a run's view."""

    kind: str
    where: Where | None
    payload: Any
    run_id: str | None = None  # for a view's calls (and the approvals of a run)


@dataclass(frozen=True, slots=True)
class Shown:
    """What `TurnView.answer` was given."""

    text: str
    agent: str | None = None
    task_id: str | None = None


class RecordingView:
    """A run's view: each call is recorded in its surface's list, with the run's id."""

    def __init__(self, surface: RecordingSurface, ticket: RunTicket) -> None:
        self.surface = surface
        self.ticket = ticket
        self.finished = asyncio.Event()
        self.end: RunEnd | None = None

    def _record(self, kind: str, payload: Any = None) -> None:
        self.surface.calls.append(Call(kind, self.ticket.where, payload, self.ticket.run_id))

    @property
    def calls(self) -> list[Call]:
        return [c for c in self.surface.calls if c.run_id == self.ticket.run_id]

    @property
    def kinds(self) -> list[str]:
        return [c.kind for c in self.calls]

    def of(self, kind: str) -> list[Any]:
        return [c.payload for c in self.calls if c.kind == kind]

    async def open(self) -> str | None:
        self._record("open")
        return f"progress-{self.ticket.run_id}"

    def queued(self, place: QueuePosition) -> None:
        self._record("queued", place)

    def working(self) -> None:
        self._record("working")

    def show(self, event: RunEvent) -> None:
        self._record("show", event)

    def show_child(self, update: SubAgentEvent) -> None:
        self._record("show_child", update)

    def show_direct(self, update: SubAgentEvent) -> None:
        self._record("show_direct", update)

    async def answer(
        self,
        text: str,
        *,
        end: RunEnd | None = None,
        agent: str | None = None,
        task_id: str | None = None,
    ) -> None:
        self._record("answer", Shown(text, agent, task_id))

    async def finish(self, end: RunEnd) -> None:
        self._record("finish", end)
        self.end = end
        self.finished.set()


Decide = Callable[[RunTicket, ApprovalRequest], Awaitable[ApprovalDecision]]


class RecordingSurface:
    """A surface that records what the turn machine asks of it, as plain data."""

    kind = KIND

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.views: dict[str, RecordingView] = {}  # by run id, in the order they opened
        # Approvals: the request is recorded, then `decide` answers it (by default the
        # next decision the test puts in `decisions`).
        self.decisions: asyncio.Queue[ApprovalDecision] = asyncio.Queue()
        self.decide: Decide = self._next_decision
        self.window_s = 0.0  # results_window_s

    # ---------------------------------------------------------------- reading them

    def of(self, kind: str) -> list[Any]:
        """The payloads of every call of `kind`, in order."""
        return [c.payload for c in self.calls if c.kind == kind]

    def where(self, kind: str) -> list[Where | None]:
        return [c.where for c in self.calls if c.kind == kind]

    def view_in(self, where: Where) -> list[RecordingView]:
        """The views of the runs of a thread, oldest first."""
        return [v for v in self.views.values() if v.ticket.where == where]

    # -------------------------------------------------------------------- Surface

    def serves(self, key: SessionKey) -> bool:
        return key.kind == self.kind

    def clean(self, text: str) -> str:
        return text.replace(f"<@{BOT}>", "").strip()

    async def speaker(self, user_id: str) -> str:
        return f"<@{user_id}>"

    async def prompt(self, text: str, files: Sequence[dict[str, Any]]) -> Prompt:
        names = [str(f.get("name")) for f in files]
        return Prompt(text=f"{text} [files: {', '.join(names)}]" if names else text)

    async def thread_context(self, where: Where, before_ts: str) -> str | None:
        self.calls.append(Call("thread_context", where, before_ts))
        return None

    async def acknowledge(self, message: ThreadMessage, *, waits: bool) -> None:
        self.calls.append(
            Call("acknowledge", Where(message.channel_id, message.thread_ts), message)
        )

    async def refuse(self, where: Where, *, user_id: str, refusal: Refusal, is_dm: bool) -> None:
        payload = {"user_id": user_id, "refusal": refusal, "is_dm": is_dm}
        self.calls.append(Call("refuse", where, payload))

    async def say(self, where: Where, text: str) -> None:
        self.calls.append(Call("say", where, text))

    async def report(self, where: Where, text: str) -> None:
        self.calls.append(Call("report", where, text))

    def describe_failure(self, exc: Exception) -> str | None:
        return None

    async def offer_retry(self, where: Where, run_id: str) -> None:
        self.calls.append(Call("offer_retry", where, run_id))

    async def show_interrupted(self, record: RunRecord, *, retryable: bool) -> None:
        where = Where(record.channel_id, record.thread_ts)
        self.calls.append(
            Call("show_interrupted", where, {"record": record, "retryable": retryable})
        )

    def view(self, run: RunTicket) -> RecordingView:
        view = RecordingView(self, run)
        self.views[run.run_id] = view
        self.calls.append(Call("view", run.where, run, run.run_id))
        return view

    def approval(self, run: RunTicket) -> ApprovalFunc:
        async def ask(request: ApprovalRequest) -> ApprovalDecision:
            self.calls.append(Call("approval", run.where, request, run.run_id))
            return await self.decide(run, request)

        return ask

    async def _next_decision(self, run: RunTicket, request: ApprovalRequest) -> ApprovalDecision:
        return await self.decisions.get()

    def where_of(self, session: SessionRecord) -> Where | None:
        if session.kind != self.kind or not session.channel_id or not session.thread_ts:
            return None
        return Where(session.channel_id, session.thread_ts)

    def results_window_s(self) -> float:
        return self.window_s

    async def post_results(self, where: Where, waiting: list[TaskRecord]) -> None:
        self.calls.append(Call("post_results", where, list(waiting)))
        waiting.clear()


class Gate:
    """Who may start runs: everyone, unless refused by user id. Every check is kept."""

    def __init__(self) -> None:
        self.refused: dict[str, Refusal] = {}
        self.checks: list[dict[str, Any]] = []

    def refuse(self, user_id: str, text: str = "You may not ask me here.") -> Refusal:
        refusal = Refusal(reason="not_listed", text=text)
        self.refused[user_id] = refusal
        return refusal

    async def may_start(
        self,
        *,
        user_id: str,
        channel_id: str,
        is_dm: bool,
        team_id: str | None,
        user_team: str | None = None,
        enterprise_id: str | None = None,
    ) -> Refusal | None:
        self.checks.append({"user_id": user_id, "channel_id": channel_id, "is_dm": is_dm})
        return self.refused.get(user_id)


@dataclass
class Machine:
    """A turn machine on a recording surface, over the real Baton and a fake model."""

    baton: Baton
    llm: FakeOpenAI
    surface: RecordingSurface
    turns: TurnMachine
    gate: Gate
    # Events tests hand to the fake model's responder; all set when the machine stops,
    # so that no request is left waiting.
    gates: list[asyncio.Event] = field(default_factory=list)

    def event(self) -> asyncio.Event:
        """An event set at the latest when the machine stops."""
        gate = asyncio.Event()
        self.gates.append(gate)
        return gate

    def inbound(
        self,
        text: str,
        *,
        user: str = ALICE,
        channel: str = "C1",
        thread: str | None = None,
        ts: str | None = None,
        addressed: bool = True,
        is_dm: bool = False,
        session_key: str | None = None,
        files: Sequence[dict[str, Any]] = (),
    ) -> Inbound:
        """A message as a Slack-like surface reads it; a mention carries Baton's."""
        ts = ts or next_ts()
        thread_ts = thread or ts
        key = session_key or thread_key(thread_ts, channel).key
        return Inbound(
            session_key=key,
            channel_id=channel,
            thread_ts=thread_ts,
            ts=ts,
            user_id=user,
            text=f"<@{BOT}> {text}" if addressed else text,
            team_id=TEAM,
            user_team=TEAM,
            files=files,
            is_dm=is_dm,
            addressed=addressed,
        )

    async def deliver(
        self, message: Inbound, *, mentions_others: bool = False
    ) -> ThreadMessage | None:
        """What a surface does with a message: store it (the claim), then dispatch it
        outside the caller; the stored message, or None if it was not taken."""
        stored = await self.turns.intake(message, mentions_others=mentions_others)
        if stored is not None:
            self.turns.spawn(self.turns.dispatch(stored), f"message-{stored.id}")
        return stored

    async def send(
        self, text: str, *, mentions_others: bool = False, **how: Any
    ) -> ThreadMessage | None:
        """`deliver(inbound(text, **how))`."""
        return await self.deliver(self.inbound(text, **how), mentions_others=mentions_others)

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in self.llm.requests if is_main(r)]

    async def idle(self, within: float = 30.0) -> None:
        """`turns.idle()`: once nothing the machine started is going on, which proves
        that nothing else happens; a machine that never gets there fails the test after
        `within` seconds instead of hanging it."""
        async with asyncio.timeout(within):
            await self.turns.idle()

    async def settle(self, within: float = 30.0) -> None:
        """Until nothing the machine (or a background child) started is going on."""
        async with asyncio.timeout(within):
            await self.turns.idle()
            await self.baton.tracker.wait_for_children()
            await self.turns.idle()


if TYPE_CHECKING:  # both implement the protocols (checked by type checkers)

    def _conforms(surface: RecordingSurface, view: RecordingView) -> tuple[Surface, TurnView]:
        return surface, view


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith(MAIN_MARK)


def user_texts(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m["role"] == "user"]


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    """Poll `condition` until it holds; fail the test after `within` seconds. Only to
    wait for something to happen: that nothing else did is `turns.idle()`'s to prove."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (state in fakes: no event to wait on)
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def start_machine(tmp_path: Path, **overrides: Any) -> AsyncIterator[Machine]:
    """Baton (`make_settings` with `overrides`) on a fake model, and its turn machine on
    a recording surface, wired as the surfaces wire theirs."""
    async with FakeOpenAI() as llm:
        baton = await build_baton(make_settings(tmp_path, llm.url, **overrides))
        surface = RecordingSurface()
        gate = Gate()
        turns = TurnMachine(surface, baton.turn_parts(), access=gate, admission_poll_s=0.05)
        baton.tracker.on_finish(turns.post_task_finished)
        baton.instances.on_lost(turns.on_lost)
        machine = Machine(baton=baton, llm=llm, surface=surface, turns=turns, gate=gate)
        try:
            yield machine
        finally:
            for gate_event in machine.gates:
                gate_event.set()
            # As a surface stops (bot/slack/surface.py `stop`), with no grace.
            await turns.drain(0)
            await baton.tracker.interrupt()
            await turns.interrupt()
            await turns.stop_watching()
            await baton.close()
