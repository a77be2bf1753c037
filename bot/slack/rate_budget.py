"""One rate budget for every Slack Web API call: per method tier and per channel.

Every call of the bot's client asks the budget first (`CountingWebClient.api_call`),
so all runs of a process share it, and with PostgreSQL every replica does too
(`bot/store/rate.py`). The limits are GCRA ("generic cell rate algorithm"): each
has an emission interval (60 / calls per minute) and a burst tolerance, kept as one
theoretical arrival time per key: the method (Slack's per-workspace tier) and, for
methods that post a message, `channel:<id>` (about one message per second).

Priorities need no central queue; they are how much of a limit's burst a call may
use:

- URGENT (approvals, final answers, replies to people; the default) reserves the
  next slot even when it lies in the future, and sleeps until it (bounded).
- STREAM (streamed answer text) takes a slot only while at most half the burst is
  in use; otherwise it waits a little and asks again.
- PROGRESS (progress updates) takes a slot only when the limit has no debt at all.

So a STREAM or PROGRESS call never reserves a slot behind which an URGENT call
would have to wait longer than the burst allows, and under URGENT load they are
starved (they wait), never refused. A caller whose arguments should be as fresh as
possible (progress, a stream's buffer) takes a `slot` first and builds the call
inside it: the next call of that method in the block does not wait again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from bot.store.rate import MemoryRateStore, RateStore

logger = logging.getLogger(__name__)


class NoRoom(TimeoutError):
    """No slot comes within the wait the caller allowed; nothing was reserved."""


class Priority(IntEnum):
    URGENT = 0  # approvals, final answers, replies to people; the default for any call
    STREAM = 1  # streamed answer text and its timeline (chat.appendStream etc.)
    PROGRESS = 2  # progress message updates: coalesced, only on spare capacity


@dataclass(frozen=True)
class Limit:
    """`per_minute` calls a minute on average, `burst` of them back to back."""

    per_minute: float
    burst: int = 1

    @property
    def interval(self) -> float:
        return 60.0 / self.per_minute

    @property
    def tolerance(self) -> float:
        """GCRA's burst tolerance: how far ahead of now the arrival time may run."""
        return (self.burst - 1) * self.interval

    def room(self, level: Priority) -> float:
        """How much debt a call at `level` may find and still take a slot."""
        if level is Priority.URGENT:
            return math.inf
        if level is Priority.STREAM:
            return self.tolerance / 2
        return 0.0


# Slack's documented tiers are "N+ per minute", enforced per method and workspace, with
# bursts allowed. These are ~90 % of them, with small bursts, so that a Slack enforcing
# the documented numbers (even as a sliding minute) never answers 429.
TIER_1 = Limit(1, 1)  # Slack: 1+ / min
TIER_2 = Limit(18, 2)  # Slack: 20+ / min
TIER_3 = Limit(45, 4)  # Slack: 50+ / min
TIER_4 = Limit(90, 8)  # Slack: 100+ / min
# chat.postMessage is "special": about 1 message per second per channel (short bursts
# tolerated, but not promised: none are used), and several hundred a minute per
# workspace.
CHANNEL_MESSAGES = Limit(54, 1)
POST_MESSAGE = Limit(270, 10)

METHOD_LIMITS: Mapping[str, Limit] = {
    "chat.postMessage": POST_MESSAGE,
    "chat.update": TIER_3,
    "chat.delete": TIER_3,
    "chat.postEphemeral": TIER_4,
    "chat.getPermalink": TIER_4,
    "chat.startStream": TIER_2,
    "chat.appendStream": TIER_4,
    "chat.stopStream": TIER_2,
    "conversations.replies": TIER_3,
    "conversations.history": TIER_3,
    "users.info": TIER_4,
    "users.list": TIER_2,
    "users.lookupByEmail": TIER_3,
    "usergroups.users.list": TIER_2,
    "reactions.add": TIER_3,
    "reactions.remove": TIER_2,
    "views.open": TIER_4,
    "views.push": TIER_4,
    "views.publish": TIER_4,
    "views.update": TIER_4,
    "assistant.threads.setStatus": TIER_3,
    "assistant.threads.setTitle": TIER_3,
    "assistant.threads.setSuggestedPrompts": TIER_3,
    "files.getUploadURLExternal": TIER_4,
    "files.completeUploadExternal": TIER_4,
    "auth.test": TIER_4,
}
UNKNOWN_METHOD = TIER_3
# Methods that put a new message in a channel: they also count against the channel.
CHANNEL_METHODS = frozenset(
    {"chat.postMessage", "chat.startStream", "files.completeUploadExternal"}
)

