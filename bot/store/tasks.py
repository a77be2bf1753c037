"""Sub-agent tasks, their logs, and the hand-over of background results, persisted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, case, func, insert, literal, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.database import Database
from bot.store.models import (
    TaskLogRow,
    TaskMessageRow,
    TaskRow,
    TaskSequenceRow,
    UsageRow,
    as_utc,
    storable,
    utcnow,
)

TaskState = Literal["running", "completed", "failed", "cancelled"]
# What became of an isolated child's branch: waiting for a person (pending), being
# merged now (merging: the claim that keeps two clicks from merging twice), merged,
# discarded.
MergeState = Literal["pending", "merging", "merged", "discarded"]
FINISHED_STATES: tuple[TaskState, ...] = ("completed", "failed", "cancelled")

# PostgreSQL: held (two-key form: this constant, the session) by the transaction that
# counts a session's running background tasks and records one more, so that across
# replicas counting and recording are one step. "task" in ASCII; the two-key lock space
# is apart from the one-key locks of bot/store/database.py and bot/store/runs.py.
BACKGROUND_LOCK = 0x7461736B
# How long a finished member of a background group waits for the rest of its group.
GROUP_WAIT = timedelta(minutes=30)


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTask:
    """A task to record: who runs what, where (`TaskStore.create`, `create_backgrounds`)."""

    session_id: int
    channel_id: str | None
    agent: str
    description: str
    prompt: str
    started_by: str | None
    owner: str | None = None
    parent_id: str | None = None
    depth: int = 1
    group: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """A task as stored: who ran what, where, and how it ended."""

    id: str
    session_id: int
    channel_id: str | None
    agent: str
    description: str
    prompt: str
    background: bool
    state: TaskState
    started_by: str | None
    result: str | None
    error: str | None
    prompt_tokens: int
    completion_tokens: int
    delivered: bool
    created_at: datetime
    finished_at: datetime | None
    parent_id: str | None = None
    depth: int = 1
    group: str | None = None
    branch: str | None = None
    branch_commit: str | None = None
    change: str | None = None
    merge_state: MergeState | None = None
    handoff: str | None = None

    @property
    def duration_s(self) -> float | None:
        if self.finished_at is None:
            return None
        return (as_utc(self.finished_at) - as_utc(self.created_at)).total_seconds()


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDetail:
    """A task with its whole log."""

    task: TaskRecord
    log: tuple[str, ...]


def _task_row(task: NewTask, task_id: str, *, background: bool) -> TaskRow:
    return TaskRow(
        owner=task.owner,
        id=task_id,
        session_id=task.session_id,
        channel_id=task.channel_id,
        agent=task.agent,
        description=storable(task.description) or "",
        prompt=storable(task.prompt) or "",
        background=background,
        started_by=task.started_by,
        parent_id=task.parent_id,
        depth=task.depth,
        group_name=task.group,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """How a task ended, to record (`TaskStore.write`, `finish`)."""

    task_id: str
    state: TaskState
    result: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    handoff: str | None = None
    branch: str | None = None
    branch_commit: str | None = None
    change: str | None = None
    # When the task ended (its `finish` was asked); None: when it is written.
    finished_at: datetime | None = None


_LOG_INSERT = insert(TaskLogRow)
# Endings recorded per UPDATE statement (a batch of more takes several).
_ENDINGS_PER_UPDATE = 100


async def _end_all(session: AsyncSession, endings: Sequence[Ending]) -> dict[str, TaskRow]:
    """Record each ending while its task is running (the first ending wins, in the
    batch too); the rows ended, by task id.

    One UPDATE for up to a hundred endings, each column set per task with a CASE: the
    sixteen endings of a fan-out are one statement, not sixteen (each a round trip to
    the database, and with SQLite several thread hops).
    """
    by_task: dict[str, Ending] = {}
    for ending in endings:
        by_task.setdefault(ending.task_id, ending)
    # In task id order: replicas ending overlapping sets lock their rows in one order,
    # so the statements of a large batch cannot deadlock each other's.
    firsts = sorted(by_task.values(), key=lambda e: e.task_id)
    ended: dict[str, TaskRow] = {}
    now = utcnow()
    for start in range(0, len(firsts), _ENDINGS_PER_UPDATE):
        chunk = firsts[start : start + _ENDINGS_PER_UPDATE]
        spent = await _spent(
            session, [e.task_id for e in chunk if e.prompt_tokens == e.completion_tokens == 0]
        )
        chunk = [
            replace(e, prompt_tokens=spent[e.task_id][0], completion_tokens=spent[e.task_id][1])
            if e.task_id in spent
            else e
            for e in chunk
        ]
        values: dict[str, Any] = {
            "state": _per_task(chunk, "state", lambda e: e.state),
            "result": _per_task(chunk, "result", lambda e: storable(e.result)),
            "error": _per_task(chunk, "error", lambda e: storable(e.error)),
            "prompt_tokens": _per_task(chunk, "prompt_tokens", lambda e: e.prompt_tokens),
            "completion_tokens": _per_task(
                chunk, "completion_tokens", lambda e: e.completion_tokens
            ),
            "finished_at": _per_task(chunk, "finished_at", lambda e: e.finished_at or now),
            "handoff": _per_task(chunk, "handoff", lambda e: e.handoff),
        }
        # A branch recorded already (the work a crashed child left) stays.
        branched = [e for e in chunk if e.branch]
        if branched:
            values |= {
                "branch": _per_task(branched, "branch", lambda e: e.branch, keep=True),
                "branch_commit": _per_task(
                    branched, "branch_commit", lambda e: e.branch_commit, keep=True
                ),
                "change": _per_task(branched, "change", lambda e: e.change, keep=True),
                "merge_state": _per_task(branched, "merge_state", lambda e: "pending", keep=True),
            }
        rows = await session.exec(
            update(TaskRow)
            .where(
                col(TaskRow.id).in_([e.task_id for e in chunk]),
                col(TaskRow.state) == "running",
            )
            .values(**values)
            .returning(TaskRow)
            .execution_options(synchronize_session=False)
        )
        ended |= {row.id: row for row in rows.scalars()}
    return ended


def _per_task(
    endings: Sequence[Ending], name: str, value: Callable[[Ending], object], *, keep: bool = False
) -> ColumnElement[Any]:
    """`name`'s new value for each ending's task, as one CASE on the task id; `keep`:
    other tasks keep their value (else the endings are all the rows updated)."""
    table = TaskRow.__table__
    column = table.c[name]
    return case(
        {e.task_id: literal(value(e), column.type) for e in endings},
        value=table.c.id,
        else_=column if keep else None,
    )


async def _spent(session: AsyncSession, task_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """What the usage ledger has each task's model calls spending (tasks ended from
    outside have no count of their own)."""
    if not task_ids:
        return {}
    totals = await session.exec(
        select(
            UsageRow.task_id,
            func.coalesce(func.sum(UsageRow.prompt_tokens), 0),
            func.coalesce(func.sum(UsageRow.completion_tokens), 0),
        )
        .where(col(UsageRow.task_id).in_(task_ids))
        .group_by(UsageRow.task_id)
    )
    spent = {task_id: (0, 0) for task_id in task_ids}
    spent |= {task_id: (int(p), int(c)) for task_id, p, c in totals if task_id is not None}
    return spent


def _record(row: TaskRow) -> TaskRecord:
    return TaskRecord(
        id=row.id,
        session_id=row.session_id,
        channel_id=row.channel_id,
        agent=row.agent,
        description=row.description,
        prompt=row.prompt,
        background=row.background,
        state=row.state,  # type: ignore[arg-type]
        started_by=row.started_by,
        result=row.result,
        error=row.error,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        delivered=row.delivered,
        created_at=as_utc(row.created_at),
        finished_at=as_utc(row.finished_at) if row.finished_at else None,
        parent_id=row.parent_id,
        depth=row.depth,
        group=row.group_name,
        branch=row.branch,
        branch_commit=row.branch_commit,
        change=row.change,
        merge_state=row.merge_state,  # type: ignore[arg-type]
        handoff=row.handoff,
    )


class TaskStore:
    """Narrow async access to the tasks tables."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def next_id(self, agent: str) -> str:
        """A new `task-{agent}-{n}`, unique across restarts and processes."""
        for _ in range(5):
            async with self.database.sessions() as session:
                # The UPDATE comes first so the transaction takes the write lock at once.
                result = await session.exec(
                    update(TaskSequenceRow)
                    .where(col(TaskSequenceRow.agent) == agent)
                    .values(last=TaskSequenceRow.last + 1)
                )
                if result.rowcount == 0:
                    session.add(TaskSequenceRow(agent=agent, last=1))
                    try:
                        await session.commit()
                    except IntegrityError:
                        continue
                    return f"task-{agent}-1"
                row = await session.get(TaskSequenceRow, agent)
                assert row is not None
                number = row.last
                await session.commit()
                return f"task-{agent}-{number}"
        raise RuntimeError(f"could not allocate a task id for {agent!r}")

    async def create(
        self,
        *,
        task_id: str,
        session_id: int,
        channel_id: str | None,
        agent: str,
        description: str,
        prompt: str,
        background: bool,
        started_by: str | None,
        owner: str | None = None,
        parent_id: str | None = None,
        depth: int = 1,
        group: str | None = None,
    ) -> TaskRecord:
        task = NewTask(
            session_id=session_id,
            channel_id=channel_id,
            agent=agent,
            description=description,
            prompt=prompt,
            started_by=started_by,
            owner=owner,
            parent_id=parent_id,
            depth=depth,
            group=group,
        )
        row = _task_row(task, task_id, background=background)
        async with self.database.sessions() as session:
            session.add(row)
            await session.commit()
            return _record(row)

    async def create_backgrounds(
        self, limit: int, tasks: Sequence[NewTask]
    ) -> list[TaskRecord | None]:
        """Record new running background tasks with new ids, in order, each unless its
        session has `limit` running already (counting the ones recorded before it here):
        None for those, and no id is used up.

        Counting and recording are one transaction, serialised per session across the
        deployment: on PostgreSQL by ``pg_advisory_xact_lock(BACKGROUND_LOCK, session)``
        (taken in session order, so two batches never wait on each other crosswise); on
        SQLite by the database's single writer, taken at once by the transaction's first
        statement (a write), so a racing start waits and then counts these. Sixteen
        children started together make one transaction, not sixteen in a row.
        """
        if not tasks:
            return []
        sessions = sorted({task.session_id for task in tasks})
        async with self.database.sessions() as session:
            if self.database.engine.dialect.name == "postgresql":
                for session_id in sessions:
                    await session.exec(
                        select(func.pg_advisory_xact_lock(BACKGROUND_LOCK, _int4(session_id)))
                    )
            else:
                # The write lock first (a no-op write), then the counts are current.
                await session.exec(
                    update(TaskSequenceRow)
                    .where(col(TaskSequenceRow.agent) == "")
                    .values(last=TaskSequenceRow.last)
                )
            running = dict.fromkeys(sessions, 0)
            counted = await session.exec(
                select(TaskRow.session_id, func.count())
                .where(
                    col(TaskRow.session_id).in_(sessions),
                    TaskRow.state == "running",
                    TaskRow.background == True,  # noqa: E712
                )
                .group_by(col(TaskRow.session_id))
            )
            running.update({session_id: count for session_id, count in counted.all()})
            admitted: list[bool] = []
            for task in tasks:
                admitted.append(running[task.session_id] < limit)
                running[task.session_id] += admitted[-1]
            # Numbers a block per agent, the agents in order: two replicas' batches then
            # take the sequence rows' locks in one order, never crosswise.
            wanted = Counter(task.agent for task, ok in zip(tasks, admitted, strict=True) if ok)
            numbers: dict[str, Iterator[int]] = {}
            for agent in sorted(wanted):
                last = await _take_numbers(session, agent, wanted[agent])
                numbers[agent] = iter(range(last - wanted[agent] + 1, last + 1))
            rows: list[TaskRow | None] = []
            for task, ok in zip(tasks, admitted, strict=True):
                if not ok:
                    rows.append(None)
                    continue
                task_id = f"task-{task.agent}-{next(numbers[task.agent])}"
                row = _task_row(task, task_id, background=True)
                session.add(row)
                rows.append(row)
            await session.commit()
            return [None if row is None else _record(row) for row in rows]

    async def append_log(self, task_id: str, lines: Sequence[str]) -> None:
        await self.append_logs([(task_id, lines)])

    async def append_logs(self, entries: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Several tasks' lines in one transaction, in the order given."""
        await self.write(entries, [])

    async def finish(
        self,
        task_id: str,
        *,
        state: TaskState,
        result: str | None,
        error: str | None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        handoff: str | None = None,
        branch: str | None = None,
        branch_commit: str | None = None,
        change: str | None = None,
    ) -> TaskRecord | None:
        """End a running task; None if it had already ended (the first ending wins)."""
        ending = Ending(
            task_id=task_id,
            state=state,
            result=result,
            error=error,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            handoff=handoff,
            branch=branch,
            branch_commit=branch_commit,
            change=change,
        )
        [record] = await self.write([], [ending])
        return record

    async def write(
        self, logs: Sequence[tuple[str, Sequence[str]]], endings: Sequence[Ending]
    ) -> list[TaskRecord | None]:
        """Log lines, then task endings, in one transaction (a group commit); for each
        ending its ended record, or None if the task had already ended (the first
        ending wins).

        A task ended from outside (cancelled, here or on another replica; failed by a
        shutdown) has no count of its own: what its model calls spent so far, as the
        usage ledger has it, is recorded instead, so its cost does not read as zero.
        """
        now = utcnow()
        rows = [
            {"task_id": task_id, "line": storable(line), "created_at": now}
            for task_id, lines in logs
            for line in lines
        ]
        if not rows and not endings:
            return []
        async with self.database.sessions() as session:
            if rows:
                # One INSERT of many rows, in order (ids read the log back in order): as
                # ORM objects each line was a statement of its own, since their ids
                # would have had to come back.
                await session.exec(_LOG_INSERT, params=rows)  # type: ignore[call-overload]
            ended = await _end_all(session, endings)
            await session.commit()
        # Each ended record comes back with its update: no second read. A task ended
        # twice in the batch is told to its first ending only.
        answers: list[TaskRecord | None] = []
        for ending in endings:
            row = ended.pop(ending.task_id, None)
            answers.append(_record(row) if row is not None else None)
        return answers

    async def states(self, task_ids: Sequence[str]) -> dict[str, str]:
        if not task_ids:
            return {}
        async with self.database.sessions() as session:
            rows = await session.exec(
                select(TaskRow.id, TaskRow.state).where(col(TaskRow.id).in_(task_ids))
            )
            return dict(rows.all())

    async def get(self, task_id: str) -> TaskRecord | None:
        async with self.database.sessions() as session:
            row = await session.get(TaskRow, task_id)
            return _record(row) if row else None

    async def log(self, task_id: str) -> tuple[str, ...]:
        async with self.database.sessions() as session:
            result = await session.exec(
                select(TaskLogRow.line)
                .where(TaskLogRow.task_id == task_id)
                .order_by(col(TaskLogRow.id))
            )
            return tuple(result.all())

    async def list(
        self,
        *,
        session_id: int | None = None,
        channel_id: str | None = None,
        started_by: str | None = None,
        limit: int = 50,
    ) -> list[TaskRecord]:
        """Newest first, scoped to a session, a channel or a person (never unscoped)."""
        if session_id is None and channel_id is None and started_by is None:
            raise ValueError("listing tasks needs a session, a channel or a person")
        query = select(TaskRow)
        if session_id is not None:
            query = query.where(TaskRow.session_id == session_id)
        if channel_id is not None:
            query = query.where(TaskRow.channel_id == channel_id)
        if started_by is not None:
            query = query.where(TaskRow.started_by == started_by)
        query = query.order_by(col(TaskRow.created_at).desc(), col(TaskRow.id).desc())
        async with self.database.sessions() as session:
            result = await session.exec(query.limit(limit))
            return [_record(row) for row in result.all()]

    async def count_running(self, *, session_id: int, background: bool | None = None) -> int:
        query = (
            select(func.count())
            .select_from(TaskRow)
            .where(TaskRow.session_id == session_id, TaskRow.state == "running")
        )
        if background is not None:
            query = query.where(TaskRow.background == background)
        async with self.database.sessions() as session:
            return int((await session.exec(query)).one())

    async def counts(
        self,
        *,
        session_id: int | None = None,
        channel_id: str | None = None,
        started_by: str | None = None,
    ) -> tuple[int, int]:
        """(running, finished) tasks in a session, a channel, or started by a person."""
        query = select(TaskRow.state, func.count()).group_by(TaskRow.state)
        if session_id is not None:
            query = query.where(TaskRow.session_id == session_id)
        if channel_id is not None:
            query = query.where(TaskRow.channel_id == channel_id)
        if started_by is not None:
            query = query.where(TaskRow.started_by == started_by)
        async with self.database.sessions() as session:
            rows = (await session.exec(query)).all()
        running = sum(n for state, n in rows if state == "running")
        return running, sum(n for state, n in rows if state != "running")

    async def drain_finished(self, session_id: int) -> list[TaskRecord]:
        """Hand over the session's finished background tasks, each exactly once.

        Each row is claimed by a conditional UPDATE, so two turns racing on one
        session (or two replicas) can never both receive the same result. Tasks of a
        group (one parent's tasks of one group name) wait until none of it runs, then
        come together.
        """
        async with self.database.sessions() as session:
            busy_groups = set(
                (
                    await session.exec(
                        select(TaskRow.parent_id, TaskRow.group_name).where(
                            TaskRow.session_id == session_id,
                            TaskRow.background == True,  # noqa: E712
                            TaskRow.state == "running",
                            col(TaskRow.group_name).is_not(None),
                        )
                    )
                ).all()
            )
            rows = (
                await session.exec(
                    select(TaskRow.id, TaskRow.parent_id, TaskRow.group_name, TaskRow.finished_at)
                    .where(
                        TaskRow.session_id == session_id,
                        TaskRow.background == True,  # noqa: E712
                        TaskRow.delivered == False,  # noqa: E712
                        col(TaskRow.state).in_(FINISHED_STATES),
                    )
                    .order_by(col(TaskRow.finished_at), col(TaskRow.id))
                )
            ).all()
        # A group is one parent's: a lead's group and the main agent's of one name differ.
        # A member that has waited GROUP_WAIT for the rest goes without them, so a group
        # kept busy (a task started under its name again and again) holds nothing forever.
        overdue = utcnow() - GROUP_WAIT
        candidates = [
            task_id
            for task_id, parent_id, group, finished_at in rows
            if group is None
            or (parent_id, group) not in busy_groups
            or (finished_at is not None and as_utc(finished_at) < overdue)
        ]
        claimed: list[TaskRecord] = []
        for task_id in candidates:
            async with self.database.sessions() as session:
                outcome = await session.exec(
                    update(TaskRow)
                    .where(col(TaskRow.id) == task_id, col(TaskRow.delivered) == False)  # noqa: E712
                    .values(delivered=True)
                )
                await session.commit()
            if outcome.rowcount == 1 and (record := await self.get(task_id)):
                claimed.append(record)
        return claimed

    async def add_message(self, task_id: str, *, author: str, text: str) -> None:
        """Keep a steering message for a task until the process running it takes it."""
        async with self.database.sessions() as session:
            session.add(TaskMessageRow(task_id=task_id, author=author, text=storable(text) or ""))
            await session.commit()

    async def waiting_messages(self, task_id: str) -> int:
        """How many steering messages wait for the task's next step."""
        async with self.database.sessions() as session:
            query = (
                select(func.count())
                .select_from(TaskMessageRow)
                .where(
                    TaskMessageRow.task_id == task_id,
                    TaskMessageRow.taken == False,  # noqa: E712
                )
            )
            return int((await session.exec(query)).one())

    async def take_messages(self, task_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        """Claim the waiting steering messages of `task_ids`, oldest first, each once:
        (task id, author, text)."""
        if not task_ids:
            return []
        async with self.database.sessions() as session:
            rows = (
                await session.exec(
                    select(TaskMessageRow)
                    .where(
                        col(TaskMessageRow.task_id).in_(task_ids),
                        TaskMessageRow.taken == False,  # noqa: E712
                    )
                    .order_by(col(TaskMessageRow.id))
                )
            ).all()
        taken = []
        for row in rows:
            async with self.database.sessions() as session:
                outcome = await session.exec(
                    update(TaskMessageRow)
                    .where(col(TaskMessageRow.id) == row.id, col(TaskMessageRow.taken) == False)  # noqa: E712
                    .values(taken=True)
                )
                await session.commit()
            if outcome.rowcount == 1:
                taken.append((row.task_id, row.author, row.text))
        return taken

    async def record_branch(self, task_id: str, *, branch: str, commit: str, change: str) -> None:
        """Name the branch holding an ended task's work (kept when it was cancelled)."""
        async with self.database.sessions() as session:
            await session.exec(
                update(TaskRow)
                .where(col(TaskRow.id) == task_id, col(TaskRow.branch).is_(None))
                .values(branch=branch, branch_commit=commit, change=change, merge_state="pending")
            )
            await session.commit()

    async def move_merge_state(
        self, task_id: str, *, old: MergeState, new: MergeState
    ) -> TaskRecord | None:
        """Move an isolated task's branch from `old` to `new`; None if it was not `old`
        (someone else merged or discarded it first)."""
        async with self.database.sessions() as session:
            outcome = await session.exec(
                update(TaskRow)
                .where(col(TaskRow.id) == task_id, col(TaskRow.merge_state) == old)
                .values(merge_state=new)
            )
            await session.commit()
            if outcome.rowcount == 0:
                return None
        return await self.get(task_id)

    async def fail_orphans(self, reason: str, *, alive: set[str]) -> list[TaskRecord]:
        """Fail running tasks whose owning process is gone; return them."""
        async with self.database.sessions() as session:
            query = select(TaskRow.id).where(
                TaskRow.state == "running",
                col(TaskRow.owner).is_(None) | col(TaskRow.owner).not_in(alive),
            )
            ids = (await session.exec(query)).all()
        failed = []
        for task_id in ids:
            if record := await self.finish(task_id, state="failed", result=None, error=reason):
                failed.append(record)
        return failed


async def _take_numbers(session: AsyncSession, agent: str, count: int) -> int:
    """Take the agent's next `count` task numbers inside `session`'s transaction (an
    upsert); the last of them is returned."""
    bind = session.get_bind()
    insert = postgresql.insert if bind.dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(TaskSequenceRow)
        .values(agent=agent, last=count)
        .on_conflict_do_update(
            index_elements=[col(TaskSequenceRow.agent)],
            set_={"last": col(TaskSequenceRow.last) + count},
        )
        .returning(col(TaskSequenceRow.last))
    )
    return int((await session.exec(statement)).scalar_one())


def _int4(number: int) -> int:
    """`number` folded into PostgreSQL's int4 (two-key advisory locks take int4 keys)."""
    return (number + 2**31) % 2**32 - 2**31
