"""`max_background_tasks` holds per session for the whole deployment, not per process.

Two Batons on one database stand for two replicas: each has its own tracker and
its own per-process start lock, so only the database can keep them from both
taking the last free place.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Baton
from bot.errors import TaskLimitReached
from bot.store import SessionKey
from bot.store.tasks import TaskRecord
from bot.subagents.children import ParentContext
from tests.databases import POSTGRES_SERVER, fresh_database
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply
from tests.subagents.harness import make_baton

LIMIT = 2
ATTEMPTS = 10


async def stay_busy(_request: RecordedRequest) -> Reply:
    await asyncio.Event().wait()  # the children keep running until shutdown
    return Reply(text="never")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.skipif(
    not POSTGRES_SERVER, reason="BATON_TEST_POSTGRES_URL is not set"))])  # fmt: skip
async def replicas(
    request: pytest.FixtureRequest, tmp_path: Path, fake_llm: FakeOpenAI
) -> AsyncIterator[tuple[Baton, Baton]]:
    fake_llm.responder = stay_busy
    async with fresh_database(request.param, tmp_path) as url:
        first = await make_baton(tmp_path, fake_llm, database_url=url, max_background_tasks=LIMIT)
        second = await make_baton(tmp_path, fake_llm, database_url=url, max_background_tasks=LIMIT)
        try:
            yield first, second
        finally:
            await first.close()
            await second.close()


async def start(baton: Baton, session_id: int, n: int) -> TaskRecord:
    # Two agents, so the starts do not all meet on one agent's task-number row.
    definition = baton.agents.get(("explore", "general-purpose")[n // 2 % 2])
    assert definition is not None
    return await baton.runner.start_background(
        definition,
        f"look at part {n}",
        description=f"part {n}",
        parent=ParentContext(
            tools=baton.tools, model=baton.model, approval=None, session_id=session_id
        ),
    )


async def test_a_session_gets_at_most_its_limit_across_replicas(
    replicas: tuple[Baton, Baton],
) -> None:
    first, second = replicas
    session = await first.conversations.store.get_or_create(SessionKey.terminal("limit"))
    outcomes = await asyncio.gather(
        *(start((first, second)[n % 2], session.id, n) for n in range(ATTEMPTS)),
        return_exceptions=True,
    )
    started = [o for o in outcomes if isinstance(o, TaskRecord)]
    refused = [o for o in outcomes if isinstance(o, TaskLimitReached)]
    assert len(started) == LIMIT, outcomes
    assert len(refused) == ATTEMPTS - LIMIT, outcomes
    assert await first.tracker.running_background(session.id) == LIMIT
    # A refused start used up no task number: each agent's ids start at 1.
    assert {t.id.rsplit("-", 1)[1] for t in started} <= {"1", "2"}
    # Another session has its own places.
    other = await second.conversations.store.get_or_create(SessionKey.terminal("other"))
    assert (await start(second, other.id, 99)).state == "running"
