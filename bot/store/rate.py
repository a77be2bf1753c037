"""Where the Slack rate budget keeps its state: in memory, or in PostgreSQL for replicas.

Each limit is one GCRA ("generic cell rate algorithm") arrival time, `tat`: the
moment the limit would be back to no debt at all. Reserving a slot moves it one
emission interval later: `tat = max(tat, now) + interval`. A reservation carries a
`tolerance`: it is only made when the debt before it, `max(tat, now) - now`, is at
most that many seconds; a refused reservation changes nothing.

The answer is the debt the reservation found (`ahead`, seconds), from which the
budget computes how long to wait; the store knows nothing of bursts or priorities.
On PostgreSQL the reservation is one statement on the database's clock, so replicas
whose clocks disagree share one budget, and no two of them get the same slot.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import text

from bot.store.database import Database

logger = logging.getLogger(__name__)

# `slack_rate.key`'s length (SlackRateRow); longer keys are stored as their digest.
KEY_LIMIT = 128
# The in-memory store forgets arrival times long past (they mean no debt) once it
# holds this many keys, so keys by the thousand (channels) do not pile up.
MEMORY_KEYS_SWEEP = 10_000


@dataclass(frozen=True)
class Reservation:
    """The answer to one reservation.

    granted: whether a slot was taken (and `tat` moved).
    ahead: the debt found, `max(tat, now) - now` in seconds (>= 0): for a granted
        slot, how far ahead of now it lies (before the burst tolerance); for a refused
        one, a hint of how long until the limit has room again.
    """

    granted: bool
    ahead: float
    # The arrival time this reservation left (granted only): `release` gives the slot
    # back only while it is still the limit's last one.
    tat: float = field(default=math.nan, compare=False)


class RateStore(Protocol):
    async def reserve(self, key: str, interval: float, tolerance: float) -> Reservation: ...

    async def release(self, key: str, interval: float, tat: float) -> bool:
        """Give back the slot whose reservation left `tat`, if nobody reserved after it.

        A later reservation was planned behind this slot: moving the arrival time back
        then would hand the next caller a slot already promised, and two calls would go
        out together. So a slot that is not the last stays used (a wasted interval is
        the safe side). Returns whether it was given back.
        """
        ...


class MemoryRateStore:
    """The arrival times of one process (SQLite, or a fall-back when PostgreSQL errs)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.tats: dict[str, float] = {}

    async def reserve(self, key: str, interval: float, tolerance: float) -> Reservation:
        # No await between the read and the write: one event loop makes this atomic.
        return self.reserve_now(key, interval, tolerance)

    def reserve_now(self, key: str, interval: float, tolerance: float) -> Reservation:
        now = self.clock()
        if len(self.tats) >= MEMORY_KEYS_SWEEP and key not in self.tats:
            self.tats = {k: tat for k, tat in self.tats.items() if tat > now}
        base = max(self.tats.get(key, now), now)
        ahead = base - now
        if ahead > tolerance:
            return Reservation(granted=False, ahead=ahead)
        self.tats[key] = base + interval
        return Reservation(granted=True, ahead=ahead, tat=base + interval)

    async def release(self, key: str, interval: float, tat: float) -> bool:
        if self.tats.get(key) != tat:
            return False
        self.tats[key] = tat - interval
        return True


# One statement: the row is locked by the upsert, and the clock is read after the lock
# is held (clock_timestamp(), not now(): a transaction's start would be stale), so
# concurrent replicas queue on the row and each sees the arrival time the last one
# left. A refused reservation (the WHERE does not hold) returns no row from `taken`;
# the outer SELECT then reads the debt from the statement's snapshot, as a hint.
_NOW = "extract(epoch FROM clock_timestamp())::float8"
_RESERVE = text(
    f"""
    WITH taken AS (
        INSERT INTO slack_rate (key, tat)
        VALUES (:key, {_NOW} + CAST(:interval AS float8))
        ON CONFLICT (key) DO UPDATE
        SET tat = GREATEST(slack_rate.tat, {_NOW}) + CAST(:interval AS float8)
        WHERE GREATEST(slack_rate.tat, {_NOW}) - {_NOW} <= CAST(:tolerance AS float8)
        RETURNING tat
    )
    SELECT (SELECT tat FROM taken) AS taken,
           (SELECT tat FROM slack_rate WHERE key = :key) AS before,
           {_NOW} AS now
    """
)

