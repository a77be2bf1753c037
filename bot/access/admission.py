"""Concurrent-run caps (`limits.runs_per_user`, `limits.runs`) with a visible queue.

A run over a cap is not refused: the caller records it ``queued`` and awaits
`Admission.wait`, which returns once the run is ``running``. Counts come from the
database, so the caps hold for the whole deployment, every replica included.

Order is first come, first served among the runs that could start: a queued run
whose own person is at ``runs_per_user`` does not hold up other people's runs
behind it, and it keeps its place for when one of that person's runs ends.
Runs (running or queued) of processes that are no longer alive count for nothing.

Only the waiter admits its own run, inside one serialised admission step
(`RunStore.admitting`: a PostgreSQL advisory lock across replicas, an asyncio lock
for SQLite's single process), so two processes can never both take the last slot.
A slot freed in this process wakes its waiters at once (`Admission.release`);
one freed elsewhere wakes them through an "admission" signal (on PostgreSQL), and
polling every ``poll_s`` seconds is the fallback should a signal be lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from bot import metrics
from bot.config import LimitsConfig
from bot.errors import BatonError
from bot.store.instances import Instances
from bot.store.runs import QUEUED, RUNNING, RunRecord, RunStore
from bot.store.signals import ADMISSION, Signals, event_or_signal

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuePosition:
    """Where a waiting run stands.

    Attributes:
        ahead: Queued runs that will start before this one: the earlier queued runs
            whose own person is not at ``runs_per_user``. Runs already running are
            not counted. It can be 0 while the run still waits: see ``reason``.
        reason: What holds the run back now. ``"user"``: the person who started it
            has ``runs_per_user`` runs going (or about to, from earlier in the
            queue), so it starts when one of them ends. ``"deployment"``: the
            deployment has ``runs`` runs going, with ``ahead`` queued runs first.
    """

    ahead: int
    reason: Literal["deployment", "user"]


class RunNotQueued(BatonError):
    """A waiting run was finished, or vanished, before it could be admitted."""

    def __init__(self, run_id: str, state: str | None) -> None:
        super().__init__(f"run {run_id} is {state or 'gone'}, no longer queued")
        self.run_id = run_id
        self.state = state


def place_in_queue(
    run_id: str,
    user_id: str,
    *,
    running: Mapping[str, int],
    queued: Sequence[RunRecord],
    limits: LimitsConfig,
) -> QueuePosition | None:
    """Where `run_id` stands in `queued` (FIFO); None when it may start now.

    Args:
        run_id: The run asking; it must be in `queued`.
        user_id: The person who started it.
        running: Running runs of live owners, per person who started them.
        queued: Queued runs of live owners, first come first.
        limits: The caps; 0 is no cap.
    """
    per_user = dict(running)
    ahead = 0
    for run in queued:
        if run.id == run_id:
            break
        if limits.runs_per_user and per_user.get(run.user_id, 0) >= limits.runs_per_user:
            continue  # waits for its own person's runs; does not block the queue
        per_user[run.user_id] = per_user.get(run.user_id, 0) + 1
        ahead += 1
    else:
        raise ValueError(f"run {run_id} is not queued")
    if limits.runs_per_user and per_user.get(user_id, 0) >= limits.runs_per_user:
        return QueuePosition(ahead=ahead, reason="user")
    if limits.runs and sum(running.values()) + ahead >= limits.runs:
        return QueuePosition(ahead=ahead, reason="deployment")
    return None


@dataclass(slots=True)
class _Waiter:
    """A run of this process waiting in `Admission.wait`."""

    user_id: str
    admitted: asyncio.Future[None]
    position: QueuePosition | None = None


class Admission:
    """Lets queued runs start when the caps allow, in order, across replicas.

    One per process, built with this process's `Instances`: a run's owner must be
    ``instances.id``. With both caps 0, `wait` admits at once without queueing.

    A pass admits every run of this process that may start, in one transaction, and
    places the others; however many runs wait, one release costs one pass, not one
    per waiter.
    """

    def __init__(
        self,
        store: RunStore,
        instances: Instances,
        limits: LimitsConfig,
        *,
        poll_s: float = 1.0,
        signals: Signals | None = None,
    ) -> None:
        self.store = store
        self.instances = instances
        self.limits = limits
        self.poll_s = poll_s
        # Tells other replicas' waiters that a slot was freed here; None: they poll.
        self.signals = signals
        self._signalling: set[asyncio.Task[None]] = set()
        self._released = asyncio.Event()
        self._waiters: dict[str, _Waiter] = {}
        self._pass_lock = asyncio.Lock()
        self._passes_started = 0
        self._last_pass_done = 0
        metrics.watch_admission(self)

    @property
    def unlimited(self) -> bool:
        """No cap is set: runs may be recorded ``running`` and need no `wait`."""
        return not self.limits.runs_per_user and not self.limits.runs

    @property
    def waiting(self) -> frozenset[str]:
        """Ids of the runs of this process waiting in `wait` right now."""
        return frozenset(self._waiters)

    def release(self) -> None:
        """A run of this process ended (call it after `RunStore.finish`): wake the waiters."""
        released, self._released = self._released, asyncio.Event()
        released.set()
        if self.signals is not None:
            # Owned until sent; `notify` never raises.
            task = asyncio.create_task(self.signals.notify(ADMISSION), name="admission-signal")
            self._signalling.add(task)
            task.add_done_callback(self._signalling.discard)

    async def wait(
        self,
        run_id: str,
        user_id: str,
        *,
        on_queued: Callable[[QueuePosition], Awaitable[None]] | None = None,
    ) -> None:
        """Return once the run, recorded ``queued``, has been admitted (now ``running``).

        While it must wait, `on_queued` is told its position first and again
        whenever the position changes (a failing `on_queued` is logged, the wait
        goes on). Cancelling the awaiting task leaves no waiter behind; the run
        stays ``queued`` in the database, so the caller must then finish it (and a
        cancel request from another replica reaches the owner through
        `RunStore.cancel_requests`, queued runs included).

        Raises:
            RunNotQueued: The run was finished or removed while it waited.
        """
        if self.unlimited:
            # Nothing to count: one update (a no-op if it was recorded running).
            await self.store.admit(run_id)
            return
        waiter = _Waiter(user_id, asyncio.get_running_loop().create_future())
        self._waiters[run_id] = waiter
        # A slot freed on another replica; subscribed before the first look.
        freed = self.signals.subscribe(ADMISSION) if self.signals is not None else None
        try:
            told: QueuePosition | None = None
            while True:
                # Take the event and the pass count before looking, so a release
                # during the look wakes us, and a pass run since is not repeated.
                released, seen = self._released, self._passes_started
                await self._pass(after=seen)
                if waiter.admitted.done():
                    waiter.admitted.result()  # raises RunNotQueued
                    return
                position = waiter.position
                if on_queued is not None and position is not None and position != told:
                    told = position
                    try:
                        await on_queued(position)
                    except Exception:
                        logger.exception("could not show the queue position of run %s", run_id)
                await event_or_signal(released, freed, self.poll_s)
        finally:
            if freed is not None:
                freed.close()
            self._waiters.pop(run_id, None)
            if not waiter.admitted.done():
                waiter.admitted.cancel()
            elif not waiter.admitted.cancelled():
                waiter.admitted.exception()  # seen: a cancel may have come first

    async def _pass(self, *, after: int) -> None:
        """Admit what may start among this process's waiters; place the others.

        Skipped when a pass that began after the caller looked (numbered above
        `after`, the count of passes begun then) has finished: it saw the caller's
        waiter, and its outcome is on every waiter.
        """
        async with self._pass_lock:
            if self._last_pass_done > after:
                return
            self._passes_started += 1
            number = self._passes_started
            try:
                await self._admit_waiters()
            finally:
                self._last_pass_done = number

    async def _admit_waiters(self) -> None:
        waiters = {run_id: w for run_id, w in self._waiters.items() if not w.admitted.done()}
        if not waiters:
            return
        alive = await self.instances.alive()
        async with self.store.admitting() as view:
            queued = await view.queued(alive=alive)
            running = await view.running_by_user(alive=alive)
            for run in list(queued):
                waiter = waiters.get(run.id)
                if waiter is None:
                    continue
                place = place_in_queue(
                    run.id, waiter.user_id, running=running, queued=queued, limits=self.limits
                )
                if place is not None:
                    continue
                if await view.admit(run.id):
                    queued.remove(run)
                    running[run.user_id] = running.get(run.user_id, 0) + 1
                    waiter.admitted.set_result(None)
            for run in queued:
                if (waiter := waiters.get(run.id)) is not None and not waiter.admitted.done():
                    waiter.position = place_in_queue(
                        run.id, waiter.user_id, running=running, queued=queued, limits=self.limits
                    )
        in_queue = {run.id for run in queued}
        for run_id, waiter in waiters.items():
            if waiter.admitted.done() or run_id in in_queue:
                continue
            # Not queued (any more): admitted some other way, or finished while waiting.
            record = await self.store.get(run_id)
            if record is not None and record.state == RUNNING:
                waiter.admitted.set_result(None)
                continue
            state = record.state if record is not None else None
            if state == QUEUED:
                state = "queued by an owner that is not alive"
            waiter.admitted.set_exception(RunNotQueued(run_id, state))
