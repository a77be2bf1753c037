"""The task tracker: the single source of truth for sub-agent tasks (in the database).

It also owns the asyncio tasks of background children in this process, so it can
cancel them, and calls finish callbacks so a surface can tell the thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bot import metrics
from bot.engine.messages import ChatMessage
from bot.errors import SteeringFull, TaskLimitReached
from bot.store.instances import Instances
from bot.store.models import utcnow
from bot.store.signals import TASK, Signals, Subscription
from bot.store.tasks import Ending, NewTask, TaskDetail, TaskRecord, TaskState, TaskStore

logger = logging.getLogger(__name__)

RESTART_REASON = "interrupted by a restart; start it again"
# How often running children check that nobody cancelled them from another process
# (a "task" signal makes them check at once; the sweep is the fallback).
CANCEL_SWEEP_S = 2.0
# Steering messages that may wait for one task's next step at once.
MAX_WAITING_STEERS = 10

FinishCallback = Callable[[TaskRecord], Awaitable[None]]


class TaskTracker:
    """Starts, logs, finishes, lists and cancels tasks; hands results over once."""

    def __init__(
        self,
        store: TaskStore,
        instances: Instances,
        *,
        sweep_s: float = CANCEL_SWEEP_S,
        signals: Signals | None = None,
    ) -> None:
        self.store = store
        self.instances = instances
        self.sweep_s = sweep_s
        # Tells the other replicas that a task ended, and wakes this one's sweep when
        # theirs did; None: the sweep only polls.
        self.signals = signals
        self._sweeper: asyncio.Task[None] | None = None
        self._callbacks: list[FinishCallback] = []
        self._children: dict[str, asyncio.Task[Any]] = {}
        # Children whose ending this process wrote (the child's own, or a cancel here):
        # the sweep, which stops children ended elsewhere, leaves them to end by
        # themselves (a child that just recorded its result must not be cancelled).
        self._ended_here: set[str] = set()
        self._notifications: set[asyncio.Task[None]] = set()
        # Steering taken for children running here, waiting for their next LLM call.
        self._inboxes: dict[str, list[ChatMessage]] = {}
        # Background children running here by session, until their ending is recorded.
        self._running_in: dict[int, set[str]] = {}
        self._session_of: dict[str, int] = {}
        # Log lines waiting for the writer; how many entries were queued and written
        # (or failed) so far, and the flushes waiting for a count to be written.
        self._log_queue: list[tuple[str, tuple[str, ...]]] = []
        self._logs_queued = 0
        self._logs_written = 0
        self._log_flushes: list[tuple[int, asyncio.Future[None]]] = []
        # Endings waiting for the same writer, each with the future its `finish` awaits:
        # stored with the lines queued before them, in one transaction.
        self._end_queue: list[tuple[Ending, asyncio.Future[TaskRecord | None]]] = []
        self._log_writer: asyncio.Task[None] | None = None
        # Background starts waiting for the writer, each with the future its caller
        # awaits: starts asked for meanwhile are recorded in one transaction.
        self._start_queue: list[tuple[int, NewTask, asyncio.Future[TaskRecord]]] = []
        metrics.watch_tasks(self)
        self._start_writer: asyncio.Task[None] | None = None

    def on_finish(self, callback: FinishCallback) -> None:
        """Call `callback` with the record whenever a task ends (also after a restart)."""
        self._callbacks.append(callback)

    async def start(
        self,
        *,
        session_id: int,
        channel_id: str | None,
        agent: str,
        description: str,
        prompt: str,
        background: bool,
        started_by: str | None,
        parent_id: str | None = None,
        depth: int = 1,
        group: str | None = None,
    ) -> TaskRecord:
        task_id = await self.store.next_id(agent)
        return await self.store.create(
            task_id=task_id,
            session_id=session_id,
            channel_id=channel_id,
            agent=agent,
            description=description,
            prompt=prompt,
            background=background,
            started_by=started_by,
            owner=self.instances.id,
            parent_id=parent_id,
            depth=depth,
            group=group,
        )

    async def start_background(
        self,
        *,
        limit: int,
        session_id: int,
        channel_id: str | None,
        agent: str,
        description: str,
        prompt: str,
        started_by: str | None,
        parent_id: str | None = None,
        depth: int = 1,
        group: str | None = None,
    ) -> TaskRecord:
        """Record a background task, unless its session has `limit` running (on any replica).

        Starts asked for meanwhile (a fan-out's task calls) are counted and recorded in
        one transaction, in the order asked: sixteen children start together instead of
        one after another.

        Raises:
            TaskLimitReached: The session has `limit` background tasks running.
        """
        task = NewTask(
            session_id=session_id,
            channel_id=channel_id,
            agent=agent,
            description=description,
            prompt=prompt,
            started_by=started_by,
            owner=self.instances.id,
            parent_id=parent_id,
            depth=depth,
            group=group,
        )
        recorded = asyncio.get_running_loop().create_future()
        self._start_queue.append((limit, task, recorded))
        if self._start_writer is None or self._start_writer.done():
            self._start_writer = asyncio.create_task(self._record_starts(), name="task-starts")
        try:
            return await recorded
        except asyncio.CancelledError:
            # Recorded, but its caller is gone before it could start the child.
            if recorded.done() and not recorded.cancelled() and recorded.exception() is None:
                await asyncio.shield(self._end_unstarted(recorded.result()))
            raise

    async def _record_starts(self) -> None:
        while self._start_queue:
            batch, self._start_queue = self._start_queue, []
            # Starts whose callers went away while queued take no place.
            batch = [entry for entry in batch if not entry[2].done()]
            for limit in dict.fromkeys(limit for limit, _, _ in batch):
                waiting = [(task, done) for each, task, done in batch if each == limit]
                answers = await self._record_together(limit, waiting)
                unstarted: list[TaskRecord] = []
                for (_, done), answer in zip(waiting, answers, strict=True):
                    if done.done():
                        if isinstance(answer, TaskRecord):
                            unstarted.append(answer)  # its caller went away meanwhile
                    elif isinstance(answer, BaseException):
                        done.set_exception(answer)
                    else:
                        done.set_result(answer)
                for record in unstarted:
                    await self._end_unstarted(record)

    async def _record_together(
        self, limit: int, waiting: list[tuple[NewTask, asyncio.Future[TaskRecord]]]
    ) -> list[TaskRecord | BaseException]:
        """Each start's record, or why it was not made. A batch the database refuses is
        tried again one start at a time, so one bad start fails only itself."""
        try:
            records = await self.store.create_backgrounds(limit, [task for task, _ in waiting])
        except Exception as exc:
            if len(waiting) == 1:
                return [exc]
            answers: list[TaskRecord | BaseException] = []
            for entry in waiting:
                answers += await self._record_together(limit, [entry])
            return answers
        return [TaskLimitReached(limit) if record is None else record for record in records]

    async def _end_unstarted(self, record: TaskRecord) -> None:
        """A start recorded for a caller that went away: no child will run it."""
        try:
            await self.finish(record.id, state="cancelled", error="its start was cancelled")
        except Exception:
            logger.exception("could not end %s, whose start was cancelled", record.id)

    async def append_log(self, task_id: str, *lines: str) -> None:
        """Add lines to a task's log, without waiting for them to be stored.

        One writer stores the lines queued meanwhile, in order, in one transaction (a
        group commit): sixteen children logging at once make a few writes, and no child
        waits for the database between its steps. Ending a task, reading it here and
        shutting down wait for the lines queued before them (`flush_logs`).
        """
        if not lines:
            return
        self._log_queue.append((task_id, lines))
        self._logs_queued += 1
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._log_writer is None or self._log_writer.done():
            self._log_writer = asyncio.create_task(self._write(), name="task-log-writer")

    async def flush_logs(self) -> None:
        """Wait until the log lines queued so far are stored (or failed to be); not
        for those others queue meanwhile."""
        if self._logs_written >= self._logs_queued:
            return
        written = asyncio.get_running_loop().create_future()
        self._log_flushes.append((self._logs_queued, written))
        self._wake_writer()  # should a writer have stopped with entries left
        await asyncio.shield(written)

    async def _write(self) -> None:
        """The one writer of log lines and endings: what was queued meanwhile, each
        round in one transaction (lines first)."""
        while self._log_queue or self._end_queue:
            batch, self._log_queue = self._log_queue, []
            endings, self._end_queue = self._end_queue, []
            answers: list[TaskRecord | BaseException | None]
            try:
                answers = await self._store_batch(batch, [ending for ending, _ in endings])
            except BaseException as exc:  # cancelled (a shutdown): nothing may wait for ever
                answers = [exc] * len(endings)
                raise
            finally:
                # Written or not, those entries are done with: nothing waits on them.
                self._logs_written += len(batch)
                waiting, self._log_flushes = self._log_flushes, []
                for target, written in waiting:
                    if target > self._logs_written:
                        self._log_flushes.append((target, written))
                    elif not written.done():
                        written.set_result(None)
                for (ending, ended), answer in zip(endings, answers, strict=True):
                    self._settle(ending, ended, answer)

    def _settle(
        self,
        ending: Ending,
        ended: asyncio.Future[TaskRecord | None],
        answer: TaskRecord | BaseException | None,
    ) -> None:
        """Hand an ending's outcome to its `finish`, and tell the callbacks: here, so a
        `finish` cancelled meanwhile still has its ending told."""
        if isinstance(answer, BaseException):
            if ended.done():
                pass
            elif isinstance(answer, asyncio.CancelledError):
                ended.cancel()
            else:
                ended.set_exception(answer)
            return
        if answer is None:
            self._ended_here.discard(ending.task_id)  # it had ended elsewhere first
        else:
            self._not_running_here(answer.id)
            self._notify(answer)
        if not ended.done():
            ended.set_result(answer)

    async def _store_batch(
        self, batch: list[tuple[str, tuple[str, ...]]], endings: list[Ending]
    ) -> list[TaskRecord | BaseException | None]:
        """Store a round; one the database refuses is tried again part by part, so a bad
        line or ending loses (or fails) only its own."""
        try:
            return list(await self.store.write(batch, endings))
        except Exception as exc:
            if len(endings) == 1 and not batch:
                return [exc]
        await self._store_logs(batch)
        answers: list[TaskRecord | BaseException | None] = []
        for ending in endings:
            try:
                answers += await self.store.write([], [ending])
            except Exception as exc:
                answers.append(exc)
        return answers

    async def _store_logs(self, batch: list[tuple[str, tuple[str, ...]]]) -> None:
        """Store a batch; one the database refuses is tried again entry by entry, so a
        bad line loses only its own entry."""
        try:
            await self.store.append_logs(batch)
        except Exception:
            if len(batch) > 1:
                for entry in batch:
                    await self._store_logs([entry])
                return
            logger.exception("could not store log lines of %s", batch[0][0])

    async def finish(
        self,
        task_id: str,
        *,
        state: TaskState,
        result: str | None = None,
        error: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        handoff: str | None = None,
        branch: str | None = None,
        branch_commit: str | None = None,
        change: str | None = None,
    ) -> TaskRecord | None:
        """End a task; None if it had already ended (the first ending wins).

        The ending goes to the log writer, stored with the lines queued before it (so a
        task seen ended has its whole log) and with the other endings of the moment, in
        one transaction: sixteen children ending together make one or two writes.

        Raises:
            Exception: The database refused this ending.
        """
        running_here = task_id in self._children
        if running_here:
            self._ended_here.add(task_id)
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
            finished_at=utcnow(),  # now, not when the writer gets to it with others
        )
        ended: asyncio.Future[TaskRecord | None] = asyncio.get_running_loop().create_future()
        # Retrieved even when its `finish` went away meanwhile (no "never retrieved").
        ended.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._end_queue.append((ending, ended))
        self._wake_writer()
        # A finish cancelled while queued is still written, and told, by the writer.
        record = await asyncio.shield(ended)
        if record is not None and self.signals is not None and not running_here:
            # A cancel that reached this replica stops the child on its owner at once.
            # A child ending here concerns no other replica's sweep, nor this one's:
            # sixteen endings would wake every replica's sweep sixteen times.
            await self.signals.notify(TASK, task_id)
        return record

    def _notify(self, record: TaskRecord) -> None:
        for callback in self._callbacks:
            task = asyncio.create_task(self._call(callback, record))
            self._notifications.add(task)
            task.add_done_callback(self._notifications.discard)

    @staticmethod
    async def _call(callback: FinishCallback, record: TaskRecord) -> None:
        try:
            await callback(record)
        except Exception:
            logger.exception("finish callback for %s failed", record.id)

    def run_child(
        self, task_id: str, work: Coroutine[Any, Any, None], *, session_id: int | None = None
    ) -> None:
        """Run a background child outside the caller's turn, owned by the tracker; with
        its session, `unended_here` counts it until its ending is recorded."""
        if session_id is not None:
            self._running_in.setdefault(session_id, set()).add(task_id)
            self._session_of[task_id] = session_id
        self.attach(task_id, asyncio.create_task(work, name=task_id))

    def unended_here(self, session_id: int) -> int:
        """Background children of the session running in this process whose ending is not
        recorded yet: no need to ask the database while there are some."""
        return len(self._running_in.get(session_id, ()))

    def _not_running_here(self, task_id: str) -> None:
        session_id = self._session_of.pop(task_id, None)
        if session_id is not None and (running := self._running_in.get(session_id)) is not None:
            running.discard(task_id)
            if not running:
                del self._running_in[session_id]

    def attach(self, task_id: str, child: asyncio.Task[Any]) -> None:
        """Know a running child's asyncio task, so `cancel` can stop it."""
        self._children[task_id] = child

        def gone(_: asyncio.Task[Any]) -> None:
            self._not_running_here(task_id)
            self._children.pop(task_id, None)
            self._ended_here.discard(task_id)
            self._inboxes.pop(task_id, None)

        child.add_done_callback(gone)
        if self._sweeper is None or self._sweeper.done():
            # Subscribed here, not in the sweep, so a signal sent before the sweep
            # first runs is kept for it.
            subscription = self.signals.subscribe(TASK) if self.signals is not None else None
            self._sweeper = asyncio.create_task(self._sweep(subscription), name="task-cancel-sweep")

    async def _sweep(self, subscription: Subscription | None) -> None:
        """Stop children whose task was ended elsewhere (a cancel that reached another replica)."""
        try:
            while self._children:
                if subscription is not None:
                    await subscription.wait(self.sweep_s)
                else:
                    await asyncio.sleep(self.sweep_s)
                await self._stop_ended_elsewhere()
                await self._take_steering()
        finally:
            if subscription is not None:
                subscription.close()

    async def _stop_ended_elsewhere(self) -> None:
        if not self._children:
            return
        try:
            states = await self.store.states(list(self._children))
        except Exception:
            logger.exception("could not check the state of running tasks")
            return
        for task_id, state in states.items():
            child = self._children.get(task_id)
            if state != "running" and child is not None and task_id not in self._ended_here:
                logger.info("task %s ended elsewhere (%s); stopping it here", task_id, state)
                child.cancel()

    async def steer(self, task_id: str, text: str, *, author: str) -> TaskRecord | None:
        """Send a running task a message; it reaches the child before its next LLM call.

        Kept in the database first, so the replica running the child takes it (woken by
        a "task" signal, else by its sweep). None when the task is not running.

        Raises:
            SteeringFull: MAX_WAITING_STEERS messages wait for it already (a flood of
                clicks or calls cannot grow its context and the database without end).
        """
        record = await self.store.get(task_id)
        if record is None or record.state != "running":
            return None
        if await self.store.waiting_messages(task_id) >= MAX_WAITING_STEERS:
            raise SteeringFull(task_id, MAX_WAITING_STEERS)
        await self.store.add_message(task_id, author=author, text=text)
        await self.append_log(task_id, f"✉ {author}: {_one_line(text)}")
        if task_id in self._children:
            await self._take_steering()
        elif self.signals is not None:
            await self.signals.notify(TASK, task_id)
        return record

    async def _take_steering(self) -> None:
        if not self._children:
            return
        try:
            taken = await self.store.take_messages(list(self._children))
        except Exception:
            logger.exception("could not take steering messages for running tasks")
            return
        for task_id, author, text in taken:
            self._inboxes.setdefault(task_id, []).append(
                ChatMessage(
                    role="user",
                    content=f"[Message from {author}, sent while you work]\n{text}",
                )
            )

    def inbox(self, task_id: str) -> list[ChatMessage]:
        """Steering taken for a child running here, handed over once (the engine's inbox)."""
        return self._inboxes.pop(task_id, [])

    def is_running_here(self, task_id: str) -> bool:
        return task_id in self._children

    @property
    def running_here(self) -> int:
        return len(self._children)

    async def wait_for_children(self) -> None:
        """Wait until this process's background children (and their notices) are done."""
        while self._children or self._notifications:
            await asyncio.gather(
                *self._children.values(), *self._notifications, return_exceptions=True
            )

    async def cancel(self, task_id: str, *, by: str | None = None) -> TaskRecord | None:
        """Stop a running task; its state becomes cancelled. None if it was not running."""
        child = self._children.get(task_id)
        reason = f"cancelled by {by}" if by else "cancelled"
        if child is not None:
            await self.append_log(task_id, f"⊘ {reason}")
            record = await self.finish(task_id, state="cancelled", error=reason)
            child.cancel()
            await asyncio.gather(child, return_exceptions=True)
            return record
        # Not ours (another process, or one that died): the database decides.
        return await self.finish(task_id, state="cancelled", error=reason)

    async def drain_completed(self, session_id: int) -> list[TaskRecord]:
        return await self.store.drain_finished(session_id)

    async def get(self, task_id: str) -> TaskDetail | None:
        await self.flush_logs()
        record = await self.store.get(task_id)
        if record is None:
            return None
        return TaskDetail(task=record, log=await self.store.log(task_id))

    async def list(
        self,
        *,
        session_id: int | None = None,
        channel_id: str | None = None,
        started_by: str | None = None,
        limit: int = 50,
    ) -> list[TaskRecord]:
        return await self.store.list(
            session_id=session_id, channel_id=channel_id, started_by=started_by, limit=limit
        )

    async def counts(
        self,
        *,
        session_id: int | None = None,
        channel_id: str | None = None,
        started_by: str | None = None,
    ) -> tuple[int, int]:
        return await self.store.counts(
            session_id=session_id, channel_id=channel_id, started_by=started_by
        )

    async def running_background(self, session_id: int) -> int:
        return await self.store.count_running(session_id=session_id, background=True)

    async def recover(self) -> list[TaskRecord]:
        """Tasks left running by a process that is gone are failed; callbacks hear of it."""
        failed = await self.store.fail_orphans(RESTART_REASON, alive=await self.instances.alive())
        for record in failed:
            logger.warning("task %s was running when Baton stopped; marked failed", record.id)
            self._notify(record)
        return failed

    async def settle(self, grace_s: float) -> None:
        """Let this process's children (and those started meanwhile) finish, for up to
        `grace_s` seconds: what a SIGTERM allows before `interrupt`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self._children and (remaining := deadline - loop.time()) > 0:
            await asyncio.wait(list(self._children.values()), timeout=remaining)

    async def interrupt(self) -> list[TaskRecord]:
        """End every child still running here as interrupted by a restart, in `recover`'s
        words, before it is stopped: a shutdown is not a person's cancel. Written first,
        so the endings the stopped children would write (cancelled) lose to it."""
        interrupted = []
        for task_id in list(self._children):
            try:
                await self.append_log(task_id, f"✗ {RESTART_REASON}")
                record = await self.finish(task_id, state="failed", error=RESTART_REASON)
            except Exception:
                logger.exception("could not record task %s as interrupted", task_id)
                continue
            if record is not None:
                logger.warning("task %s was still running at shutdown; interrupted", task_id)
                interrupted.append(record)
        return interrupted

    async def shutdown(self, grace_s: float = 0.0) -> None:
        """Let this process's children finish for `grace_s` seconds, end those still
        running as interrupted by a restart and stop them, then wait for the notices."""
        if grace_s > 0:
            await self.settle(grace_s)
        if self._start_writer is not None:
            # Starts being recorded now are recorded before the running are ended.
            await asyncio.gather(self._start_writer, return_exceptions=True)
        if self._log_writer is not None:
            # Endings queued already (a finish whose caller went away) are recorded
            # before the running are ended as interrupted.
            await asyncio.gather(self._log_writer, return_exceptions=True)
        await self.interrupt()
        children = list(self._children.values())
        for child in children:
            child.cancel()
        await asyncio.gather(*children, return_exceptions=True)
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await asyncio.gather(*self._notifications, return_exceptions=True)
        await self.flush_logs()


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
