"""Alembic migrations: the schema at start-up, old databases upgraded in place, the lock.

Each test runs on SQLite and, when BATON_TEST_POSTGRES_URL names a server, on
PostgreSQL (tests/databases.py).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from bot.errors import ConfigError
from bot.store import Database, EventLedger, SessionKey, SessionStore, migrations
from bot.store.approvals import ApprovalStore
from bot.store.tasks import TaskStore
from tests.databases import fresh_database

KINDS = ["sqlite", "postgresql"]
SCHEMAS = Path(__file__).parent / "schemas"
THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.1")
# fmt: off
OLD_ROWS: dict[str, list[dict[str, Any]]] = {
    "sessions": [
        {"id": 1, "key": THREAD.key, "kind": "slack", "team_id": "T1", "channel_id": "C1",
         "thread_ts": "1.1", "created_at": datetime(2026, 11, 1, tzinfo=UTC),
         "updated_at": datetime(2026, 11, 1, tzinfo=UTC)},
    ],
    "messages": [
        {"id": n, "session_id": 1, "seq": n, "role": role, "content": content,
         "created_at": datetime(2026, 11, 1, tzinfo=UTC)}
        for n, (role, content) in enumerate([("user", "hello"), ("assistant", "hi")], start=1)
    ],
    "tasks": [
        {"id": "task-explore-1", "session_id": 1, "channel_id": "C1", "agent": "explore",
         "description": "d", "prompt": "p", "background": True, "state": "completed",
         "result": "r", "prompt_tokens": 3, "completion_tokens": 4, "delivered": False,
         "created_at": datetime(2026, 11, 1, tzinfo=UTC)},
    ],
    "task_sequences": [{"agent": "explore", "last": 1}],
    "task_log": [
        {"id": 1, "task_id": "task-explore-1", "line": "looked",
         "created_at": datetime(2026, 11, 1, tzinfo=UTC)},
    ],
    "approvals": [
        {"id": "ap1", "session_id": 1, "agent": "main", "tool": "bash",
         "arguments": "{}", "reason": "why", "state": "pending", "requested_by": "U1",
         "created_at": datetime(2026, 11, 1, tzinfo=UTC)},
    ],
    "processed_events": [{"key": "Ev1", "created_at": datetime.now(UTC)}],
}
# fmt: on


def _statements(kind: str) -> list[str]:
    sql = (SCHEMAS / f"oldest_{kind}.sql").read_text()
    lines = [line for line in sql.splitlines() if not line.startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


async def make_oldest(url: str, kind: str) -> None:
    """The oldest shipped schema (create_all, before migrations), with a few rows."""
    database = Database(url)
    try:
        async with database.engine.begin() as connection:
            for statement in _statements(kind):
                await connection.exec_driver_sql(statement)
            for table, rows in OLD_ROWS.items():
                for row in rows:
                    columns = ", ".join(f'"{c}"' for c in row)
                    values = ", ".join(f":{c}" for c in row)
                    await connection.execute(
                        text(f"INSERT INTO {table} ({columns}) VALUES ({values})"), row
                    )
            if kind == "postgresql":  # the explicit ids above did not move the sequence
                await connection.exec_driver_sql(
                    "SELECT setval('sessions_id_seq', 1), setval('messages_id_seq', 2), "
                    "setval('task_log_id_seq', 1)"
                )
    finally:
        await database.close()


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return compare_metadata(context, SQLModel.metadata)


def _revisions(connection: Connection) -> tuple[str, ...]:
    return MigrationContext.configure(connection).get_current_heads()


async def assert_at_head(url: str) -> None:
    """Stamped at the newest revision, and the schema is exactly what the models say."""
    database = Database(url)
    try:
        async with database.engine.connect() as connection:
            assert await connection.run_sync(_revisions) == (migrations.head(),)
            assert await connection.run_sync(_differences) == []
    finally:
        await database.close()


async def start_together(url: str, count: int = 6) -> None:
    databases = [Database(url) for _ in range(count)]
    try:
        await asyncio.gather(*(d.create_schema() for d in databases))
    finally:
        for database in databases:
            await database.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_new_database_gets_the_schema_the_models_describe(
    kind: str, tmp_path: Path
) -> None:
    async with fresh_database(kind, tmp_path) as url:
        database = Database(url)
        await database.create_schema()
        await database.create_schema()  # a restart finds nothing to do
        await database.close()
        # Autogenerate finds nothing to add: a model change without a revision fails here.
        await assert_at_head(url)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_oldest_database_is_upgraded_in_place(kind: str, tmp_path: Path) -> None:
    async with fresh_database(kind, tmp_path) as url:
        await make_oldest(url, kind)
        database = Database(url)
        try:
            await database.create_schema()
            async with database.engine.connect() as connection:
                tables = await connection.run_sync(
                    lambda sync: {
                        name: {c["name"] for c in inspect(sync).get_columns(name)}
                        for name in inspect(sync).get_table_names()
                    }
                )
            for table in SQLModel.metadata.sorted_tables:
                assert {c.name for c in table.columns} <= tables[table.name], table.name

            # The old rows, through today's stores.
            sessions = SessionStore(database)
            session = await sessions.get_or_create(THREAD)
            assert session.id == 1
            assert [(m.role, m.content) for m in await sessions.history(1)] == [
                ("user", "hello"),
                ("assistant", "hi"),
            ]
            assert await sessions.usage(1) == (0, 0)  # the columns added with 0 for old rows
            await sessions.add_usage(1, prompt_tokens=5, completion_tokens=6)
            assert await sessions.usage(1) == (5, 6)
            await sessions.append(1, [*await sessions.history(1)][:1])
            assert len(await sessions.history(1)) == 3

            tasks = TaskStore(database)
            task = await tasks.get("task-explore-1")
            assert task is not None
            assert (task.state, task.result) == ("completed", "r")
            assert await tasks.log("task-explore-1") == ("looked",)
            assert await tasks.next_id("explore") == "task-explore-2"

            approvals = ApprovalStore(database)
            approval = await approvals.get("ap1")
            assert approval is not None
            assert approval.state == "pending"
            decided = await approvals.decide("ap1", "approved", by="U2")
            assert decided is not None
            assert decided.state == "approved"

            assert await EventLedger(database).claim("Ev1") is False
            assert await EventLedger(database).claim("Ev2") is True
        finally:
            await database.close()
        await assert_at_head(url)


@pytest.mark.parametrize("old", [False, True], ids=["fresh", "pre-migrations"])
@pytest.mark.parametrize("kind", KINDS)
async def test_six_replicas_start_together(kind: str, old: bool, tmp_path: Path) -> None:
    async with fresh_database(kind, tmp_path) as url:
        if old:
            await make_oldest(url, kind)
        await start_together(url)
        await assert_at_head(url)
        if old:
            database = Database(url)
            try:
                assert len(await SessionStore(database).history(1)) == 2
            finally:
                await database.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_database_newer_than_baton_stops_the_start(kind: str, tmp_path: Path) -> None:
    async with fresh_database(kind, tmp_path) as url:
        database = Database(url)
        try:
            await database.create_schema()
            async with database.engine.begin() as connection:
                await connection.execute(text("UPDATE alembic_version SET version_num = 'f00d'"))
            with pytest.raises(ConfigError) as caught:
                await database.create_schema()
        finally:
            await database.close()
    message = str(caught.value)
    assert "revision f00d" in message
    assert migrations.head() in message
    assert "\n" not in message


def test_the_newest_revision_is_read_alike_without_alembic() -> None:
    # A start compares the database's stamp with the revision files' headers and imports
    # Alembic only when they differ: the headers must name the head Alembic finds.
    assert migrations.head_of_files() == migrations.head()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_stamp_is_read_alike_without_alembic(kind: str, tmp_path: Path) -> None:
    async with fresh_database(kind, tmp_path) as url:
        database = Database(url)
        try:
            async with database.engine.connect() as connection:
                assert await connection.run_sync(migrations.stamped_revisions) == ()
            await database.create_schema()
            async with database.engine.connect() as connection:
                stamped = await connection.run_sync(migrations.stamped_revisions)
                assert stamped == await connection.run_sync(_revisions) == (migrations.head(),)
        finally:
            await database.close()


async def test_in_memory_sqlite_needs_no_lock_file(tmp_path: Path) -> None:
    database = Database("sqlite:///:memory:")
    try:
        await database.create_schema()
        async with database.engine.connect() as connection:
            assert await connection.run_sync(_revisions) == (migrations.head(),)
    finally:
        await database.close()


async def test_the_sqlite_lock_is_a_file_beside_the_database(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    try:
        await database.create_schema()
    finally:
        await database.close()
    assert (tmp_path / "baton.db.migrate.lock").exists()
