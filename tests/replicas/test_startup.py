"""Six replicas started at the same moment on one database: each migrates or waits for
the one that does (the lock), and all serve; an old database keeps its data."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.store import Database, SessionStore
from tests.fakes.openai_api import Reply
from tests.replicas.harness import Cluster, cluster
from tests.store.test_migrations import assert_at_head, make_oldest

SIX = 6


async def start_six_and_use_them(c: Cluster) -> None:
    replicas = [await c.launch(chr(ord("A") + n)) for n in range(SIX)]
    await asyncio.gather(*(c.wait_healthy(r) for r in replicas))
    assert all(r.running for r in replicas), c.logs()
    for replica in replicas:
        assert "Traceback" not in replica.log(), c.logs()
    # Every one of them serves: a mention on each is answered.
    c.llm.responder = lambda request: Reply(text="Served.")
    threads = [await c.mention(r, f"hello {r.name}") for r in replicas]
    await c.until(
        lambda: all("Served." in c.thread_text("C1", ts) for ts in threads),
        within=60, what="every replica answered",
    )  # fmt: skip
    await assert_at_head(c.database_url)


async def test_six_replicas_start_together_on_a_fresh_database(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await start_six_and_use_them(c)


async def test_six_replicas_start_together_on_the_oldest_database(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await make_oldest(c.database_url, "postgresql")
        await start_six_and_use_them(c)
        database = Database(c.database_url)
        try:
            sessions = SessionStore(database)
            history = [(m.role, m.content) for m in await sessions.history(1)]
            assert history == [("user", "hello"), ("assistant", "hi")]
        finally:
            await database.close()