_RELEASE = text(
    "UPDATE slack_rate SET tat = tat - CAST(:interval AS float8)"
    " WHERE key = :key AND tat = CAST(:tat AS float8)"
)


class PostgresRateStore:
    """Arrival times in `slack_rate`, shared by every replica on the database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def reserve(self, key: str, interval: float, tolerance: float) -> Reservation:
        params = {"key": row_key(key), "interval": interval, "tolerance": _finite(tolerance)}
        async with self.database.engine.begin() as connection:
            row = (await connection.execute(_RESERVE, params)).one()
        taken, before, now = row.taken, row.before, float(row.now)
        if taken is not None:
            ahead = max(0.0, float(taken) - interval - now)
            return Reservation(granted=True, ahead=ahead, tat=float(taken))
        return Reservation(granted=False, ahead=max(0.0, float(before or now) - now))

    async def release(self, key: str, interval: float, tat: float) -> bool:
        params = {"key": row_key(key), "interval": interval, "tat": tat}
        async with self.database.engine.begin() as connection:
            result = await connection.execute(_RELEASE, params)
        return bool(result.rowcount)


class FallbackRateStore:
    """PostgreSQL first; when it errs or is slow, this process's own budget for that call.

    A Slack message must not be lost, nor held up, because the budget table had a
    hiccup: the call is then paced by this replica alone (logged once until PostgreSQL
    answers again), and PostgreSQL is left alone for `cool_down_s` before it is asked
    again, so a database that hangs costs one `timeout_s`, not one per call.
    """

    def __init__(
        self,
        primary: RateStore,
        fallback: MemoryRateStore | None = None,
        *,
        timeout_s: float = 2.0,
        cool_down_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback or MemoryRateStore()
        self.timeout_s = timeout_s
        self.cool_down_s = cool_down_s
        self.clock = clock
        self.failing = False
        self.failed_at = -math.inf
        self.fallbacks = 0

    def _skip_primary(self) -> bool:
        return self.failing and self.clock() - self.failed_at < self.cool_down_s

    async def reserve(self, key: str, interval: float, tolerance: float) -> Reservation:
        if self._skip_primary():
            self.fallbacks += 1
            return await self.fallback.reserve(key, interval, tolerance)
        try:
            async with asyncio.timeout(self.timeout_s):
                reservation = await self.primary.reserve(key, interval, tolerance)
        except Exception as exc:
            self._failed(exc)
            return await self.fallback.reserve(key, interval, tolerance)
        if self.failing:
            logger.info("the shared Slack rate budget answers again")
            self.failing = False
        return reservation

    async def release(self, key: str, interval: float, tat: float) -> bool:
        # A slot is given back only by the store that holds `tat`; the other finds no
        # match and changes nothing.
        if self._skip_primary():
            return await self.fallback.release(key, interval, tat)
        try:
            async with asyncio.timeout(self.timeout_s):
                if await self.primary.release(key, interval, tat):
                    return True
        except Exception as exc:
            self._failed(exc)
        return await self.fallback.release(key, interval, tat)

    def _failed(self, exc: Exception) -> None:
        self.fallbacks += 1
        self.failed_at = self.clock()
        if not self.failing:
            logger.warning(
                "the shared Slack rate budget failed (%s: %s); pacing this replica alone",
                type(exc).__name__,
                exc,
            )
            self.failing = True


def rate_store_for(database: Database | None) -> RateStore:
    """PostgreSQL's shared store (with its fall-back), or one in memory for SQLite."""
    if database is not None and database.url.startswith("postgresql"):
        return FallbackRateStore(PostgresRateStore(database))
    return MemoryRateStore()


def row_key(key: str) -> str:
    """The key as `slack_rate.key` holds it: itself when short and plain, else a digest.

    A channel id comes from outside (an event, a tool's arguments): one too long for
    the column, or with a NUL PostgreSQL refuses, would fail every reservation on its
    key and send the whole replica to its fall-back budget.
    """
    if len(key) <= KEY_LIMIT and key.isascii() and key.isprintable():
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _finite(value: float) -> float:
    # PostgreSQL takes 'Infinity' for float8, but a bound keeps the parameter ordinary.
    return value if math.isfinite(value) else 1e12
