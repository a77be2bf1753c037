"""Sessions, message history and the event ledger on a real SQLite database file."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.engine.messages import ChatMessage, ToolCall
from bot.errors import ConfigError
from bot.store import Database, EventLedger, SessionKey, SessionStore
from bot.store.database import async_url
from bot.store.models import SessionRow, as_utc


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await db.create_schema()
    yield db
    await db.close()


THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1700000000.000100")

CONVERSATION = [
    ChatMessage(role="user", content="list the files", name="alice"),
    ChatMessage(
        role="assistant",
        content=None,
        tool_calls=(ToolCall(id="c1", name="list_dir", arguments='{"path": "."}'),),
    ),
    ChatMessage(role="tool", content="README.md\nsrc/", tool_call_id="c1", name="list_dir"),
    ChatMessage(role="assistant", content="There is a README and src/."),
]


async def test_history_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'baton.db'}"
    first = Database(url)
    await first.create_schema()
    store = SessionStore(first)
    session = await store.get_or_create(THREAD)
    await store.append(session.id, CONVERSATION[:2])
    await store.append(session.id, CONVERSATION[2:])
    await first.close()

    second = Database(url)
    await second.create_schema()
    try:
        store = SessionStore(second)
        again = await store.get_or_create(THREAD)
        assert again.id == session.id
        assert (again.channel_id, again.thread_ts) == ("C1", "1700000000.000100")
        assert await store.history(again.id) == CONVERSATION
    finally:
        await second.close()


async def test_sessions_are_separate(database: Database) -> None:
    store = SessionStore(database)
    one = await store.get_or_create(THREAD)
    other = await store.get_or_create(
        SessionKey.slack_thread(team_id="T1", channel_id="C2", thread_ts="1700000000.000100")
    )
    chat = await store.get_or_create(SessionKey.terminal("dev"))
    assert len({one.id, other.id, chat.id}) == 3
    await store.append(one.id, CONVERSATION)
    assert await store.history(other.id) == []
    assert await store.history(chat.id) == []
    assert chat.key == "chat:dev"


async def test_concurrent_get_or_create_makes_one_session(database: Database) -> None:
    store = SessionStore(database)
    records = await asyncio.gather(*(store.get_or_create(THREAD) for _ in range(8)))
    assert len({r.id for r in records}) == 1


async def test_event_ledger_claims_once(database: Database) -> None:
    ledger = EventLedger(database)
    results = await asyncio.gather(*(ledger.claim("Ev123") for _ in range(5)))
    assert sorted(results) == [False, False, False, False, True]
    assert await ledger.claim("Ev124")


async def test_event_ledger_forgets_old_claims(database: Database) -> None:
    from datetime import timedelta

    ledger = EventLedger(database)
    assert await ledger.claim("old")
    assert await ledger.prune(older_than=timedelta(days=7)) == 0
    assert not await ledger.claim("old")
    assert await ledger.prune(older_than=timedelta(seconds=-1)) == 1
    assert await ledger.claim("old")


def test_sqlite_uses_wal(tmp_path: Path) -> None:
    async def journal_mode() -> str:
        db = Database(f"sqlite:///{tmp_path / 'w.db'}")
        await db.create_schema()
        async with db.engine.connect() as connection:
            result = await connection.exec_driver_sql("PRAGMA journal_mode")
            mode = result.scalar_one()
        await db.close()
        return str(mode)

    assert asyncio.run(journal_mode()).lower() == "wal"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///baton.db", "sqlite+aiosqlite:///baton.db"),
        ("sqlite:////var/lib/baton.db", "sqlite+aiosqlite:////var/lib/baton.db"),
        ("postgresql://u:p@db:5432/baton", "postgresql+asyncpg://u:p@db:5432/baton"),
        ("postgresql+psycopg2://u@db/baton", "postgresql+asyncpg://u@db/baton"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_plain_urls_get_an_async_driver(url: str, expected: str) -> None:
    assert async_url(url) == expected


@pytest.mark.parametrize("url", ["mysql://x/y", "not a url"])
def test_unsupported_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match="DATABASE_URL"):
        async_url(url)


async def test_concurrent_appends_to_one_session_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    first, second = Database(url), Database(url)  # two processes, as far as the rows know
    await first.create_schema()
    try:
        a, b = SessionStore(first), SessionStore(second)
        session = await a.get_or_create(THREAD)
        batches = [[ChatMessage(role="user", content=f"m{n}-{i}") for i in range(3)]
                   for n in range(6)]  # fmt: skip
        await asyncio.gather(
            *((a if n % 2 else b).append(session.id, batch) for n, batch in enumerate(batches))
        )
        history = await a.history(session.id)
    finally:
        await first.close()
        await second.close()
    assert sorted(m.content or "" for m in history) == sorted(
        m.content or "" for batch in batches for m in batch
    )
    # Each batch stays together and in order.
    contents = [m.content or "" for m in history]
    for batch in batches:
        start = contents.index(batch[0].content or "")
        assert contents[start : start + 3] == [m.content for m in batch]


async def test_a_turn_of_many_messages_is_stored_whole_and_in_order(database: Database) -> None:
    """A fan-out's turn (an assistant message with many tool calls, then each result) is
    one INSERT of many rows: every field of every message comes back, in order, after
    what was there, and the session counts as updated."""
    store = SessionStore(database)
    session = await store.get_or_create(THREAD)
    await store.append(session.id, CONVERSATION)
    async with database.sessions() as db:
        row = await db.get(SessionRow, session.id)
        assert row is not None
        row.updated_at = datetime(2020, 1, 1, tzinfo=UTC)
        db.add(row)
        await db.commit()
    calls = tuple(
        ToolCall(id=f"c{n}", name="task", arguments=f'{{"prompt": "job {n}"}}') for n in range(16)
    )
    turn = [
        ChatMessage(role="user", content="fan out", name="bob"),
        ChatMessage(role="assistant", content=None, tool_calls=calls),
        *(
            ChatMessage(role="tool", content=f"<task {n}/>", tool_call_id=f"c{n}", name="task")
            for n in range(16)
        ),
        ChatMessage(role="assistant", content="started 'em all; \"quotes\" and ' stay"),
    ]
    await store.append(session.id, turn)
    assert await store.history(session.id) == [*CONVERSATION, *turn]
    async with database.sessions() as db:
        row = await db.get(SessionRow, session.id)
        assert row is not None and as_utc(row.updated_at) > datetime(2020, 1, 2, tzinfo=UTC)


def test_the_orm_is_set_up_with_the_database_not_by_the_first_query(tmp_path: Path) -> None:
    """Mapper configuration (about 25 ms, once per process) is paid at start-up, not by
    the first event's turn. A fresh interpreter: this one's mappers are set up already."""
    probe = (
        "import sys\n"
        "from sqlalchemy import inspect\n"
        "from bot.store.models import MessageRow, SessionRow, TaskRow\n"
        "rows = (MessageRow, SessionRow, TaskRow)\n"
        "assert not any(inspect(row).configured for row in rows)\n"
        "from bot.store.database import Database\n"
        f"Database('sqlite:///{tmp_path / 'baton.db'}')\n"
        "assert all(inspect(row).configured for row in rows)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