# An URGENT call never sleeps longer than this for its slot: past it, the call goes
# out anyway and the client's 429 handling is the safety net.
MAX_URGENT_WAIT_S = 120.0
# A STREAM or PROGRESS call that found no room asks again after the time its limit
# needs to have room (as the store hinted), jittered, within these bounds.
MIN_RETRY_S = 0.05
MAX_RETRY_S = 1.0

_level: contextvars.ContextVar[Priority] = contextvars.ContextVar(
    "slack_priority", default=Priority.URGENT
)


@dataclass(frozen=True)
class _Taken:
    """A slot reserved on one limit: `tat` is the arrival time its reservation left."""

    key: str
    limit: Limit
    tat: float


@dataclass
class _Prepaid:
    method: str
    parent: _Prepaid | None
    used: bool = False


_prepaid: contextvars.ContextVar[_Prepaid | None] = contextvars.ContextVar(
    "slack_prepaid", default=None
)


@contextlib.contextmanager
def priority(level: Priority) -> Iterator[None]:
    """Calls made inside (in this task, and tasks it starts) carry `level`."""
    token = _level.set(level)
    try:
        yield
    finally:
        _level.reset(token)


def current_priority() -> Priority:
    return _level.get()


@dataclass
class BudgetStats:
    """What the budget did, for benchmarks and tests."""

    granted: Counter[Priority] = field(default_factory=Counter)
    waited: Counter[Priority] = field(default_factory=Counter)  # calls that slept
    wait_s: Counter[Priority] = field(default_factory=Counter)  # seconds slept
    retries: Counter[Priority] = field(default_factory=Counter)  # found no room, asked again
    prepaid: int = 0


