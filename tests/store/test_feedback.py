"""Feedback on answers, on SQLite and (when a server is set up) PostgreSQL.

One row per person and run whatever the clicks and races; a click counts only for
a run of the channel it came from.
"""

from __future__ import annotations

import asyncio

import pytest

from bot.store import Database, SessionKey, SessionStore
from bot.store.feedback import FeedbackCounts, FeedbackStore
from bot.store.runs import RunStore

ALICE, BOB, CAROL = "UALICE", "UBOB", "UCAROL"


@pytest.fixture
async def store(database: Database) -> FeedbackStore:
    """A feedback store over two runs: alice's `r1` in C1 and bob's `r2` in C2."""
    runs = RunStore(database)
    sessions = SessionStore(database)
    for run_id, channel, user in (("r1", "C1", ALICE), ("r2", "C2", BOB)):
        session = await sessions.get_or_create(
            SessionKey.slack_thread(team_id="T1", channel_id=channel, thread_ts="1.1")
        )
        assert session.id is not None
        await runs.start(
            run_id=run_id, owner="i1", session_id=session.id, channel_id=channel,
            thread_ts="1.1", user_id=user,
        )  # fmt: skip
    return FeedbackStore(database)


async def test_a_click_is_kept(store: FeedbackStore) -> None:
    assert await store.record("r1", user_id=BOB, channel_id="C1", value="good")
    assert await store.get("r1", user_id=BOB) == "good"
    assert await store.counts() == FeedbackCounts(good=1, bad=0)


async def test_the_latest_click_wins_and_counts_once(store: FeedbackStore) -> None:
    assert await store.record("r1", user_id=BOB, channel_id="C1", value="good")
    assert await store.record("r1", user_id=BOB, channel_id="C1", value="good")
    assert await store.record("r1", user_id=BOB, channel_id="C1", value="bad")
    assert await store.get("r1", user_id=BOB) == "bad"
    assert await store.counts() == FeedbackCounts(good=0, bad=1)


async def test_two_people_make_two_rows(store: FeedbackStore) -> None:
    await store.record("r1", user_id=BOB, channel_id="C1", value="good")
    await store.record("r1", user_id=CAROL, channel_id="C1", value="bad")
    assert await store.counts() == FeedbackCounts(good=1, bad=1)


async def test_a_run_of_another_channel_or_none_counts_nothing(store: FeedbackStore) -> None:
    assert not await store.record("r2", user_id=ALICE, channel_id="C1", value="good")
    assert not await store.record("nope", user_id=ALICE, channel_id="C1", value="good")
    assert await store.get("r2", user_id=ALICE) is None
    assert await store.counts() == FeedbackCounts()


async def test_only_good_or_bad(store: FeedbackStore) -> None:
    with pytest.raises(ValueError, match="good"):
        await store.record("r1", user_id=BOB, channel_id="C1", value="meh")
    assert await store.counts() == FeedbackCounts()


async def test_counts_per_starter_and_channel(store: FeedbackStore) -> None:
    await store.record("r1", user_id=BOB, channel_id="C1", value="good")
    await store.record("r1", user_id=CAROL, channel_id="C1", value="good")
    await store.record("r2", user_id=ALICE, channel_id="C2", value="bad")
    assert await store.counts(started_by=ALICE) == FeedbackCounts(good=2, bad=0)
    assert await store.counts(started_by=BOB) == FeedbackCounts(good=0, bad=1)
    assert await store.counts(started_by=CAROL) == FeedbackCounts()
    assert await store.counts(channel_id="C2") == FeedbackCounts(good=0, bad=1)
    assert await store.counts() == FeedbackCounts(good=2, bad=1)
    assert (await store.counts()).total == 3


async def test_concurrent_clicks_leave_one_row(database: Database, store: FeedbackStore) -> None:
    # Two replicas (two stores on one database) taking the same person's clicks at once.
    other = FeedbackStore(database)
    values = ["good", "bad"] * 5
    results = await asyncio.gather(
        *(
            (store if n % 2 else other).record("r1", user_id=BOB, channel_id="C1", value=value)
            for n, value in enumerate(values)
        )
    )
    assert all(results)
    counts = await store.counts()
    assert counts.total == 1
    assert await store.get("r1", user_id=BOB) in {"good", "bad"}
