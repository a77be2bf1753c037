"""Concurrent-run caps with a queue, on a real database: SQLite, and PostgreSQL when
BATON_TEST_POSTGRES_URL names a server where the user may create databases (each
test then gets a fresh database).

Waits in these tests are bounded by a generous `SETTLE_S` only so that a bug fails
the test instead of hanging it; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import event

from bot.access.admission import Admission, QueuePosition, RunNotQueued, place_in_queue
from bot.config import LimitsConfig
from bot.store import Database, SessionKey, SessionStore
from bot.store.instances import Instances
from bot.store.models import utcnow
from bot.store.runs import RunRecord, RunStore
from tests.databases import fresh_database

SETTLE_S = 20.0
THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.1")
ALICE, BOB, CAROL, DAVE = "UALICE", "UBOB", "UCAROL", "UDAVE"


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url)
    await db.create_schema()
    yield db
    await db.close()


@pytest.fixture
async def session_id(database: Database) -> int:
    session = await SessionStore(database).get_or_create(THREAD)
    assert session.id is not None
    return session.id


@dataclass
class Replica:
    """One Baton process as admission sees it: its registration, store and admission."""

    instances: Instances
    store: RunStore
    admission: Admission
    session_id: int

    async def queue(self, run_id: str, user_id: str, *, state: str = "queued") -> None:
        await self.store.start(
            run_id=run_id,
            owner=self.instances.id,
            session_id=self.session_id,
            channel_id="C1",
            thread_ts="1.1",
            user_id=user_id,
            state=state,
        )

    async def end(self, run_id: str) -> None:
        await self.store.finish(run_id)
        self.admission.release()

    async def state(self, run_id: str) -> str:
        record = await self.store.get(run_id)
        assert record is not None
        return record.state


async def make_replica(
    database: Database,
    session_id: int,
    name: str,
    *,
    runs: int = 0,
    runs_per_user: int = 0,
    poll_s: float = 0.02,
) -> Replica:
    instances = Instances(database, instance_id=name)
    instances.host = f"host-{name}"  # another machine: alive while its heartbeat is fresh
    await instances.register()
    store = RunStore(database)
    limits = LimitsConfig(runs=runs, runs_per_user=runs_per_user)
    admission = Admission(store, instances, limits, poll_s=poll_s)
    return Replica(instances=instances, store=store, admission=admission, session_id=session_id)


class Positions:
    """An `on_queued` callback that records every position it is told."""

    def __init__(self) -> None:
        self.seen: list[QueuePosition] = []
        self._changed = asyncio.Condition()

    async def __call__(self, position: QueuePosition) -> None:
        async with self._changed:
            self.seen.append(position)
            self._changed.notify_all()

    async def reach(self, count: int) -> list[QueuePosition]:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.seen) >= count), SETTLE_S
            )
        return self.seen


async def settle(awaitable: Awaitable[object]) -> None:
    await asyncio.wait_for(awaitable, SETTLE_S)


def waiting(
    replica: Replica, run_id: str, user_id: str, positions: Positions
) -> asyncio.Task[None]:
    return asyncio.create_task(replica.admission.wait(run_id, user_id, on_queued=positions))


async def test_a_run_over_the_cap_waits_until_a_release_frees_a_slot(
    database: Database, session_id: int
) -> None:
    # A poll far longer than the test: only release() can wake the waiter.
    here = await make_replica(database, session_id, "a", runs=1, poll_s=3600)
    await here.queue("r1", ALICE)
    await settle(here.admission.wait("r1", ALICE))
    await here.queue("r2", BOB)
    positions = Positions()
    task = waiting(here, "r2", BOB, positions)
    assert await positions.reach(1) == [QueuePosition(ahead=0, reason="deployment")]
    assert await here.state("r2") == "queued"
    assert here.admission.waiting == {"r2"}

    await here.end("r1")
    await settle(task)
    assert await here.state("r2") == "running"
    assert here.admission.waiting == frozenset()


async def test_the_per_user_cap_does_not_block_another_person(
    database: Database, session_id: int
) -> None:
    here = await make_replica(database, session_id, "a", runs_per_user=1)
    await here.queue("alice-1", ALICE)
    await settle(here.admission.wait("alice-1", ALICE))
    await here.queue("alice-2", ALICE)
    alice_positions = Positions()
    alice_2 = waiting(here, "alice-2", ALICE, alice_positions)
    assert await alice_positions.reach(1) == [QueuePosition(ahead=0, reason="user")]

    # Bob came later, but Alice's queued run does not hold him up.
    await here.queue("bob-1", BOB)
    bob_positions = Positions()
    await settle(here.admission.wait("bob-1", BOB, on_queued=bob_positions))
    assert bob_positions.seen == []
    assert await here.state("bob-1") == "running"
    assert await here.state("alice-2") == "queued"

    await here.end("alice-1")
    await settle(alice_2)
    assert await here.state("alice-2") == "running"


async def test_runs_start_first_come_first_served(database: Database, session_id: int) -> None:
    here = await make_replica(database, session_id, "a", runs=1)
    await here.queue("r0", ALICE)
    await settle(here.admission.wait("r0", ALICE))
    admitted: list[str] = []
    progress = asyncio.Condition()

    async def run(run_id: str, user_id: str, positions: Positions) -> None:
        await here.admission.wait(run_id, user_id, on_queued=positions)
        async with progress:
            admitted.append(run_id)
            progress.notify_all()

    tasks = []
    for run_id, user_id in (("r1", BOB), ("r2", CAROL), ("r3", DAVE)):
        await here.queue(run_id, user_id)
        positions = Positions()
        tasks.append(asyncio.create_task(run(run_id, user_id, positions)))
        await positions.reach(1)  # waiting before the next one is queued

    previous = "r0"
    for count in range(1, 4):
        await here.end(previous)
        async with progress:
            await asyncio.wait_for(progress.wait_for(lambda n=count: len(admitted) >= n), SETTLE_S)
        previous = admitted[-1]
    await settle(asyncio.gather(*tasks))
    assert admitted == ["r1", "r2", "r3"]


async def test_the_queued_run_is_told_how_many_runs_are_ahead(
    database: Database, session_id: int
) -> None:
    here = await make_replica(database, session_id, "a", runs=1)
    await here.queue("r0", ALICE)
    await settle(here.admission.wait("r0", ALICE))
    ahead_of_it = []
    for run_id, user_id in (("r1", BOB), ("r2", CAROL)):
        await here.queue(run_id, user_id)
        positions = Positions()
        ahead_of_it.append(waiting(here, run_id, user_id, positions))
        await positions.reach(1)
    await here.queue("r3", DAVE)
    positions = Positions()
    last = waiting(here, "r3", DAVE, positions)

    assert await positions.reach(1) == [QueuePosition(ahead=2, reason="deployment")]
    await here.end("r0")
    await settle(ahead_of_it[0])
    assert (await positions.reach(2))[-1] == QueuePosition(ahead=1, reason="deployment")
    await here.end("r1")
    await settle(ahead_of_it[1])
    assert (await positions.reach(3))[-1] == QueuePosition(ahead=0, reason="deployment")
    await here.end("r2")
    await settle(last)
    assert [p.ahead for p in positions.seen] == [2, 1, 0]


async def test_cancelling_a_waiting_run_leaves_no_waiter_and_frees_its_place(
    database: Database, session_id: int
) -> None:
    here = await make_replica(database, session_id, "a", runs=1)
    await here.queue("r0", ALICE)
    await settle(here.admission.wait("r0", ALICE))
    await here.queue("r1", BOB)
    positions = Positions()
    task = waiting(here, "r1", BOB, positions)
    await positions.reach(1)

    # A click on another replica reaches the owner through its cancel requests.
    assert await here.store.request_cancel("r1", by=CAROL)
    assert [r.id for r in await here.store.cancel_requests(here.instances.id)] == ["r1"]

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert here.admission.waiting == frozenset()
    assert await here.state("r1") == "queued"  # the caller finishes it
    await here.end("r1")

    await here.queue("r2", CAROL)
    later = waiting(here, "r2", CAROL, Positions())
    await here.end("r0")
    await settle(later)
    assert await here.state("r2") == "running"


async def test_a_finished_run_stops_waiting_with_an_error(
    database: Database, session_id: int
) -> None:
    here = await make_replica(database, session_id, "a", runs=1)
    await here.queue("r0", ALICE)
    await settle(here.admission.wait("r0", ALICE))
    await here.queue("r1", BOB)
    positions = Positions()
    task = waiting(here, "r1", BOB, positions)
    await positions.reach(1)
    await here.end("r1")  # e.g. recovered as an orphan by another replica
    with pytest.raises(RunNotQueued):
        await settle(task)


async def test_runs_of_a_dead_owner_hold_no_slot_and_no_place(
    database: Database, session_id: int
) -> None:
    here = await make_replica(database, session_id, "a", runs=1)
    ghost = Replica(
        instances=Instances(database, instance_id="ghost"),  # never registered: not alive
        store=here.store,
        admission=here.admission,
        session_id=session_id,
    )
    await ghost.queue("ghost-running", ALICE, state="running")
    await ghost.queue("ghost-queued", ALICE)
    await here.queue("r1", BOB)
    positions = Positions()
    await settle(here.admission.wait("r1", BOB, on_queued=positions))
    assert positions.seen == []
    assert await here.state("r1") == "running"

    orphans = await here.store.orphans(alive=await here.instances.alive())
    assert sorted(r.id for r in orphans) == ["ghost-queued", "ghost-running"]


async def test_two_replicas_never_run_more_than_the_cap(
    database_url: str, database: Database, session_id: int
) -> None:
    # On PostgreSQL each replica has its own connection pool, as separate processes
    # would; SQLite serves one process, so there the two share their Database.
    second_db = Database(database_url) if database.engine.dialect.name == "postgresql" else database
    try:
        replicas = [
            await make_replica(database, session_id, "a", runs=3),
            await make_replica(second_db, session_id, "b", runs=3),
        ]
        counts: list[int] = []

        async def run(number: int) -> None:
            replica = replicas[number % 2]
            run_id = f"run-{number:02d}"
            await replica.queue(run_id, f"U{number}")
            await replica.admission.wait(run_id, f"U{number}")
            counts.append(await replica.store.count_running(alive=await replica.instances.alive()))
            await asyncio.sleep(0.01)  # some work, so that runs overlap
            await replica.end(run_id)

        await asyncio.wait_for(asyncio.gather(*(run(n) for n in range(20))), 120)
        assert len(counts) == 20
        assert max(counts) <= 3
        states = {await replicas[0].state(f"run-{n:02d}") for n in range(20)}
        assert states == {"finished"}
    finally:
        if second_db is not database:
            await second_db.close()


async def test_admission_steps_of_two_replicas_never_overlap(
    database_url: str, database: Database
) -> None:
    second_db = Database(database_url) if database.engine.dialect.name == "postgresql" else database
    try:
        first, second = RunStore(database), RunStore(second_db)
        steps: list[str] = []

        async def other() -> None:
            async with second.admitting() as view:
                steps.append("second enters")
                await view.queued(alive=set())

        async with first.admitting() as view:
            steps.append("first enters")
            task = asyncio.create_task(other())
            await view.queued(alive=set())
            # Give the other step every chance to barge in; the lock must keep it out.
            for _ in range(20):
                await asyncio.sleep(0.005)
            steps.append("first leaves")
        await settle(task)
        assert steps == ["first enters", "first leaves", "second enters"]
    finally:
        if second_db is not database:
            await second_db.close()


async def test_without_caps_runs_start_at_once(database: Database, session_id: int) -> None:
    here = await make_replica(database, session_id, "a", runs=0, runs_per_user=0)
    assert here.admission.unlimited
    positions = Positions()
    for number in range(5):
        await here.queue(f"r{number}", ALICE)
        await settle(here.admission.wait(f"r{number}", ALICE, on_queued=positions))
    assert positions.seen == []
    assert {await here.state(f"r{n}") for n in range(5)} == {"running"}


async def test_the_store_queues_in_order_and_admits_once(
    database: Database, session_id: int
) -> None:
    here = await make_replica(database, session_id, "a")
    with pytest.raises(ValueError, match="finished"):
        await here.queue("bad", ALICE, state="finished")
    for run_id in ("q1", "q2", "q3"):
        await here.queue(run_id, ALICE)
    alive = await here.instances.alive()
    assert [r.id for r in await here.store.queued(alive=alive)] == ["q1", "q2", "q3"]
    assert await here.store.admit("q2")
    assert not await here.store.admit("q2")
    assert [r.id for r in await here.store.queued(alive=alive)] == ["q1", "q3"]
    assert await here.store.count_running(alive=alive) == 1
    assert await here.store.count_running(alive=alive, user_id=ALICE) == 1
    assert await here.store.count_running(alive=alive, user_id=BOB) == 0
    assert await here.store.count_running(alive=set()) == 0


def _queued(*users: str) -> list[RunRecord]:
    return [
        RunRecord(
            id=f"q{n}",
            owner="a",
            session_id=1,
            channel_id="C1",
            thread_ts="1.1",
            user_id=user,
            progress_ts=None,
            state="queued",
            cancel_requested_by=None,
            created_at=utcnow(),
        )
        for n, user in enumerate(users)
    ]


@pytest.mark.parametrize(
    ("running", "queue", "me", "runs", "per_user", "expected"),
    [
        ({}, ("A",), "q0", 1, 1, None),
        ({"A": 1}, ("B",), "q0", 1, 0, QueuePosition(ahead=0, reason="deployment")),
        ({"A": 1}, ("B", "C", "D"), "q2", 2, 0, QueuePosition(ahead=2, reason="deployment")),
        ({"A": 1}, ("B", "C"), "q1", 3, 0, None),
        ({"A": 1}, ("A",), "q0", 0, 1, QueuePosition(ahead=0, reason="user")),
        # A's queued run waits for A's slot; B behind it may start.
        ({"A": 1}, ("A", "B"), "q1", 3, 1, None),
        # An earlier run of the same person takes that person's next slot first.
        ({}, ("A", "A"), "q1", 0, 1, QueuePosition(ahead=1, reason="user")),
        # Both caps: the person's cap is named first.
        ({"A": 2}, ("A",), "q0", 2, 2, QueuePosition(ahead=0, reason="user")),
    ],
)
def test_place_in_queue(
    running: dict[str, int],
    queue: tuple[str, ...],
    me: str,
    runs: int,
    per_user: int,
    expected: QueuePosition | None,
) -> None:
    queued = _queued(*queue)
    user = next(r.user_id for r in queued if r.id == me)
    limits = LimitsConfig(runs=runs, runs_per_user=per_user)
    assert place_in_queue(me, user, running=running, queued=queued, limits=limits) == expected


def test_place_in_queue_refuses_a_run_that_is_not_queued() -> None:
    with pytest.raises(ValueError, match="not queued"):
        place_in_queue("q9", "A", running={}, queued=_queued("A"), limits=LimitsConfig())


async def test_a_release_costs_one_admission_step_however_many_runs_wait(
    database: Database, session_id: int
) -> None:
    # Forty waiters woken by one release must not each query the queue: that would
    # make a long queue quadratic in database work.
    here = await make_replica(database, session_id, "a", runs=1, poll_s=3600)
    await here.queue("r0", ALICE)
    await settle(here.admission.wait("r0", ALICE))
    tasks, all_positions = [], []
    for n in range(1, 41):
        await here.queue(f"r{n}", f"U{n}")
        positions = Positions()
        all_positions.append(positions)
        tasks.append(waiting(here, f"r{n}", f"U{n}", positions))
    for positions in all_positions:
        await positions.reach(1)
    statements: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "runs" in statement:
            statements.append(statement)

    event.listen(database.engine.sync_engine, "before_cursor_execute", count)
    try:
        await here.end("r0")
        await settle(tasks[0])
        await all_positions[1].reach(2)  # the next one moved up: the pass is over
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", count)
    assert await here.state("r1") == "running"
    assert all(not task.done() for task in tasks[1:])
    # finish (1) + one pass: queued, running counts, admit (3); never one per waiter.
    assert len(statements) <= 6, statements
    for task in tasks[1:]:
        task.cancel()
    await asyncio.gather(*tasks[1:], return_exceptions=True)
