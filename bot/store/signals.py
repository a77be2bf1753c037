"""Wake-ups between replicas: PostgreSQL LISTEN/NOTIFY; within one process, direct.

A signal says only "look again": the database stays the truth, and whoever waits
still polls it now and then. A signal lost (a notify that failed, a listener
connection that was down) therefore costs a poll interval, never a decision.

On PostgreSQL each process holds one dedicated asyncpg connection, outside the
SQLAlchemy pool, that LISTENs on one channel. asyncpg's own `add_listener` hands
notifications over as they arrive on the socket, so another replica reacts within
a network round trip instead of a poll; a pooled connection could not LISTEN (the
pool would hand it to others and reset it). Notifications go out through the pool
with `pg_notify` and bind parameters. The listener connection is watched: once
lost it is opened again in the background, with backoff, and every subscriber is
woken once then, since a signal may have come meanwhile.

On SQLite (one process per database file) signals only wake this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import Any

from sqlalchemy import text

from bot.store.database import Database

logger = logging.getLogger(__name__)

CHANNEL = "baton_signals"
# Topics: a run cancel requested, an approval decided, a task ended or cancelled,
# a message waiting for a thread's running turn, a run slot freed.
CANCEL = "cancel"
APPROVAL = "approval"
TASK = "task"
STEER = "steer"
ADMISSION = "admission"

# PostgreSQL refuses payloads of 8000 bytes or more (default build); keys are cut.
MAX_PAYLOAD_BYTES = 7999
CONNECT_TIMEOUT_S = 5.0
# A notify waits no longer for the database than this: the caller (a click, a task's
# end) must not hang on a signal that the poll would replace anyway.
NOTIFY_TIMEOUT_S = 5.0
# How often an idle listener connection is checked (a silently dead TCP connection
# raises no event), and how long the check may take.
CHECK_EVERY_S = 15.0
CHECK_TIMEOUT_S = 5.0
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 10.0
# Backend pids of the pooled connections this process notified from, newest last; far
# more than a pool holds.
OWN_PIDS_KEPT = 64


class Subscription:
    """Wake-ups on one topic for one waiter; a signal is kept until `wait` takes it."""

    def __init__(self, signals: Signals, topic: str) -> None:
        self.topic = topic
        self._signals = signals
        self._signalled = asyncio.Event()

    def _wake(self) -> None:
        self._signalled.set()

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109 (the agreed API)
        """True as soon as a signal has come since the previous `wait` returned
        (including one that came while nobody waited); False after `timeout` s."""
        if not self._signalled.is_set():
            try:
                async with asyncio.timeout(max(timeout, 0)):
                    await self._signalled.wait()
            except TimeoutError:
                return False
        self._signalled.clear()
        return True

    def close(self) -> None:
        self._signals._unsubscribe(self)


class Signals:
    """Wake-ups between replicas: PostgreSQL LISTEN/NOTIFY; within one process, direct."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.postgres = database.engine.dialect.name == "postgresql"
        self._subscribers: dict[str, set[Subscription]] = {}
        self._connection: Any = None  # asyncpg.Connection, while listening
        self._lost = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False
        # Our own notifications come back through our listener: already delivered here,
        # they are recognised by the sending backend's pid and not delivered twice.
        self._own_pids: OrderedDict[int, None] = OrderedDict()

    async def start(self) -> None:
        """Start listening (PostgreSQL); never raises: a database that is down is retried."""
        if not self.postgres or self._keeper is not None or self._closed:
            return
        try:
            await self._connect()
        except Exception as exc:
            logger.warning("cannot listen for signals yet (%s); retrying", _describe(exc))
            self._lost.set()
        self._keeper = asyncio.create_task(self._keep_listening(), name="signals-listener")

    async def close(self) -> None:
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
            self._keeper = None
        await self._disconnect()

    async def notify(self, topic: str, key: str = "") -> None:
        """Wake this process's subscribers of `topic` at once, and (PostgreSQL) every
        other replica's. Never raises: a lost signal only means a poll notices instead."""
        self._wake(topic)
        if not self.postgres:
            return
        if ":" in topic:
            logger.warning("signal topic %r has a ':'; not sent to other replicas", topic)
            return
        try:
            async with (
                asyncio.timeout(NOTIFY_TIMEOUT_S),
                self.database.engine.connect() as connection,
            ):
                sent = await connection.execute(
                    text("SELECT pg_backend_pid() FROM (SELECT pg_notify(:channel, :payload)) n"),
                    {"channel": CHANNEL, "payload": payload(topic, key)},
                )
                # Known before the commit that delivers it, so the echo is recognised.
                self._remember_own(int(sent.scalar_one()))
                await connection.commit()
        except Exception as exc:
            logger.warning("could not send signal %r: %s", topic, _describe(exc))

    def subscribe(self, topic: str) -> Subscription:
        """Wake-ups on `topic` from now on; close the subscription when done."""
        if ":" in topic:
            raise ValueError(f"a signal topic has no ':' ({topic!r})")
        subscription = Subscription(self, topic)
        self._subscribers.setdefault(topic, set()).add(subscription)
        return subscription

    @property
    def listening(self) -> bool:
        """Whether signals from other replicas reach this process now (PostgreSQL)."""
        return self._connection is not None and not self._lost.is_set()

    def _unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(subscription.topic)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[subscription.topic]

    def _wake(self, topic: str) -> None:
        for subscription in list(self._subscribers.get(topic, ())):
            subscription._wake()

    def _wake_all(self) -> None:
        for subscribers in list(self._subscribers.values()):
            for subscription in list(subscribers):
                subscription._wake()

    async def _connect(self) -> None:
        import asyncpg  # only with the `postgres` extra; SQLite deployments lack it

        _, options = self.database.engine.dialect.create_connect_args(self.database.engine.url)
        connection = await asyncpg.connect(**options, timeout=CONNECT_TIMEOUT_S)
        try:
            connection.add_termination_listener(self._on_termination)
            await connection.add_listener(CHANNEL, self._on_notification)
        except BaseException:
            connection.terminate()
            raise
        self._connection = connection
        self._lost.clear()

    async def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        connection.remove_termination_listener(self._on_termination)
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await connection.close()
        except Exception:
            connection.terminate()

    def _on_termination(self, connection: Any) -> None:
        if connection is self._connection:
            self._lost.set()

    def _on_notification(self, _connection: Any, pid: int, _channel: str, body: str) -> None:
        if pid in self._own_pids:
            return  # sent by this process, whose subscribers were woken then
        topic, _, _key = body.partition(":")
        self._wake(topic)

    def _remember_own(self, pid: int) -> None:
        self._own_pids[pid] = None
        self._own_pids.move_to_end(pid)
        while len(self._own_pids) > OWN_PIDS_KEPT:
            self._own_pids.popitem(last=False)

    async def _keep_listening(self) -> None:
        """Watch the listener connection; open it again, with backoff, when it is lost."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CHECK_EVERY_S):
                    await self._lost.wait()
            if not self._lost.is_set() and await self._alive():
                continue
            logger.warning("lost the signals listener connection; reconnecting")
            await self._disconnect()
            delay = RETRY_FIRST_S
            while True:
                try:
                    await self._connect()
                    break
                except Exception as exc:
                    logger.warning(
                        "cannot listen for signals (%s); retrying in %.1f s", _describe(exc), delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
            logger.info("listening for signals again")
            # Whatever was signalled while nobody listened is looked at now.
            self._wake_all()

    async def _alive(self) -> bool:
        connection = self._connection
        if connection is None or connection.is_closed():
            return False
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await connection.execute("SELECT 1")
        except Exception:
            return False
        return True


async def event_or_signal(
    event: asyncio.Event, subscription: Subscription | None, timeout_s: float
) -> None:
    """Return when `event` is set, a signal comes on `subscription`, or after `timeout_s`."""
    if subscription is None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await event.wait()
        return
    waits = {
        asyncio.ensure_future(event.wait()),
        asyncio.ensure_future(subscription.wait(timeout_s)),
    }
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def payload(topic: str, key: str) -> str:
    """`topic:key`, cut to PostgreSQL's payload limit (on a character boundary);
    NUL characters, which PostgreSQL text cannot hold, are dropped."""
    head = f"{topic}:"
    room = MAX_PAYLOAD_BYTES - len(head.encode())
    key = key.replace("\x00", "")
    cut = key.encode()[:room].decode(errors="ignore")
    return head + cut


def _describe(exc: BaseException) -> str:
    # asyncpg and SQLAlchemy messages name hosts and users, never the password.
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
