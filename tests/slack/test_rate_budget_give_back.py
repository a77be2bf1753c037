"""A call that gives up while it waits for its slot gives the slot back."""

from __future__ import annotations

import asyncio
import time

import pytest

from bot.slack.rate_budget import Limit, NoRoom, Priority, RateBudget

SLOW = Limit(per_minute=60, burst=1)  # one call a second


def slow_budget() -> RateBudget:
    return RateBudget(limits={}, unknown=SLOW, channel_limit=SLOW)


@pytest.mark.parametrize("within", [None, 5.0])
async def test_a_cancelled_wait_leaves_no_reservation_behind(within: float | None) -> None:
    budget = slow_budget()
    await budget.acquire("chat.postMessage", "C1")  # the slot of now: the next is 1 s on
    waiting = asyncio.create_task(
        budget.acquire("chat.postMessage", "C1", Priority.URGENT, within=within)
    )
    await asyncio.sleep(0.05)
    waiting.cancel()  # a stream's start, dropped because its run ended
    with pytest.raises(asyncio.CancelledError):
        await waiting
    began = time.monotonic()
    await budget.acquire("chat.postMessage", "C1")
    # The answer takes the slot the dropped call had: about 1 s from the first, not 2 s.
    assert time.monotonic() - began < 1.5


async def test_a_slot_that_came_is_kept() -> None:
    budget = slow_budget()
    await budget.acquire("chat.update", None)
    await budget.acquire("chat.update", None)  # slept for its slot, and keeps it
    with pytest.raises(NoRoom):
        await budget.acquire("chat.update", None, within=0.5)
