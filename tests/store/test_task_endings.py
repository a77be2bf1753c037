"""Task endings and log lines written together (`TaskStore.write`), on SQLite and, when
BATON_TEST_POSTGRES_URL is set, on PostgreSQL.

The endings of a batch are one UPDATE (a CASE per column on the task id) and its log
lines one INSERT: these tests hold each ending to its own task, the first ending of a
task to win (in the batch too), and the lines to keep their order.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from bot.store import Database, SessionKey, SessionStore
from bot.store.tasks import Ending, NewTask, TaskStore
from bot.store.usage import UsageStore


async def _tasks(database: Database, count: int) -> tuple[TaskStore, list[str]]:
    session = await SessionStore(database).get_or_create(SessionKey.terminal("endings"))
    store = TaskStore(database)
    new = NewTask(
        session_id=session.id, channel_id="C1", agent="coder", description="d", prompt="p",
        started_by="U1",
    )  # fmt: skip
    records = await store.create_backgrounds(count + 1, [new] * count)
    assert all(record is not None for record in records)
    return store, [record.id for record in records if record is not None]


async def test_each_ending_lands_on_its_own_task(database: Database) -> None:
    store, ids = await _tasks(database, 4)
    endings = [
        Ending(task_id=ids[0], state="completed", result="first", prompt_tokens=10,
               completion_tokens=2, handoff='{"status": "complete"}',
               branch=f"baton/{ids[0]}", branch_commit="a" * 40, change="1 file"),
        Ending(task_id=ids[1], state="failed", error="it broke", prompt_tokens=3,
               completion_tokens=1),
        Ending(task_id=ids[2], state="cancelled", error="cancelled by U2", prompt_tokens=7,
               completion_tokens=5),
        Ending(task_id=ids[3], state="completed", result=None, prompt_tokens=1,
               completion_tokens=1, branch=f"baton/{ids[3]}", branch_commit="b" * 40,
               change="2 files"),
    ]  # fmt: skip
    answers = await store.write([], endings)

    assert [answer.id if answer else None for answer in answers] == ids
    for ending, answer in zip(endings, answers, strict=True):
        stored = await store.get(ending.task_id)
        assert stored is not None and answer is not None
        for record in (answer, stored):
            assert record.state == ending.state
            assert record.result == ending.result
            assert record.error == ending.error
            assert (record.prompt_tokens, record.completion_tokens) == (
                ending.prompt_tokens, ending.completion_tokens,
            )  # fmt: skip
            assert record.branch == ending.branch
            assert record.branch_commit == ending.branch_commit
            assert record.change == ending.change
            assert record.merge_state == ("pending" if ending.branch else None)
            assert record.finished_at is not None
    assert answers[0] is not None and answers[0].handoff == '{"status": "complete"}'


async def test_the_first_ending_of_a_task_wins_within_a_batch_and_after_it(
    database: Database,
) -> None:
    store, [task, other] = await _tasks(database, 2)
    answers = await store.write(
        [],
        [
            Ending(task_id=task, state="completed", result="the child's answer",
                   prompt_tokens=4, completion_tokens=4),
            Ending(task_id=task, state="cancelled", error="cancelled late", prompt_tokens=9,
                   completion_tokens=9),
            Ending(task_id=other, state="completed", result="other", prompt_tokens=1,
                   completion_tokens=1),
        ],
    )  # fmt: skip
    assert answers[0] is not None and answers[0].state == "completed"
    assert answers[1] is None  # told once, to its first ending
    assert answers[2] is not None and answers[2].result == "other"

    # A later batch cannot end it again, nor change what it recorded.
    again = await store.write(
        [], [Ending(task_id=task, state="failed", error="late", branch="baton/x")]
    )
    assert again == [None]
    stored = await store.get(task)
    assert stored is not None
    assert (stored.state, stored.result, stored.error, stored.branch) == (
        "completed", "the child's answer", None, None,
    )  # fmt: skip


async def test_an_ending_without_counts_takes_the_ledger_s(database: Database) -> None:
    store, [spent, idle, counted] = await _tasks(database, 3)
    usage = UsageStore(database)
    for prompt, completion in ((100, 20), (50, 5)):
        await usage.record(
            day=date.today(), user_id="U1", channel_id="C1", run_id=None, task_id=spent,
            model="m", prompt_tokens=prompt, completion_tokens=completion,
        )  # fmt: skip
    answers = await store.write(
        [],
        [
            Ending(task_id=spent, state="cancelled", error="cancelled"),
            Ending(task_id=idle, state="failed", error="shut down"),
            Ending(task_id=counted, state="completed", result="ok", prompt_tokens=7,
                   completion_tokens=3),
        ],
    )  # fmt: skip
    assert [(a.prompt_tokens, a.completion_tokens) for a in answers if a is not None] == [
        (150, 25), (0, 0), (7, 3),
    ]  # fmt: skip


async def test_a_branch_recorded_before_the_ending_stays(database: Database) -> None:
    store, [kept, fresh] = await _tasks(database, 2)
    await store.record_branch(kept, branch=f"baton/{kept}", commit="c" * 40, change="kept work")
    await store.write(
        [],
        [
            Ending(task_id=kept, state="cancelled", error="cancelled"),
            Ending(task_id=fresh, state="completed", result="ok", branch=f"baton/{fresh}",
                   branch_commit="d" * 40, change="new work"),
        ],
    )  # fmt: skip
    first, second = await store.get(kept), await store.get(fresh)
    assert first is not None and second is not None
    assert (first.branch, first.branch_commit, first.change, first.merge_state) == (
        f"baton/{kept}", "c" * 40, "kept work", "pending",
    )  # fmt: skip
    assert (second.branch, second.change) == (f"baton/{fresh}", "new work")


async def test_lines_are_stored_in_order_before_the_endings(database: Database) -> None:
    store, ids = await _tasks(database, 2)
    lines = [(ids[0], ("one", "two")), (ids[1], ("alpha",)), (ids[0], ("three",))]
    answers = await store.write(lines, [Ending(task_id=ids[0], state="completed", result="r")])
    assert answers[0] is not None
    assert await store.log(ids[0]) == ("one", "two", "three")
    assert await store.log(ids[1]) == ("alpha",)
    # Lines alone, many at once, keep their order too.
    await store.append_logs([(ids[1], tuple(f"line {n}" for n in range(300)))])
    assert await store.log(ids[1]) == ("alpha", *(f"line {n}" for n in range(300)))


async def test_a_batch_larger_than_one_statement_ends_every_task(database: Database) -> None:
    store, ids = await _tasks(database, 230)
    endings = [
        Ending(task_id=task_id, state="completed", result=f"result {n}", prompt_tokens=n + 1,
               completion_tokens=1)
        for n, task_id in enumerate(ids)
    ]  # fmt: skip
    answers = await store.write([], endings)
    assert [a.result if a else None for a in answers] == [f"result {n}" for n in range(230)]
    for n in (0, 99, 100, 229):
        stored = await store.get(ids[n])
        assert stored is not None and (stored.result, stored.prompt_tokens) == (
            f"result {n}", n + 1,
        )  # fmt: skip


async def test_hostile_results_are_stored_as_text(database: Database) -> None:
    """What a child writes is data: quotes, SQL, CASE words and long text are stored as
    they are, and touch no other task."""
    store, [task, bystander] = await _tasks(database, 2)
    hostile = (
        "'; UPDATE tasks SET state = 'completed' WHERE 1=1; --\n"
        "END) WHEN tasks.id THEN 'x' ELSE result END, \"quoted\" \\ $1 %s :id " + "Ω" * 50_000
    )
    answers = await store.write(
        [(task, (hostile,))],
        [Ending(task_id=task, state="failed", error=hostile, result=hostile,
                prompt_tokens=1, completion_tokens=1)],
    )  # fmt: skip
    assert answers[0] is not None and answers[0].result == hostile
    assert await store.log(task) == (hostile,)
    untouched = await store.get(bystander)
    assert untouched is not None
    assert (untouched.state, untouched.result, untouched.finished_at) == ("running", None, None)


async def test_each_task_keeps_its_own_end_time_and_results_come_in_that_order(
    database: Database,
) -> None:
    """Endings written together keep the times they ended at (not the write's), so
    results are handed over in the order the children finished, whatever their ids."""
    store, ids = await _tasks(database, 11)
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    # Finished in the order task 9, task 10, task 1, ...: not their ids' order as text.
    order = [ids[9], ids[10], ids[1], *ids[2:9], ids[0]]
    endings = [
        Ending(task_id=task_id, state="completed", result=f"r{n}", prompt_tokens=1,
               completion_tokens=1, finished_at=start + timedelta(seconds=n))
        for n, task_id in enumerate(order)
    ]  # fmt: skip
    answers = await store.write([], list(reversed(endings)))
    assert all(answer is not None for answer in answers)
    for n, task_id in enumerate(order):
        stored = await store.get(task_id)
        assert stored is not None and stored.finished_at == start + timedelta(seconds=n)
    session_id = (await store.get(ids[0])).session_id  # type: ignore[union-attr]
    handed = await store.drain_finished(session_id)
    assert [record.id for record in handed] == order
    # An ending without a time takes the write's.
    store2, [late] = await _tasks(database, 1)
    [record] = await store2.write([], [Ending(task_id=late, state="failed", error="x")])
    assert record is not None and record.finished_at is not None
    assert record.finished_at > start
