"""The same store on PostgreSQL: no SQLite-only SQL, and the races hold there too.

Runs when BATON_TEST_POSTGRES_URL names a server where the user may create
databases (`.ci/run` sets one up when it can); each test gets a fresh database.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Baton, build_baton
from bot.engine.messages import ChatMessage
from bot.store import SessionKey
from bot.store.approvals import ApprovalStore
from bot.store.thread_inbox import Inbound, ThreadInbox
from tests.conftest import make_settings
from tests.databases import POSTGRES_SERVER, fresh_postgres
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec

pytestmark = pytest.mark.skipif(not POSTGRES_SERVER, reason="BATON_TEST_POSTGRES_URL is not set")

THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.1")


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    async with fresh_postgres() as url:
        yield url


@pytest.fixture
async def pg_baton(tmp_path: Path, fake_llm: FakeOpenAI, database_url: str) -> AsyncIterator[Baton]:
    app = await build_baton(make_settings(tmp_path, fake_llm.url, database_url=database_url))
    yield app
    await app.close()


async def test_history_survives_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAI, database_url: str
) -> None:
    settings = make_settings(tmp_path, fake_llm.url, database_url=database_url)
    first = await build_baton(settings)
    fake_llm.script(Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")]), Reply(text="ok"))
    [e async for e in first.conversations.run_turn(THREAD, "look")]
    await first.close()
    second = await build_baton(settings)
    try:
        history = await second.conversations.history(THREAD)
        usage = await second.conversations.store.usage(
            (await second.conversations.store.get_or_create(THREAD)).id
        )
    finally:
        await second.close()
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert usage[0] > 0


async def test_the_races_hold(pg_baton: Baton) -> None:
    store = pg_baton.conversations.store
    session = await store.get_or_create(THREAD)
    sessions = await asyncio.gather(*(store.get_or_create(THREAD) for _ in range(5)))
    assert {s.id for s in sessions} == {session.id}

    claims = await asyncio.gather(*(pg_baton.events.claim("Ev1") for _ in range(5)))
    assert sorted(claims) == [False, False, False, False, True]

    ids = await asyncio.gather(*(pg_baton.tracker.store.next_id("explore") for _ in range(10)))
    assert sorted(ids, key=lambda i: int(i.rsplit("-", 1)[1])) == [
        f"task-explore-{n}" for n in range(1, 11)
    ]

    for n in range(4):
        record = await pg_baton.tracker.start(
            session_id=session.id, channel_id="C1", agent="explore", description="d",
            prompt=f"p{n}", background=True, started_by="U1",
        )  # fmt: skip
        await pg_baton.tracker.finish(record.id, state="completed", result=f"r{n}")
    drains = await asyncio.gather(*(pg_baton.tracker.drain_completed(session.id) for _ in range(3)))
    assert sum(len(batch) for batch in drains) == 4

    batches = [[ChatMessage(role="user", content=f"{n}-{i}") for i in range(3)] for n in range(4)]
    await asyncio.gather(*(store.append(session.id, batch) for batch in batches))
    assert len(await store.history(session.id)) == 12

    approvals = ApprovalStore(pg_baton.database)
    request = await approvals.create(
        session_id=session.id, agent="main", task_id=None, tool="bash", arguments="{}",
        reason="r", requested_by="U1", channel_id="C1", owner=pg_baton.instances.id,
    )  # fmt: skip
    decisions = await asyncio.gather(
        approvals.decide(request.id, "approved", by="U1"),
        approvals.decide(request.id, "denied", by="U2"),
    )
    assert sum(d is not None for d in decisions) == 1
    assert await approvals.orphans(alive=await pg_baton.instances.alive()) == []
    assert await pg_baton.tracker.recover() == []
    running, done = await pg_baton.tracker.counts(channel_id="C1")
    assert (running, done) == (0, 4)


async def test_a_nul_character_is_stored_as_a_replacement_character(
    pg_baton: Baton, fake_llm: FakeOpenAI
) -> None:
    """PostgreSQL's text cannot hold NUL, which a question, a command's output (`find
    -print0`) or an answer may carry: the turn went down with it. It is kept as U+FFFD."""
    fake_llm.script(Reply(text="done\x00here"))
    [e async for e in pg_baton.conversations.run_turn(THREAD, "a\x00b")]
    history = await pg_baton.conversations.history(THREAD)
    assert [m.content for m in history] == ["a\ufffdb", "done\ufffdhere"]

    session = await pg_baton.conversations.store.get_or_create(THREAD)
    tasks = pg_baton.tracker.store
    await tasks.create(
        task_id="t-nul", session_id=session.id, channel_id="C1", agent="worker",
        description="find\x00", prompt="run find -print0", background=True, started_by="U1",
    )  # fmt: skip
    await tasks.append_log("t-nul", ["./a\x00./b\x00"])
    assert await tasks.log("t-nul") == ("./a\ufffd./b\ufffd",)

    inbox = ThreadInbox(pg_baton.database)
    stored = await inbox.receive(
        Inbound(session_key=THREAD.key, channel_id="C1", thread_ts="1.1", ts="1.2",
                user_id="U1", text="hi\x00there"),
        holder="h",
    )  # fmt: skip
    assert stored is not None and stored.text == "hi\ufffdthere"

    approval = await ApprovalStore(pg_baton.database).create(
        session_id=session.id, agent="main", task_id=None, tool="write_file",
        arguments='{"content": "x\x00y"}', reason="writes\x00", requested_by="U1",
        channel_id="C1",
    )  # fmt: skip
    assert (approval.arguments, approval.reason) == ('{"content": "x\ufffdy"}', "writes\ufffd")
