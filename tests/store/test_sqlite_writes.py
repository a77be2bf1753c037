"""SQLite's writers in one process take turns before SQLite sees them (none waits in its
busy handler), while another process writing the same file is still waited for."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from bot.store.database import Database
from bot.store.sqlite_writes import SerialWritesDialect, opens_write
from bot.store.thread_inbox import NEW, PENDING, Inbound, ThreadInbox


@pytest.mark.parametrize(
    ("statement", "opens"),
    [
        ("INSERT INTO t VALUES (1)", True),
        ("  insert into t values (1)", True),
        ("UPDATE t SET a = 1", True),
        ("DELETE FROM t", True),
        ("REPLACE INTO t VALUES (1)", True),
        ("-- why\nUPDATE t SET a = 1", True),
        ("/* a\ncomment */ DELETE FROM t", True),
        ("SELECT * FROM t", False),
        ("select 1 -- INSERT", False),
        ("PRAGMA busy_timeout=0", False),
        ("ALTER TABLE t RENAME TO u", False),
        ("CREATE TABLE insert_log (a)", False),
        ("UPDATER", False),
        # Python's sqlite3 opens no transaction before these either (it reads the first
        # keyword only): such a statement writes alone, and SQLite's lock orders it.
        ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", False),
    ],
)
def test_what_opens_a_write_transaction(statement: str, opens: bool) -> None:
    assert opens_write(statement) is opens


def inbound(ts: str, key: str = "slack:T1:C1:1") -> Inbound:
    return Inbound(
        session_key=key, channel_id="C1", thread_ts="1", ts=ts, user_id="U1", text=f"m {ts}"
    )


def write_turns_of(database: Database) -> Any:
    dialect = database.engine.sync_engine.dialect
    assert isinstance(dialect, SerialWritesDialect)
    return dialect.write_turns


async def test_writers_of_one_process_never_meet_inside_sqlite(tmp_path: Path) -> None:
    """With SQLite's busy timeout at 0, a writer that found another's write lock would
    fail at once ("database is locked"): none does, however many write together."""
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")

    @event.listens_for(database.engine.sync_engine, "connect")
    def no_busy_handler(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.close()

    await database.create_schema()
    inbox = ThreadInbox(database)
    try:
        stored = await asyncio.gather(
            *(inbox.receive(inbound(f"1.{n:06d}"), holder="p", state=PENDING) for n in range(30))
        )
        ids = [m.id for m in stored if m is not None]
        alive = [f"p{n}" for n in range(30)]
        # Every kind of writer at once, each in its own transaction on its own connection.
        outcomes = await asyncio.gather(
            *(inbox.receive(inbound(f"2.{n:06d}"), holder="p") for n in range(20)),
            *(inbox.lease(f"k{n}", owner=f"p{n}", run_id=f"r{n}", alive=alive) for n in range(20)),
            *(inbox.move([i], NEW, only_from=[PENDING]) for i in ids),
            *(
                inbox.take(f"k{n}", run_id=f"r{n}", holder="p", questions_only=False)
                for n in range(10)
            ),
            *(inbox.release(f"k{n}", f"r{n}") for n in range(10, 20)),
            return_exceptions=True,
        )
        assert not [o for o in outcomes if isinstance(o, BaseException)]
        turns = write_turns_of(database)
        assert turns.waited > 0  # they did want to write at once; they took turns
        assert turns.holder is None  # and every turn was given back
    finally:
        await database.close()


async def test_a_failed_write_gives_its_turn_back(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await database.create_schema()
    inbox = ThreadInbox(database)
    try:
        async with database.sessions() as session:
            await session.exec(text("ALTER TABLE thread_leases RENAME TO thread_leases_away"))  # type: ignore[call-overload]
            await session.commit()
        with pytest.raises(Exception, match="no such table"):
            await inbox.lease("k", owner="p", run_id="r", alive=["p"])
        assert write_turns_of(database).holder is None
        assert await inbox.receive(inbound("3.000001"), holder="p") is not None
    finally:
        await database.close()


HOLD_THE_FILE = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
connection.execute("UPDATE thread_messages SET text = text")
print("locked", flush=True)
sys.stdin.readline()
connection.execute("COMMIT")
print("committed", flush=True)
"""


