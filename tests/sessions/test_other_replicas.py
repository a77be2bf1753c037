"""The turn machine beside other replicas, without Slack: through a recording surface.

What another replica does is done here through the database (and a signal), as that
replica would: a lease it holds, a message it stored, under an instance id that is
registered and alive ("replica-b") or one that is not (a replica that died). As in
tests/sessions/test_turns.py, "nothing else happened" is proved by `turns.idle()`.

The same behaviours through Slack: tests/slack/test_thread_turns.py
(`test_a_dead_receivers_unread_message_is_answered`,
`test_questions_waiting_on_a_dead_lease_run_in_slacks_order`,
`test_a_reply_stored_by_another_replica_steers_the_running_turn`,
`test_talk_in_a_thread_another_replica_runs_is_stored_for_it`); with real processes,
tests/replicas/.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.outcomes import RunOutcome
from bot.sessions.surface import Where
from bot.store import SessionKey
from bot.store.instances import Instances
from bot.store.thread_inbox import DONE, NEW, PENDING, Inbound, ThreadMessage
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.sessions.recording import (
    ALICE,
    BOB,
    CAROL,
    Machine,
    Shown,
    next_ts,
    start_machine,
    thread_key,
    until,
    user_texts,
)

GONE = "replica-that-died"
REPLICA_B = "replica-b"


@pytest.fixture
async def machine(tmp_path: Path) -> AsyncIterator[Machine]:
    async with start_machine(tmp_path) as value:
        yield value


async def replica_b(m: Machine) -> Instances:
    """Another replica on the same database, alive (its heartbeat is fresh; `beat` it
    again before a check that must still find it alive)."""
    other = Instances(m.baton.database, instance_id=REPLICA_B)
    await other.register()
    assert REPLICA_B in await m.baton.instances.alive()
    return other


async def stored(m: Machine, ts: str, channel: str = "C1") -> ThreadMessage:
    message = await m.turns.inbox.find(channel, ts)
    assert message is not None
    return message


def everything_asked(m: Machine) -> str:
    return json.dumps([r.messages for r in m.llm.requests], ensure_ascii=False)


def answer_each(m: Machine) -> None:
    """Every call answers "ANSWER to <its last user message>"."""

    def respond(request: RecordedRequest) -> Reply:
        return Reply(text=f"ANSWER to {user_texts(request)[-1]}")

    m.llm.responder = respond


async def test_a_thread_a_live_replica_runs_is_left_to_it(machine: Machine) -> None:
    """Replica B holds the thread's lease: a question and talk in the thread are stored
    for its turn and B is signalled; nothing runs here, and the lease stays B's (a
    sweep here takes nothing from a live replica)."""
    m = machine
    b = await replica_b(m)
    root = next_ts()
    key = thread_key(root)
    alive = await m.baton.instances.alive()
    assert await m.turns.inbox.lease(key.key, owner=REPLICA_B, run_id="b-run", alive=alive)
    woken = m.baton.signals.subscribe("steer")
    try:
        question = await m.send("QUESTION-FOR-B", thread=root)
        talk = await m.send("TALK-FOR-B", user=BOB, thread=root, addressed=False)
        # Talk addressed to someone else is theirs, even beside a running turn.
        aside = m.inbound("<@UDAVE> ASIDE", user=CAROL, thread=root, addressed=False)
        assert await m.deliver(aside, mentions_others=True) is None
        assert question is not None and talk is not None
        await m.idle()
        assert await woken.wait(5)
    finally:
        woken.close()
    await b.beat()
    await m.turns.tidy()
    await m.idle()
    assert m.llm.requests == [] and m.surface.views == {} and not m.turns.runs
    assert m.surface.calls == []  # B acknowledges what its turn reads
    for message in (question, talk):
        assert (await stored(m, message.ts)).state == PENDING
    assert await m.turns.inbox.find("C1", aside.ts) is None
    lease = await m.turns.inbox.holder(key.key, alive=await m.baton.instances.alive())
    assert lease is not None and (lease.owner, lease.run_id) == (REPLICA_B, "b-run")


async def test_talk_beside_no_live_turn_is_not_stored(machine: Machine) -> None:
    """Talk (no mention) is for a turn only while a live replica runs it: in a thread
    nobody runs, or whose lease a dead replica left, it is nobody's business."""
    m = machine
    root = next_ts()
    key = thread_key(root)
    nobody = m.inbound("BESIDE-NOTHING", user=BOB, thread=root, addressed=False)
    assert await m.deliver(nobody) is None
    assert await m.turns.inbox.lease(key.key, owner=GONE, run_id="dead-run", alive=[GONE])
    dead = m.inbound("BESIDE-THE-DEAD", user=BOB, thread=root, addressed=False)
    assert await m.deliver(dead) is None
    await m.turns.inbox.release(key.key, "dead-run")
    await replica_b(m)
    alive = await m.baton.instances.alive()
    assert await m.turns.inbox.lease(key.key, owner=REPLICA_B, run_id="b-run", alive=alive)
    live = await m.send("BESIDE-B", user=BOB, thread=root, addressed=False)  # the control
    assert live is not None and not live.addressed
    await m.idle()
    assert await m.turns.inbox.find("C1", nobody.ts) is None
    assert await m.turns.inbox.find("C1", dead.ts) is None
    assert (await stored(m, live.ts)).state == PENDING
    assert m.llm.requests == [] and m.surface.views == {}


