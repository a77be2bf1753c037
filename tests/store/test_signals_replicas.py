"""Two replicas on one PostgreSQL database: what one decides, the other acts on at once.

Every poll here is set to 30 s, so only a signal can explain a reaction within a few
seconds (the signal itself takes milliseconds; the bound leaves room for a loaded machine).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient
from sqlmodel import select

from bot.access.admission import Admission
from bot.access.deciders import Deciders
from bot.app import Baton, build_baton
from bot.config import LimitsConfig
from bot.engine import ApprovalRequest
from bot.slack.approvals import SlackApprovals
from bot.slack.directory import SlackDirectory
from bot.store import SessionKey
from bot.store.approvals import ApprovalStore
from bot.store.models import ApprovalRow
from bot.store.runs import RunStore
from bot.subagents.children import ParentContext
from tests.conftest import make_settings
from tests.databases import POSTGRES_SERVER, fresh_postgres
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.skipif(not POSTGRES_SERVER, reason="BATON_TEST_POSTGRES_URL is not set")

SLOW_POLL_S = 30.0
PROMPT_S = 3.0
ALICE = "UALICE"
BOB = "UBOB"


@pytest.fixture
async def replicas(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[tuple[Baton, Baton]]:
    async with fresh_postgres() as url:
        settings = make_settings(tmp_path, fake_llm.url, database_url=url)
        first = await build_baton(settings)
        second = await build_baton(settings)
        try:
            yield first, second
        finally:
            await first.close()
            await second.close()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as fake:
        fake.add_user(ALICE, "alice")
        fake.add_user(BOB, "bob")
        yield fake


def approvals_of(baton: Baton, slack: FakeSlackAPI) -> SlackApprovals:
    client = AsyncWebClient(token="xoxb-test", base_url=slack.url)
    return SlackApprovals(
        store=ApprovalStore(baton.database),
        client=client,
        deciders=Deciders(SlackDirectory(client), (), self_approval=True),
        instances=baton.instances,
        timeout_s=60.0,
        self_approval=True,
        poll_s=SLOW_POLL_S,
        signals=baton.signals,
    )


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """Poll `check` until it holds; fail the test after `within` seconds."""
    async with asyncio.timeout(within):
        # Polling is the point: the state is in the database or another replica.
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_an_approval_decided_on_one_replica_wakes_the_run_waiting_on_the_other(
    replicas: tuple[Baton, Baton], slack: FakeSlackAPI
) -> None:
    waiting_on, clicked_on = replicas
    waiter = approvals_of(waiting_on, slack)
    other = approvals_of(clicked_on, slack)
    session = await waiting_on.conversations.store.get_or_create(SessionKey.terminal("ask"))
    request = ApprovalRequest(
        call_id="c1", tool_name="bash", arguments='{"command": "ls"}', reason="r", risk=None
    )
    asking = asyncio.create_task(
        waiter.request(
            request, session_id=session.id, channel="C1", thread_ts="1.1", requested_by=ALICE
        )
    )
    approval_id = ""

    async def posted() -> bool:
        nonlocal approval_id
        async with clicked_on.database.sessions() as db:
            row = (await db.exec(select(ApprovalRow))).first()
        if row is None or row.message_ts is None:
            return False
        approval_id = row.id
        return True

    try:
        await eventually(posted)
        await asyncio.sleep(0.2)  # the run has read the row once and waits
        assert not asking.done()
        began = time.monotonic()
        # No approvers are set: the requester herself decides (self-approval).
        assert (await other.click(approval_id, user=ALICE, approve=True)).message is None
        decision = await asyncio.wait_for(asking, PROMPT_S)
        assert time.monotonic() - began < PROMPT_S
        assert decision.approved
    finally:
        asking.cancel()
        await asyncio.gather(asking, return_exceptions=True)


async def test_a_task_cancelled_on_one_replica_stops_on_the_other_at_once(
    replicas: tuple[Baton, Baton], fake_llm: FakeOpenAI
) -> None:
    runs_it, cancels_it = replicas
    runs_it.tracker.sweep_s = SLOW_POLL_S
    asked = asyncio.Event()

    async def stay_busy(_request: RecordedRequest) -> Reply:
        asked.set()
        await asyncio.Event().wait()
        return Reply(text="never")

    fake_llm.responder = stay_busy
    session = await runs_it.conversations.store.get_or_create(SessionKey.terminal("task"))
    definition = runs_it.agents.get("explore")
    assert definition is not None
    record = await runs_it.runner.start_background(
        definition,
        "look around",
        description="look",
        parent=ParentContext(
            tools=runs_it.tools, model=runs_it.model, approval=None, session_id=session.id
        ),
    )
    await asyncio.wait_for(asked.wait(), 10)
    await asyncio.sleep(0.2)  # the cancel sweep waits
    assert runs_it.tracker.is_running_here(record.id)
    began = time.monotonic()
    cancelled = await cancels_it.tracker.cancel(record.id, by=BOB)
    assert cancelled is not None and cancelled.state == "cancelled"

    async def stopped() -> bool:
        return not runs_it.tracker.is_running_here(record.id)

    await eventually(stopped, within=PROMPT_S)
    assert time.monotonic() - began < PROMPT_S
    detail = await runs_it.tracker.get(record.id)
    assert detail is not None and detail.task.state == "cancelled"


async def test_a_run_slot_freed_on_one_replica_admits_the_run_queued_on_the_other(
    replicas: tuple[Baton, Baton],
) -> None:
    frees, queues = replicas
    limits = LimitsConfig(runs=1, runs_per_user=0)
    admissions = [
        Admission(RunStore(b.database), b.instances, limits, poll_s=SLOW_POLL_S, signals=b.signals)
        for b in replicas
    ]
    session = await frees.conversations.store.get_or_create(SessionKey.terminal("runs"))
    for baton, run_id in ((frees, "r1"), (queues, "r2")):
        await RunStore(baton.database).start(
            run_id=run_id, owner=baton.instances.id, session_id=session.id, channel_id="C1",
            thread_ts="1.1", user_id=ALICE, state="queued",
        )  # fmt: skip
    await asyncio.wait_for(admissions[0].wait("r1", ALICE), 10)
    waiting = asyncio.create_task(admissions[1].wait("r2", BOB))
    try:
        await asyncio.sleep(0.3)  # queued behind r1, waiting
        assert not waiting.done()
        began = time.monotonic()
        await RunStore(frees.database).finish("r1")
        admissions[0].release()
        await asyncio.wait_for(waiting, PROMPT_S)
        assert time.monotonic() - began < PROMPT_S
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await asyncio.gather(*admissions[0]._signalling)
