"""The turn machine (bot/sessions/turns.py) without Slack: through a recording surface.

Each test drives `TurnMachine` as a surface does (`intake`, then `dispatch`; `cancel`,
`retry`, `tidy`, `drain`, `on_lost`) over the real Baton, with only the model faked
(over its real HTTP), and checks what the surface and each run's view were told, what
the model was asked, and what the database says. What another replica does is done
through the database (and a signal), as that replica would; a replica that died is an
instance id that is not alive. "Nothing else happened" is proved by `turns.idle()`,
never by sleeping.

The same behaviours through Slack: tests/slack/test_thread_turns.py, test_threads.py,
test_access_limits.py, test_deploys.py, test_replicas.py and
tests/security/test_thread_turn_attacks.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot import metrics
from bot.access.admission import QueuePosition
from bot.access.budgets import utc_day, utc_now
from bot.config import LimitsConfig
from bot.describe import describe_end
from bot.engine import ApprovalDecision
from bot.outcomes import RunEnd, RunOutcome, StopCause
from bot.sessions.surface import Where
from bot.sessions.turns import Cancelled
from bot.store import SessionKey
from bot.store.runs import FINISHED, QUEUED, RUNNING
from bot.store.thread_inbox import (
    DONE,
    INTERRUPTED,
    NEW,
    OFFERED,
    PENDING,
    REFUSED,
    RETRIED,
    TAKEN,
    Inbound,
)
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.sessions.recording import (
    ALICE,
    BOB,
    CAROL,
    TEAM,
    Machine,
    RecordingView,
    Shown,
    is_main,
    start_machine,
    thread_key,
    until,
    user_texts,
)

GONE = "replica-that-died"


@pytest.fixture
async def machine(tmp_path: Path) -> AsyncIterator[Machine]:
    async with start_machine(tmp_path) as value:
        yield value


def runs_ended(outcome: RunOutcome) -> float:
    return metrics.sample("baton_runs_total", {"outcome": outcome.value})


async def state_of(m: Machine, ts: str, channel: str = "C1") -> str | None:
    stored = await m.turns.inbox.find(channel, ts)
    return stored.state if stored is not None else None


def only_view(m: Machine, where: Where) -> RecordingView:
    [view] = m.surface.view_in(where)
    return view


def everything_asked(m: Machine) -> str:
    return json.dumps([r.messages for r in m.llm.requests], ensure_ascii=False)


def hold_first(m: Machine, *, then: str = "DONE") -> asyncio.Event:
    """The first model call waits for the returned event, then asks for a tool (so the
    run makes another call, which reads what reached it meanwhile); later calls answer
    `then`."""
    go = m.event()

    async def respond(request: RecordedRequest) -> Reply:
        if len(m.llm.requests) == 1:
            await go.wait()
            return Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")])
        return Reply(text=then)

    m.llm.responder = respond
    return go


def hold_marked(m: Machine, mark: str) -> asyncio.Event:
    """Calls whose question holds `mark` wait for the returned event; every call answers
    "ANSWER to <its last user message>"."""
    go = m.event()

    async def respond(request: RecordedRequest) -> Reply:
        asked = user_texts(request)[-1]
        if mark in asked:
            await go.wait()
        return Reply(text=f"ANSWER to {asked}")

    m.llm.responder = respond
    return go


async def hang(m: Machine) -> asyncio.Event:
    """Every model call waits (until the machine stops); returns an event set once the
    first call arrived."""
    started, never = m.event(), m.event()

    async def respond(request: RecordedRequest) -> Reply:
        started.set()
        await never.wait()
        return Reply(text="never")

    m.llm.responder = respond
    return started


async def interrupted_run(m: Machine, question: str, *, user: str = ALICE) -> tuple[str, Inbound]:
    """A run a replica now gone was running (as tests/slack/test_thread_turns.py builds
    it): its run row, and the question it took. Returns the run id and the message."""
    message = m.inbound(question, user=user)
    session = await m.baton.conversations.store.get_or_create(SessionKey.parse(message.session_key))
    run_id = f"dead{message.ts.replace('.', '')[-8:]}"
    await m.turns.run_store.start(
        run_id=run_id,
        owner=GONE,
        session_id=session.id,
        channel_id=message.channel_id,
        thread_ts=message.thread_ts,
        user_id=user,
    )
    await m.turns.inbox.receive(message, holder=GONE, state=TAKEN, run_id=run_id)
    return run_id, message


async def tasks_named(name: str) -> None:
    """Wait for the tasks called `name` (the machine spawned them and did not hand them
    back); however they end (a stopped run's is cancelled)."""
    if tasks := [t for t in asyncio.all_tasks() if t.get_name() == name]:
        await asyncio.wait(tasks, timeout=10)
        assert all(t.done() for t in tasks), f"{name} did not end"


# ------------------------------------------------------------------ one question


async def test_a_question_runs_one_turn_and_its_view_ends_done(machine: Machine) -> None:
    m = machine
    done_before = runs_ended(RunOutcome.DONE)
    m.llm.script(Reply(text="FOUR"))
    stored = await m.send("what is 2+2?")
    assert stored is not None and stored.state == NEW  # stored before anything else
    await m.idle()
    where = Where("C1", stored.ts)
    view = only_view(m, where)
    run_id = view.ticket.run_id
    assert view.ticket.user_id == ALICE and view.ticket.team_id == TEAM
    kinds = view.kinds
    assert kinds[0] == "view" and kinds[-1] == "finish" and kinds.count("finish") == 1
    assert kinds.index("working") < kinds.index("answer") < kinds.index("finish")
    assert "queued" not in kinds
    assert view.of("answer") == [Shown("FOUR")]
    end = view.end
    assert end is not None
    assert (end.outcome, end.cause, end.by, end.turns) == (RunOutcome.DONE, None, None, 1)
    assert end.prompt_tokens > 0 and end.completion_tokens > 0 and end.run_tokens > 0
    assert describe_end(end).startswith("✓ Done · 1 turn · ")
    assert runs_ended(RunOutcome.DONE) == done_before + 1  # the label comes from the outcome
    [request] = m.llm.requests
    assert user_texts(request)[-1] == f"[<@{ALICE}>] what is 2+2?"
    # Said nothing beside the run's own view; the question is done, the run closed with
    # its progress handle, the thread's lease released.
    assert [c.kind for c in m.surface.calls if c.run_id is None] == []
    assert await state_of(m, stored.ts) == DONE
    record = await m.turns.run_store.get(run_id)
    assert record is not None and record.state == FINISHED
    assert record.progress_ts == f"progress-{run_id}"
    alive = await m.baton.instances.alive()
    assert await m.turns.inbox.holder(stored.session_key, alive=alive) is None
    assert not m.turns.runs and not m.turns.threads


async def test_a_redelivered_message_starts_nothing(machine: Machine) -> None:
    m = machine
    go = hold_marked(m, "ONCE")
    message = m.inbound("answer ONCE")
    assert await m.deliver(message) is not None
    await until(lambda: len(m.llm.requests) == 1)
    assert await m.deliver(message) is None  # while its run works
    go.set()
    await m.idle()
    assert await m.deliver(message) is None  # and after
    await m.idle()
    assert len(m.llm.requests) == 1 and len(m.surface.views) == 1
    assert m.surface.of("offer_retry") == []
    assert await state_of(m, message.ts) == DONE


# ------------------------------------------------------------- one turn per thread


async def test_a_second_question_in_a_thread_is_its_next_turn(tmp_path: Path) -> None:
    """A question arriving while the thread's turn runs goes to that turn; one it cannot
    read (here: the turn is at `max_turns` after one call) waits for the thread's lease
    and is its next turn, which sees the first's answer in its history. Never two runs
    at once in one thread."""
    async with start_machine(tmp_path, max_turns=1) as m:
        go = hold_marked(m, "FIRST")
        first = await m.send("FIRST question")
        assert first is not None
        await until(lambda: len(m.llm.requests) == 1)
        second = await m.send("SECOND question", user=BOB, thread=first.ts)
        assert second is not None
        await until(lambda: len(m.surface.of("acknowledge")) == 1)  # it reached the turn
        assert len(m.turns.runs) == 1 and len(m.llm.requests) == 1
        go.set()
        await m.idle()
        one, two = m.llm.requests
        assert "SECOND" not in " ".join(user_texts(one))
        assert user_texts(two)[-1] == f"[<@{BOB}>] SECOND question"
        assert "while you were working" not in " ".join(user_texts(two))
        answer_one = f"ANSWER to [<@{ALICE}>] FIRST question"
        assert any(msg.get("content") == answer_one for msg in two.messages)
        v1, v2 = m.surface.view_in(Where("C1", first.ts))
        assert v1.ticket.user_id == ALICE and v2.ticket.user_id == BOB
        assert v1.end is not None and v1.end.outcome is RunOutcome.DONE
        assert v2.end is not None and v2.end.outcome is RunOutcome.DONE
        calls = m.surface.calls
        assert calls.index(v1.calls[-1]) < calls.index(v2.calls[0])  # one after the other
        assert await state_of(m, first.ts) == DONE and await state_of(m, second.ts) == DONE


async def test_two_threads_run_at_the_same_time(machine: Machine) -> None:
    m = machine
    both = m.event()

    async def respond(request: RecordedRequest) -> Reply:
        if m.llm.in_flight >= 2:
            both.set()
        await both.wait()  # neither answers until the other thread's call arrived
        return Reply(text="ANSWER")

    m.llm.responder = respond
    one = await m.send("thread one")
    two = await m.send("thread two", user=BOB)
    assert one is not None and two is not None
    await asyncio.wait_for(both.wait(), 10)
    await m.idle()
    assert m.llm.max_in_flight == 2
    for stored in (one, two):
        end = only_view(m, Where("C1", stored.ts)).end
        assert end is not None and end.outcome is RunOutcome.DONE


# ------------------------------------------------------------------------ steering


async def test_talk_and_a_mention_reach_the_running_turn_before_its_next_call(
    machine: Machine,
) -> None:
    m = machine
    go = hold_first(m, then="ADJUSTED")
    root = await m.send("start the review")
    assert root is not None
    await until(lambda: len(m.llm.requests) == 1)
    talk = await m.send("also the tests", user=BOB, thread=root.ts, addressed=False)
    asked = await m.send("and the docs", user=CAROL, thread=root.ts)
    assert talk is not None and asked is not None and not talk.addressed
    await until(lambda: len(m.surface.of("acknowledge")) == 2)
    assert [a.ts for a in m.surface.of("acknowledge")] == [talk.ts, asked.ts]
    assert len(m.llm.requests) == 1  # acknowledged while the model still works
    go.set()
    await m.idle()
    assert len(m.llm.requests) == 2 and len(m.surface.views) == 1  # no second run
    assert user_texts(m.llm.requests[1])[-2:] == [
        f"[<@{BOB}>, while you were working] also the tests",
        f"[<@{CAROL}>, while you were working] and the docs",
    ]
    view = only_view(m, Where("C1", root.ts))
    assert view.of("answer") == [Shown("ADJUSTED")]
    assert view.end is not None and view.end.outcome is RunOutcome.DONE and view.end.turns == 2
    for stored in (root, talk, asked):
        assert await state_of(m, stored.ts) == DONE


async def test_talk_that_is_not_for_baton_is_not_stored(machine: Machine) -> None:
    m = machine
    # A message outside any thread, and talk in a thread nobody runs: nobody's business.
    top = m.inbound("just talking", addressed=False)
    assert await m.deliver(top) is None
    idle_talk = m.inbound("beside nothing", thread=top.ts, addressed=False)
    assert await m.deliver(idle_talk) is None
    # With a turn running: talk to someone else is theirs; plain talk is the turn's.
    go = hold_first(m)
    root = await m.send("work on it")
    assert root is not None
    await until(lambda: len(m.llm.requests) == 1)
    aside = m.inbound("<@UDAVE> what do you think?", user=BOB, thread=root.ts, addressed=False)
    assert await m.deliver(aside, mentions_others=True) is None
    control = await m.send("CONTROL-TALK", user=BOB, thread=root.ts, addressed=False)
    assert control is not None
    await until(lambda: len(m.surface.of("acknowledge")) == 1)
    go.set()
    await m.idle()
    for ts in (top.ts, idle_talk.ts, aside.ts):
        assert await state_of(m, ts) is None
    asked = everything_asked(m)
    assert "what do you think" not in asked and "beside nothing" not in asked
    assert "CONTROL-TALK" in asked


# --------------------------------------------------------------------------- queue


async def test_over_the_cap_a_run_waits_in_the_queue_then_starts(tmp_path: Path) -> None:
    async with start_machine(tmp_path, limits=LimitsConfig(runs=1, runs_per_user=0)) as m:
        go = hold_marked(m, "FIRST")
        first = await m.send("FIRST job")
        assert first is not None
        await until(lambda: len(m.llm.requests) == 1)
        second = await m.send("SECOND job", user=BOB)
        assert second is not None
        where = Where("C1", second.ts)
        await until(lambda: any(v.of("queued") for v in m.surface.view_in(where)))
        view = only_view(m, where)
        assert set(view.of("queued")) == {QueuePosition(ahead=0, reason="deployment")}
        assert "working" not in view.kinds and len(m.llm.requests) == 1
        record = await m.turns.run_store.get(view.ticket.run_id)
        assert record is not None and record.state == QUEUED
        go.set()
        await m.idle()
        assert len(m.llm.requests) == 2
        assert view.kinds.index("queued") < view.kinds.index("working")
        assert view.of("answer") == [Shown(f"ANSWER to [<@{BOB}>] SECOND job")]
        assert view.end is not None and view.end.outcome is RunOutcome.DONE


async def test_cancelling_a_queued_run_withdraws_it(tmp_path: Path) -> None:
    async with start_machine(tmp_path, limits=LimitsConfig(runs=1, runs_per_user=0)) as m:
        go = hold_marked(m, "FIRST")
        first = await m.send("FIRST job")
        assert first is not None
        await until(lambda: len(m.llm.requests) == 1)
        second = await m.send("SECOND job", user=BOB)
        assert second is not None
        where = Where("C1", second.ts)
        await until(lambda: any(v.of("queued") for v in m.surface.view_in(where)))
        view = only_view(m, where)
        assert await m.turns.cancel(view.ticket.run_id, by=BOB) is Cancelled.HERE
        await asyncio.wait_for(view.finished.wait(), 10)
        assert view.end == RunEnd(outcome=RunOutcome.CANCELLED, by=BOB)
        assert "working" not in view.kinds and view.of("answer") == []
        go.set()
        await m.idle()
        assert len(m.llm.requests) == 1 and "SECOND job" not in everything_asked(m)
        record = await m.turns.run_store.get(view.ticket.run_id)
        assert record is not None and record.state == FINISHED
        assert await state_of(m, second.ts) == DONE  # not asked again later


# -------------------------------------------------------------------------- cancel


async def test_cancel_stops_a_running_turn_here(machine: Machine) -> None:
    m = machine
    cancelled_before = runs_ended(RunOutcome.CANCELLED)
    started = await hang(m)
    stored = await m.send("a long job")
    assert stored is not None
    await asyncio.wait_for(started.wait(), 10)
    [run_id] = m.turns.runs
    assert await m.turns.cancel(run_id, by=ALICE) is Cancelled.HERE
    await m.idle()
    view = m.surface.views[run_id]
    assert view.end == RunEnd(outcome=RunOutcome.CANCELLED, by=ALICE)
    assert describe_end(view.end) == f"⊘ Cancelled by <@{ALICE}>"
    assert view.of("answer") == []
    assert runs_ended(RunOutcome.CANCELLED) == cancelled_before + 1
    assert not m.turns.runs and await state_of(m, stored.ts) == DONE
    record = await m.turns.run_store.get(run_id)
    assert record is not None and record.state == FINISHED
    # Nothing left to cancel: a finished run, an unknown one.
    assert await m.turns.cancel(run_id, by=ALICE) is Cancelled.OVER
    assert await m.turns.cancel("no-such-run", by=ALICE) is Cancelled.OVER
    await m.idle()
    assert len(m.llm.requests) == 1 and m.surface.view_in(Where("C1", stored.ts)) == [view]
    # Whether ALICE may cancel a run (of another thread, or at all) is the surface's to
    # check before it calls `cancel` (bot/slack/listeners.py); the machine obeys.


async def test_a_cancel_another_replica_took_stops_the_run(machine: Machine) -> None:
    m = machine
    started = await hang(m)
    stored = await m.send("a long job")
    assert stored is not None
    await asyncio.wait_for(started.wait(), 10)
    [run_id] = m.turns.runs
    view = m.surface.views[run_id]
    # Replica B got the click: it writes the request and signals.
    assert await m.turns.run_store.request_cancel(run_id, by=BOB)
    await m.baton.signals.notify("cancel", run_id)
    await asyncio.wait_for(view.finished.wait(), 10)
    assert view.end == RunEnd(outcome=RunOutcome.CANCELLED, by=BOB)
    await m.idle()
    assert not m.turns.runs and len(m.llm.requests) == 1


async def test_a_cancel_of_another_replicas_run_is_written_for_it(machine: Machine) -> None:
    m = machine
    session = await m.baton.conversations.store.get_or_create(thread_key("5.5"))
    await m.turns.run_store.start(
        run_id="elsewhere",
        owner="replica-b",
        session_id=session.id,
        channel_id="C1",
        thread_ts="5.5",
        user_id=BOB,
    )
    woken = m.baton.signals.subscribe("cancel")
    try:
        assert await m.turns.cancel("elsewhere", by=ALICE) is Cancelled.ELSEWHERE
        assert await woken.wait(5)
    finally:
        woken.close()
    record = await m.turns.run_store.get("elsewhere")
    assert record is not None and record.cancel_requested_by == ALICE and record.state == RUNNING


# -------------------------------------------------------------------------- access


async def test_a_refused_person_is_told_alone_and_nothing_runs(machine: Machine) -> None:
    m = machine
    refusal = m.gate.refuse(BOB)
    stored = await m.send("run something", user=BOB)
    assert stored is not None
    await m.idle()
    assert m.llm.requests == [] and m.surface.views == {}
    [call] = [c for c in m.surface.calls if c.kind == "refuse"]
    assert call.where == Where("C1", stored.ts)
    assert call.payload == {"user_id": BOB, "refusal": refusal, "is_dm": False}
    assert await state_of(m, stored.ts) == REFUSED
    assert [c["user_id"] for c in m.gate.checks] == [BOB]


async def test_a_refused_persons_talk_and_mention_never_reach_the_running_turn(
    machine: Machine,
) -> None:
    m = machine
    m.gate.refuse(BOB)
    go = hold_first(m)
    root = await m.send("ALICE-QUESTION")
    assert root is not None
    await until(lambda: len(m.llm.requests) == 1)
    talk = await m.send("BOB-TALK", user=BOB, thread=root.ts, addressed=False)
    mention = await m.send("BOB-MENTION", user=BOB, thread=root.ts)
    control = await m.send("ALICE-REPLY", thread=root.ts, addressed=False)
    assert talk is not None and mention is not None and control is not None
    await until(lambda: len(m.surface.of("acknowledge")) == 1)
    await until(lambda: len(m.surface.of("refuse")) == 1)
    go.set()
    await m.idle()
    asked = everything_asked(m)
    assert "BOB-" not in asked and "ALICE-REPLY" in asked
    assert [a.ts for a in m.surface.of("acknowledge")] == [control.ts]
    # Only the mention is answered (to Bob alone); talk is refused silently.
    [refused] = m.surface.of("refuse")
    assert refused["user_id"] == BOB and m.surface.where("refuse") == [Where("C1", root.ts)]
    assert await state_of(m, talk.ts) == REFUSED and await state_of(m, mention.ts) == REFUSED
    assert await state_of(m, control.ts) == DONE


# ------------------------------------------------------------------------- budgets


async def spend(m: Machine, user: str, tokens: int) -> None:
    await m.baton.usage.record(
        day=utc_day(utc_now()),
        user_id=user,
        channel_id="C1",
        run_id=None,
        task_id=None,
        model="fake-model",
        prompt_tokens=tokens,
        completion_tokens=0,
    )


async def test_a_spent_daily_budget_refuses_at_dispatch(tmp_path: Path) -> None:
    async with start_machine(tmp_path, limits=LimitsConfig(tokens_per_user_per_day=1_000)) as m:
        await spend(m, ALICE, 1_200)
        stored = await m.send("one more", user=ALICE)
        assert stored is not None
        await m.idle()
        [refused] = m.surface.of("refuse")
        assert refused["user_id"] == ALICE and refused["refusal"].reason == "user_budget"
        assert refused["refusal"].text.startswith("You have used 1,200 of your 1,000 tokens")
        assert m.llm.requests == [] and m.surface.views == {}
        assert await state_of(m, stored.ts) == REFUSED
        # Bob's budget is his own.
        m.llm.script(Reply(text="HI BOB"))
        bob = await m.send("hi", user=BOB)
        assert bob is not None
        await m.idle()
        assert only_view(m, Where("C1", bob.ts)).of("answer") == [Shown("HI BOB")]


async def test_a_question_waiting_in_a_busy_thread_is_refused_when_its_turn_starts(
    tmp_path: Path,
) -> None:
    """Beside a running turn the asker's budget is not checked (the turn's owner pays
    for what steers it); the question that becomes the next turn is checked then."""
    limits = LimitsConfig(tokens_per_user_per_day=1_000)
    async with start_machine(tmp_path, limits=limits, max_turns=1) as m:
        await spend(m, BOB, 1_200)
        go = hold_marked(m, "ALICE-WORK")
        root = await m.send("ALICE-WORK")
        assert root is not None
        await until(lambda: len(m.llm.requests) == 1)
        late = await m.send("BOB-LATE", user=BOB, thread=root.ts)
        assert late is not None
        await until(lambda: len(m.surface.of("acknowledge")) == 1)
        go.set()
        await m.idle()
        assert len(m.llm.requests) == 1 and "BOB-LATE" not in everything_asked(m)
        first, second = m.surface.view_in(Where("C1", root.ts))
        assert first.end is not None and first.end.outcome is RunOutcome.DONE
        assert second.ticket.user_id == BOB
        assert second.end == RunEnd(outcome=RunOutcome.REFUSED, cause=StopCause.BUDGET_SPENT)
        [refused] = m.surface.of("refuse")
        assert refused["user_id"] == BOB and refused["refusal"].reason == "user_budget"


# --------------------------------------------------------------------------- Retry


async def test_a_run_a_restart_interrupted_is_shown_and_retry_runs_it_once(
    machine: Machine,
) -> None:
    m = machine
    run_id, message = await interrupted_run(m, "QUESTION-ONE")
    await m.turns.tidy()
    [shown] = m.surface.of("show_interrupted")
    assert shown["record"].id == run_id and shown["retryable"] is True
    assert m.surface.where("show_interrupted") == [Where("C1", message.ts)]
    record = await m.turns.run_store.get(run_id)
    assert record is not None and record.state == FINISHED
    assert await state_of(m, message.ts) == INTERRUPTED
    await m.turns.tidy()  # the next sweep (or another replica's) shows nothing more
    assert len(m.surface.of("show_interrupted")) == 1
    assert m.llm.requests == []
    # Bob runs Alice's question again.
    m.llm.script(Reply(text="ANSWER-ONE"))
    why_not = await m.turns.retry(
        run_id, user_id=BOB, team_id=TEAM, enterprise_id=None, user_team=TEAM
    )
    assert why_not is None
    await m.idle()
    [request] = m.llm.requests
    assert [t for t in user_texts(request) if "QUESTION-ONE" in t] == [f"[<@{ALICE}>] QUESTION-ONE"]
    view = only_view(m, Where("C1", message.ts))
    assert view.ticket.user_id == BOB and view.ticket.run_id != run_id
    assert view.end is not None and view.end.outcome is RunOutcome.DONE
    assert await state_of(m, message.ts) == RETRIED
    # A second press runs nothing.
    again = await m.turns.retry(
        run_id, user_id=ALICE, team_id=TEAM, enterprise_id=None, user_team=TEAM
    )
    assert again is not None and again.startswith("Nothing to retry")
    await m.idle()
    assert len(m.llm.requests) == 1 and len(m.surface.views) == 1


async def test_a_redelivered_interrupted_message_offers_retry_once(machine: Machine) -> None:
    m = machine
    run_id, message = await interrupted_run(m, "QUESTION-THREE")
    await m.turns.tidy()
    for _ in range(3):
        assert await m.deliver(message) is None
    await m.idle()
    assert m.surface.of("offer_retry") == [run_id]  # once, not once per redelivery
    assert m.surface.where("offer_retry") == [Where("C1", message.ts)]
    assert m.llm.requests == [] and m.surface.views == {}  # offered, not run unasked
    assert await state_of(m, message.ts) == OFFERED
    m.llm.script(Reply(text="ANSWER-THREE"))  # the offer can be taken
    assert (
        await m.turns.retry(run_id, user_id=ALICE, team_id=TEAM, enterprise_id=None, user_team=TEAM)
        is None
    )
    await m.idle()
    assert len(m.llm.requests) == 1 and await state_of(m, message.ts) == RETRIED


async def test_retry_by_someone_the_gate_refuses_runs_nothing(machine: Machine) -> None:
    m = machine
    run_id, message = await interrupted_run(m, "QUESTION-FOUR")
    await m.turns.tidy()
    refusal = m.gate.refuse(BOB)
    why_not = await m.turns.retry(
        run_id, user_id=BOB, team_id=TEAM, enterprise_id=None, user_team=TEAM
    )
    assert why_not == refusal.text
    unknown = await m.turns.retry(
        "no-such-run", user_id=ALICE, team_id=TEAM, enterprise_id=None, user_team=TEAM
    )
    assert unknown == "That run is not known here."
    await m.idle()
    assert m.llm.requests == [] and await state_of(m, message.ts) == INTERRUPTED


# ------------------------------------------------------- deploys, lost, other surfaces


async def test_a_run_still_queued_when_draining_begins_is_handed_over(tmp_path: Path) -> None:
    async with start_machine(tmp_path, limits=LimitsConfig(runs=1, runs_per_user=0)) as m:
        go = hold_marked(m, "FIRST")
        first = await m.send("FIRST job")
        assert first is not None
        await until(lambda: len(m.llm.requests) == 1)
        second = await m.send("SECOND job", user=BOB)
        assert second is not None
        where = Where("C1", second.ts)
        await until(lambda: any(v.of("queued") for v in m.surface.view_in(where)))
        view = only_view(m, where)
        draining = asyncio.create_task(m.turns.drain(10))
        await asyncio.wait_for(view.finished.wait(), 10)
        assert view.end == RunEnd(outcome=RunOutcome.HANDED_OVER)
        await tasks_named(f"turn-{view.ticket.run_id}")  # and its end is written
        assert not draining.done()  # the first run still finishes within the grace
        stored = await m.turns.inbox.find("C1", second.ts)
        assert stored is not None and stored.state == PENDING and stored.run_id is None
        go.set()
        await draining
        assert len(m.llm.requests) == 1 and "SECOND job" not in everything_asked(m)
        first_end = only_view(m, Where("C1", first.ts)).end
        assert first_end is not None and first_end.outcome is RunOutcome.DONE
        assert await state_of(m, second.ts) == PENDING  # for the next process
        alive = await m.baton.instances.alive()
        assert await m.turns.inbox.holder(second.session_key, alive=alive) is None


async def test_a_run_others_closed_while_this_process_stalled_stops_here(
    machine: Machine,
) -> None:
    m = machine
    started = await hang(m)
    stored = await m.send("a long question")
    assert stored is not None
    await asyncio.wait_for(started.wait(), 10)
    [run_id] = m.turns.runs
    # Taken for dead, but its run is still open: it goes on.
    m.turns.on_lost()
    await tasks_named("stop-lost-runs")
    assert run_id in m.turns.runs
    # Another replica closed it meanwhile: it stops here, as interrupted by a restart.
    await m.turns.run_store.finish(run_id)
    m.turns.on_lost()
    await m.idle()
    view = m.surface.views[run_id]
    assert view.end == RunEnd(outcome=RunOutcome.INTERRUPTED, cause=StopCause.RESTART)
    assert view.end.retryable and view.of("answer") == []
    assert not m.turns.runs and len(m.llm.requests) == 1


async def test_another_surfaces_orphans_and_questions_are_left_to_it(machine: Machine) -> None:
    m = machine
    chat = SessionKey.terminal("elsewhere")
    session = await m.baton.conversations.store.get_or_create(chat)
    await m.turns.run_store.start(
        run_id="chatrun",
        owner=GONE,
        session_id=session.id,
        channel_id="terminal",
        thread_ts="t1",
        user_id="terminal",
    )
    inbox = m.turns.inbox

    def chat_line(ts: str, text: str) -> Inbound:
        return Inbound(
            session_key=chat.key,
            channel_id="terminal",
            thread_ts="t1",
            ts=ts,
            user_id="terminal",
            text=text,
        )

    await inbox.receive(
        chat_line("1.0001", "CHAT-TAKEN"), holder=GONE, state=TAKEN, run_id="chatrun"
    )
    await inbox.receive(chat_line("1.0002", "CHAT-WAITING"), holder=GONE, state=PENDING)
    await inbox.receive(chat_line("1.0003", "CHAT-UNREAD"), holder=GONE)
    slack_run, _ = await interrupted_run(m, "SLACK-ORPHAN")  # the control: this one is ours
    await m.turns.tidy()
    await m.idle()
    assert [s["record"].id for s in m.surface.of("show_interrupted")] == [slack_run]
    assert m.llm.requests == [] and m.surface.views == {}
    record = await m.turns.run_store.get("chatrun")
    assert record is not None and record.state == RUNNING
    for ts, state in (("1.0001", TAKEN), ("1.0002", PENDING), ("1.0003", NEW)):
        stored = await inbox.find("terminal", ts)
        assert stored is not None and stored.state == state
    unread = await inbox.find("terminal", "1.0003")
    assert unread is not None and unread.holder == GONE


# ------------------------------------------------------------- background results


def background_task(prompt: str) -> Reply:
    arguments = {
        "subagent_type": "explore",
        "prompt": prompt,
        "background": True,
        "description": "Count TODOs",
    }
    return Reply(tool_calls=[ToolCallSpec("task", arguments, id="t1")])


async def test_a_background_result_is_posted_and_reaches_the_next_turn_once(
    machine: Machine,
) -> None:
    m = machine
    release = m.event()
    main = [
        background_task("count the TODOs"),
        Reply(text="Started it."),
        Reply(text="It found 3."),
        Reply(text="Still 3."),
    ]
    result = "There are 3 TODOs."

    async def respond(request: RecordedRequest) -> Reply:
        if is_main(request):
            return main.pop(0)
        await release.wait()
        return Reply(text=result)

    m.llm.responder = respond
    root = await m.send("count TODOs in the background")
    assert root is not None
    where = Where("C1", root.ts)
    await m.idle()  # the turn is over; its child still works
    view = only_view(m, where)
    assert view.of("answer") == [Shown("Started it.")] and view.of("show_child") == []
    assert m.baton.tracker.is_running_here("task-explore-1")
    assert m.surface.of("post_results") == []
    release.set()
    await until(lambda: bool(m.surface.of("post_results")))
    await m.settle()
    [[record]] = m.surface.of("post_results")
    assert m.surface.where("post_results") == [where]
    assert record.id == "task-explore-1" and record.state == "completed"
    assert result in (record.result or "")
    for text in ("what did it find?", "and now?"):
        assert await m.send(text, thread=root.ts) is not None
        await m.idle()
    _, _, second, third = m.main_requests()
    assert json.dumps(second.messages).count(result) == 1
    assert "<background_task_results>" in user_texts(second)[-1]
    # Told once: the turn after only has it in its history.
    assert json.dumps(third.messages).count(result) == 1
    assert "<background_task_results>" not in user_texts(third)[-1]


# ------------------------------------------------------------------------ approvals


async def test_an_approval_asks_the_surface_and_its_decision_is_obeyed(
    machine: Machine, tmp_path: Path
) -> None:
    m = machine
    write = ToolCallSpec("write_file", {"path": "hello.txt", "content": "hi\n"}, id="w1")
    m.llm.script(Reply(tool_calls=[write]), Reply(text="Not written."))
    stored = await m.send("write hello.txt")
    assert stored is not None
    await until(lambda: bool(m.surface.of("approval")))
    [call] = [c for c in m.surface.calls if c.kind == "approval"]
    [run_id] = m.turns.runs
    assert call.run_id == run_id and call.where == Where("C1", stored.ts)
    assert call.payload.tool_name == "write_file"
    assert len(m.llm.requests) == 1  # the run waits for the person
    m.surface.decisions.put_nowait(ApprovalDecision(approved=False, message="DENIED-BY-TEST"))
    await m.idle()
    assert not (tmp_path / "ws" / "hello.txt").exists()
    tool_results = [
        str(x.get("content")) for x in m.llm.requests[1].messages if x["role"] == "tool"
    ]
    assert any("DENIED-BY-TEST" in r for r in tool_results)
    end = m.surface.views[run_id].end
    assert end is not None and end.outcome is RunOutcome.DONE


# ------------------------------------------------------------------------ attackers


async def test_a_message_colliding_with_a_stored_one_runs_nothing(machine: Machine) -> None:
    """The inbox's key is (channel, ts): a message reusing them, whoever claims to send
    it, whatever it says and whichever thread it names, is a redelivery."""
    m = machine
    m.llm.script(Reply(text="ALICE-ANSWER"))
    original = await m.send("ALICE-ORIGINAL")
    assert original is not None
    await m.idle()
    forged = m.inbound(
        "FORGED-TEXT",
        user=BOB,
        ts=original.ts,
        thread="9.9",
        session_key=thread_key("9.9").key,
    )
    assert await m.deliver(forged) is None
    await m.idle()
    assert len(m.llm.requests) == 1 and "FORGED-TEXT" not in everything_asked(m)
    stored = await m.turns.inbox.find("C1", original.ts)
    assert stored is not None and stored.user_id == ALICE and stored.state == DONE
    assert stored.session_key == original.session_key
    assert m.surface.of("offer_retry") == []


async def test_a_message_whose_session_key_names_another_thread_does_not_steer_it(
    machine: Machine,
) -> None:
    m = machine
    go = hold_first(m)
    root = await m.send("ALICE-WORK")
    assert root is not None
    await until(lambda: len(m.llm.requests) == 1)
    key = root.session_key
    for addressed in (False, True):
        forged = m.inbound(
            f"FORGED-{addressed}",
            user=BOB,
            channel="C2",
            thread="7.7",
            addressed=addressed,
            session_key=key,
        )
        await m.deliver(forged)
    # A reply in the thread itself (the control) comes after them, in ts order.
    control = await m.send("ALICE-REPLY", thread=root.ts, addressed=False)
    assert control is not None
    await until(lambda: control.ts in [a.ts for a in m.surface.of("acknowledge")])
    go.set()
    await m.idle()
    assert "ALICE-REPLY" in everything_asked(m)
    assert "FORGED" not in everything_asked(m)
    assert [a.ts for a in m.surface.of("acknowledge")] == [control.ts]