async def test_a_message_another_replica_stored_steers_the_turn_running_here(
    machine: Machine,
) -> None:
    """The messages reached replica B, which stored them for the thread and signalled:
    the turn running here reads them (in the thread's order) before its next model
    call, and their authors are told it did."""
    m = machine
    go = m.event()

    async def respond(request: RecordedRequest) -> Reply:
        if len(m.llm.requests) == 1:
            await go.wait()
            return Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")])
        return Reply(text="SAW THEM")

    m.llm.responder = respond
    await replica_b(m)
    root = await m.send("start working")
    assert root is not None
    await until(lambda: len(m.llm.requests) == 1)
    talk = m.inbound("TALK-VIA-B", user=BOB, thread=root.ts, addressed=False)
    asked = m.inbound("MENTION-VIA-B", user=CAROL, thread=root.ts)
    for message in (talk, asked):
        assert await m.turns.inbox.receive(message, holder=REPLICA_B, state=PENDING)
    await m.baton.signals.notify("steer", root.session_key)
    await until(lambda: len(m.surface.of("acknowledge")) == 2, within=10)
    assert [a.ts for a in m.surface.of("acknowledge")] == [talk.ts, asked.ts]
    assert len(m.llm.requests) == 1  # read while the model still works
    go.set()
    await m.idle()
    assert len(m.llm.requests) == 2 and len(m.surface.views) == 1  # no run of their own
    assert user_texts(m.llm.requests[1])[-2:] == [
        f"[<@{BOB}>, while you were working] TALK-VIA-B",
        f"[<@{CAROL}>, while you were working] MENTION-VIA-B",
    ]
    [view] = m.surface.view_in(Where("C1", root.ts))
    assert view.of("answer") == [Shown("SAW THEM")]
    assert view.end is not None and view.end.outcome is RunOutcome.DONE and view.end.turns == 2
    for message in (talk, asked):
        assert (await stored(m, message.ts)).state == DONE


async def test_a_dead_receivers_unread_and_waiting_questions_are_taken_up_here(
    machine: Machine,
) -> None:
    """A replica died after storing a question (Slack was answered) and before looking
    at it, and another question waits with nobody running its thread's turn: a sweep
    here answers both, once. A live replica's are left to it."""
    m = machine
    answer_each(m)
    b = await replica_b(m)
    inbox = m.turns.inbox
    unread = m.inbound("UNREAD-OF-DEAD")
    waiting = m.inbound("WAITING-OF-DEAD")
    assert await inbox.receive(unread, holder=GONE)
    assert await inbox.receive(waiting, holder=GONE, state=PENDING)
    # The controls: replica B's unread message, and a question waiting for B's turn.
    b_unread = m.inbound("UNREAD-OF-B", user=BOB)
    b_waiting = m.inbound("WAITING-OF-B", user=BOB)
    assert await inbox.receive(b_unread, holder=REPLICA_B)
    assert await inbox.receive(b_waiting, holder=REPLICA_B, state=PENDING)
    alive = await m.baton.instances.alive()
    b_key = b_waiting.session_key
    assert await inbox.lease(b_key, owner=REPLICA_B, run_id="b-run", alive=alive)
    for _ in range(2):  # the second sweep (or another replica's) finds nothing more
        await b.beat()
        await m.turns.tidy()
        await m.idle()
    assert len(m.llm.requests) == 2
    asked = everything_asked(m)
    assert "UNREAD-OF-DEAD" in asked and "WAITING-OF-DEAD" in asked and "-OF-B" not in asked
    for message in (unread, waiting):
        [view] = m.surface.view_in(Where("C1", message.ts))
        assert view.ticket.user_id == ALICE
        question = message.text.removeprefix("<@UBOT> ")
        assert view.of("answer") == [Shown(f"ANSWER to [<@{ALICE}>] {question}")]
        assert view.end is not None and view.end.outcome is RunOutcome.DONE
        now = await stored(m, message.ts)
        assert (now.state, now.run_id) == (DONE, view.ticket.run_id)
    assert len(m.surface.views) == 2
    now_unread, now_waiting = await stored(m, b_unread.ts), await stored(m, b_waiting.ts)
    assert (now_unread.state, now_unread.holder) == (NEW, REPLICA_B)
    assert (now_waiting.state, now_waiting.run_id) == (PENDING, None)