async def test_another_process_writing_the_file_is_waited_for(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock: a receive here waits for it in SQLite's
    busy handler, as before, and is stored once it commits (not refused)."""
    path = tmp_path / "baton.db"
    database = Database(f"sqlite:///{path}")
    await database.create_schema()
    inbox = ThreadInbox(database)
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_THE_FILE, str(path),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert other.stdin is not None and other.stdout is not None
    try:
        assert await other.stdout.readline() == b"locked\n"
        receiving = asyncio.create_task(inbox.receive(inbound("4.000001"), holder="p"))
        turns = write_turns_of(database)
        # Polling is the point: the turn is taken in SQLAlchemy's greenlet, with no event.
        while turns.holder is None:  # noqa: ASYNC110  (then its INSERT waits in SQLite)
            await asyncio.sleep(0.01)
        assert not receiving.done()
        other.stdin.write(b"go\n")
        await other.stdin.drain()
        assert await other.stdout.readline() == b"committed\n"
        stored = await receiving
        assert stored is not None and stored.ts == "4.000001"
    finally:
        if other.returncode is None:
            other.kill()
        await other.wait()
        await database.close()


async def test_a_writer_waits_for_its_turn_no_longer_than_sqlite_would(tmp_path: Path) -> None:
    """A turn never given back (a transaction left open) fails the next writer as SQLite's
    busy timeout would, "database is locked", rather than holding it forever."""
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await database.create_schema()
    inbox = ThreadInbox(database)
    turns = write_turns_of(database)
    turns.timeout_s = 0.05
    stuck = object()
    try:
        await turns.take(stuck)
        with pytest.raises(OperationalError, match="database is locked"):
            await inbox.lease("k", owner="p", run_id="r", alive=["p"])
        turns.give_up(stuck)
        assert await inbox.lease("k", owner="p", run_id="r", alive=["p"])
    finally:
        await database.close()


async def test_a_write_cancelled_before_its_rows_are_read_leaves_no_lock_behind(
    tmp_path: Path,
) -> None:
    """A task cancelled while its UPDATE … RETURNING runs (a run cancelled, a shutdown)
    left the statement's rows unread: closing that connection then left SQLite's write
    lock held by its cursor (sqlite3_close_v2 keeps such a connection alive), and every
    writer waited out the 30 s busy timeout. The cursor is closed with the failure."""
    path = tmp_path / "baton.db"
    database = Database(f"sqlite:///{path}")
    started, release = threading.Event(), threading.Event()

    def slow(value: int) -> int:  # runs in the driver's thread, inside the UPDATE
        started.set()
        release.wait(10)
        return value + 1

    @event.listens_for(database.engine.sync_engine, "connect")
    def add_slow(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.create_function("slow", 1, slow)

    try:
        async with database.engine.begin() as connection:
            await connection.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, x INT)"))
            await connection.execute(text("INSERT INTO t (x) VALUES (1)"))

        async def write() -> None:
            async with database.engine.begin() as connection:
                await connection.execute(text("UPDATE t SET x = slow(x) RETURNING id"))

        writer = asyncio.create_task(write())
        assert await asyncio.to_thread(started.wait, 10)
        writer.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await writer
        await database.engine.dispose()  # what a cancelled connection comes to: closed

        def another_writer() -> None:  # another process's, say; it waits 1 s at most
            other = sqlite3.connect(path, timeout=1)
            try:
                other.execute("DELETE FROM t")
                other.commit()
            finally:
                other.close()

        await asyncio.to_thread(another_writer)  # "database is locked" when held
    finally:
        release.set()
        await database.close()