class RateBudget:
    """Paces Slack Web API calls: one GCRA limit per method, and per channel for posts."""

    def __init__(
        self,
        store: RateStore | None = None,
        *,
        limits: Mapping[str, Limit] = METHOD_LIMITS,
        unknown: Limit = UNKNOWN_METHOD,
        channel_limit: Limit = CHANNEL_MESSAGES,
        channel_methods: frozenset[str] = CHANNEL_METHODS,
        max_urgent_wait_s: float = MAX_URGENT_WAIT_S,
    ) -> None:
        self.store: RateStore = store if store is not None else MemoryRateStore()
        self.limits = limits
        self.unknown = unknown
        self.channel_limit = channel_limit
        self.channel_methods = channel_methods
        self.max_urgent_wait_s = max_urgent_wait_s
        self.stats = BudgetStats()

    @classmethod
    def scaled(cls, speed: float, store: RateStore | None = None) -> RateBudget:
        """The same limits `speed` times as fast: for tests against a fake Slack whose
        time runs as fast (every rate, and the URGENT wait bound, scaled)."""

        def fast(limit: Limit) -> Limit:
            return Limit(limit.per_minute * speed, limit.burst)

        return cls(
            store,
            limits={method: fast(limit) for method, limit in METHOD_LIMITS.items()},
            unknown=fast(UNKNOWN_METHOD),
            channel_limit=fast(CHANNEL_MESSAGES),
            max_urgent_wait_s=MAX_URGENT_WAIT_S / speed,
        )

    def limits_for(self, method: str, channel: str | None) -> list[tuple[str, Limit]]:
        """The keys a call counts against, the most contended (the channel) first."""
        keys = []
        if channel and method in self.channel_methods:
            keys.append((f"channel:{channel}", self.channel_limit))
        keys.append((method, self.limits.get(method, self.unknown)))
        return keys

    async def acquire(
        self,
        method: str,
        channel: str | None,
        level: Priority | None = None,
        *,
        within: float | None = None,
    ) -> None:
        """Wait for a slot for one call of `method` (in `channel`) at `level`.

        `level` defaults to the one `priority` set for this task (URGENT when none).
        With `within`, the slot is reserved only if it comes within that many seconds
        (else NoRoom, and nothing is reserved): for a call that has a cheaper way
        out, like a stream's start, which a plain message can stand in for.
        """
        level = current_priority() if level is None else level
        if within is not None:
            try:
                granted = await self._reserve_within(self.limits_for(method, channel), within)
            except Exception:
                logger.exception("the Slack rate budget failed; %s goes out unpaced", method)
                return
            if not granted:
                raise NoRoom(f"no slot for {method} within {within:g} s")
            return
        try:
            await self._acquire(method, channel, level)
        except Exception:
            # The budget paces calls, it must never lose one: the call goes out, and
            # the client's 429 handling is the safety net.
            logger.exception("the Slack rate budget failed; %s goes out unpaced", method)

    async def _acquire(self, method: str, channel: str | None, level: Priority) -> None:
        keys = self.limits_for(method, channel)
        if level is Priority.URGENT:
            wait, taken = 0.0, []
            for key, limit in keys:
                reservation = await self.store.reserve(key, limit.interval, math.inf)
                taken.append(_Taken(key, limit, reservation.tat))
                wait = max(wait, reservation.ahead - limit.tolerance)
            await self._hold(level, min(wait, self.max_urgent_wait_s), taken)
            return
        while True:
            retry = await self._try(keys, level)
            if retry is None:
                self.stats.granted[level] += 1
                return
            self.stats.retries[level] += 1
            await asyncio.sleep(retry)

    async def _reserve_within(self, keys: list[tuple[str, Limit]], within: float) -> bool:
        """Reserve a slot on every key if each comes within `within` s; sleep until it."""
        taken, wait = await self._take_all(keys, lambda limit: limit.tolerance + within)
        if taken is not None:
            await self._hold(Priority.URGENT, wait, taken)
        return taken is not None

    async def _try(self, keys: list[tuple[str, Limit]], level: Priority) -> float | None:
        """Take a slot on every key, or none: None, or how long to wait before asking again."""
        taken, short = await self._take_all(keys, lambda limit: limit.room(level))
        if taken is not None:
            return None  # within its room, a STREAM or PROGRESS slot is due now
        return min(MAX_RETRY_S, max(MIN_RETRY_S, short)) * random.uniform(1.0, 1.5)

    async def _take_all(
        self, keys: list[tuple[str, Limit]], room: Callable[[Limit], float]
    ) -> tuple[list[_Taken] | None, float]:
        """Reserve a slot on every key that has at most `room(limit)` of debt, or on none.

        Returns (the slots taken, how long until every one is due), or (None, by how
        much the refusing key's debt passed its room).
        """
        taken: list[_Taken] = []
        wait = 0.0
        for key, limit in keys:
            reservation = await self.store.reserve(key, limit.interval, room(limit))
            if not reservation.granted:
                await self._give_back(taken)
                return None, reservation.ahead - room(limit)
            taken.append(_Taken(key, limit, reservation.tat))
            wait = max(wait, reservation.ahead - limit.tolerance)
        return taken, wait

    async def _hold(self, level: Priority, wait: float, taken: list[_Taken]) -> None:
        """Sleep until the slots `taken` are due. A caller cancelled meanwhile (a
        stream's start dropped because its run ended) makes no call: its slots are
        given back where nobody reserved after them, or the call after it would wait a
        whole interval for a slot nobody used (about a second in a channel)."""
        try:
            await self._sleep(level, wait)
        except asyncio.CancelledError:
            await asyncio.shield(self._give_back(taken))
            raise

    async def _give_back(self, taken: list[_Taken]) -> None:
        try:
            for slot in taken:
                await self.store.release(slot.key, slot.limit.interval, slot.tat)
        except Exception:
            logger.exception("could not give back unused Slack rate slots")

    async def _sleep(self, level: Priority, wait: float) -> None:
        self.stats.granted[level] += 1
        if wait > 0:
            self.stats.waited[level] += 1
            self.stats.wait_s[level] += wait
            await asyncio.sleep(wait)

    @contextlib.asynccontextmanager
    async def slot(
        self,
        method: str,
        channel: str | None,
        level: Priority | None = None,
        *,
        within: float | None = None,
    ) -> AsyncIterator[None]:
        """Wait for a slot first; the next call of `method` inside the block uses it.

        So the call's arguments can be built after the wait: a progress update shows
        the state of when it was sent, a stream appends all it buffered meanwhile.
        """
        await self.acquire(method, channel, level, within=within)
        token = _prepaid.set(_Prepaid(method, _prepaid.get()))
        try:
            yield
        finally:
            _prepaid.reset(token)

    prepaid = slot

    def take_prepaid(self, method: str) -> bool:
        """Whether a `slot` around this call already paid for it (then it is used up)."""
        entry = _prepaid.get()
        while entry is not None:
            if entry.method == method and not entry.used:
                entry.used = True
                self.stats.prepaid += 1
                return True
            entry = entry.parent
        return False


def call_channel(kwargs: Mapping[str, object]) -> str | None:
    """The channel an `api_call` is about, from its json, params or data."""
    for part in ("json", "params", "data"):
        values = kwargs.get(part)
        if isinstance(values, Mapping):
            channel = values.get("channel") or values.get("channel_id")
            if isinstance(channel, str) and channel:
                return channel
    return None