async def waiting_behind_a_dead_lease(
    m: Machine,
) -> tuple[str, SessionKey, Inbound, Inbound]:
    """Two questions of a new thread (Alice's first, Bob's second), stored in the other
    order, waiting behind the lease a dead replica left: the thread's root, its key and
    the two questions."""
    root = next_ts()
    key = thread_key(root)
    first = m.inbound("FIRST", thread=root)
    second = m.inbound("SECOND", user=BOB, thread=root)
    assert first.ts < second.ts
    assert await m.turns.inbox.lease(key.key, owner=GONE, run_id="dead-run", alive=[GONE])
    for message in (second, first):  # stored in the other order
        assert await m.turns.inbox.receive(message, holder=GONE, state=PENDING)
    return root, key, first, second


async def test_questions_waiting_on_a_dead_lease_run_here_in_the_threads_order(
    machine: Machine,
) -> None:
    """A replica died holding a thread's lease with two questions waiting behind its
    turn, stored out of order: the thread's turn runs here, with the oldest (by ts) as
    its question; the later one reaches it as the thread says it, after it (as a
    question does that comes while a turn runs)."""
    m = machine
    answer_each(m)
    root, key, first, second = await waiting_behind_a_dead_lease(m)
    await m.turns.tidy()
    await m.idle()
    one, two = m.llm.requests
    assert user_texts(one)[-1] == f"[<@{ALICE}>] FIRST"
    assert "SECOND" not in " ".join(user_texts(one))
    assert user_texts(two)[-1] == f"[<@{BOB}>, while you were working] SECOND"
    answer_one = f"ANSWER to [<@{ALICE}>] FIRST"
    assert any(msg.get("content") == answer_one for msg in two.messages)
    [view] = m.surface.view_in(Where("C1", root))
    assert view.ticket.user_id == ALICE  # the oldest question's turn
    assert view.end is not None and view.end.outcome is RunOutcome.DONE and view.end.turns == 2
    assert [a.ts for a in m.surface.of("acknowledge")] == [second.ts]
    for message in (first, second):
        now = await stored(m, message.ts)
        assert (now.state, now.run_id) == (DONE, view.ticket.run_id)
    lease = await m.turns.inbox.holder(key.key, alive=await m.baton.instances.alive())
    assert lease is None  # released once the thread's questions were answered


async def test_questions_waiting_on_a_dead_lease_are_separate_turns_when_unread(
    tmp_path: Path,
) -> None:
    """The same, when the turn cannot read the later question (at `max_turns` after
    one call): the questions are the thread's turns in ts order, one at a time, the
    second seeing the first's answer."""
    async with start_machine(tmp_path, max_turns=1) as m:
        answer_each(m)
        root, _, first, second = await waiting_behind_a_dead_lease(m)
        await m.turns.tidy()
        await m.idle()
        one, two = m.llm.requests
        assert user_texts(one)[-1] == f"[<@{ALICE}>] FIRST"
        assert "SECOND" not in " ".join(user_texts(one))
        assert user_texts(two)[-1] == f"[<@{BOB}>] SECOND"
        answer_one = f"ANSWER to [<@{ALICE}>] FIRST"
        assert any(msg.get("content") == answer_one for msg in two.messages)
        assert m.llm.max_in_flight == 1
        v1, v2 = m.surface.view_in(Where("C1", root))
        assert (v1.ticket.user_id, v2.ticket.user_id) == (ALICE, BOB)
        calls = m.surface.calls
        assert calls.index(v1.calls[-1]) < calls.index(v2.calls[0])  # one after the other
        for view, message in ((v1, first), (v2, second)):
            assert view.end is not None and view.end.outcome is RunOutcome.DONE
            now = await stored(m, message.ts)
            assert (now.state, now.run_id) == (DONE, view.ticket.run_id)
