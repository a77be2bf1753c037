"""SQLite's writers in this process take turns on an asyncio lock, not in SQLite's busy
handler.

SQLite lets one connection write at a time. One that finds the write lock taken waits
in SQLite's busy handler (`busy_timeout`), which sleeps and tries again, its sleeps
growing to 100 ms: under load a writer sleeps on long after the lock was freed. Slack's
ack waited behind that (744 ms at p99 for 50 concurrent mentions).

Here every write transaction of the engine first takes the engine's turn (an asyncio
lock): it is taken before the statement that opens the transaction (Python's sqlite3
opens one before an INSERT, UPDATE, DELETE or REPLACE; reads need none under WAL), and
handed to the next writer as soon as COMMIT or ROLLBACK has returned. So this process's
writers never meet one another inside SQLite, and none of them sleeps.

The turn only queues writers in front of SQLite's own locking, which stays whole: another
process writing the same file (the `baton` CLI, or two bots by mistake) still waits in
the busy handler, and where the turn and SQLite's lock ever part (a statement that
failed before its transaction began, a COMMIT that failed), the turn is given up and
SQLite's lock is all that remains, as before. A writer waits for its turn no longer than
SQLite's busy timeout, and then fails as SQLite would ("database is locked").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.util import await_only

logger = logging.getLogger(__name__)

# The driver name that selects this dialect: `sqlite+baton_aiosqlite:///…`.
DRIVER = "baton_aiosqlite"
# As long as SQLite's busy handler would wait (`PRAGMA busy_timeout`, bot/store/database.py).
BUSY_TIMEOUT_S = 30.0

# The statements before which Python's sqlite3 opens a transaction (its `is_dml`): the
# first keyword, after blanks and comments.
_OPENS_WRITE = re.compile(
    r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*(?:insert|update|delete|replace)\b",
    re.IGNORECASE | re.DOTALL,
)


def opens_write(statement: str) -> bool:
    """Whether sqlite3 would begin a write transaction before `statement`."""
    return _OPENS_WRITE.match(statement) is not None


class WriteTurns:
    """Whose turn it is to write: one connection at a time, the others queued in order."""

    def __init__(self, timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self.holder: object | None = None
        self.taken = 0  # turns taken, for tests and figures
        self.waited = 0  # of them, turns that had to wait for another writer

    async def take(self, connection: object) -> None:
        if self._lock.locked():
            self.waited += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._lock.acquire()
        except TimeoutError:
            raise sqlite3.OperationalError("database is locked") from None
        self.holder = connection
        self.taken += 1

    def give_up(self, connection: object) -> None:
        if self.holder is connection:
            self.holder = None
            self._lock.release()


@contextlib.contextmanager
def _closed_on_failure(cursor: Any) -> Iterator[None]:
    """Close the driver's cursor when its statement fails or is cancelled.

    A task cancelled while its statement ran (an UPDATE … RETURNING whose rows it never
    read) leaves the statement open in the driver's cursor. Closing the connection then
    does not end its transaction: sqlite3_close_v2 keeps a connection whose statements
    are still open alive, with its write lock, until the cursor is collected, and
    every writer meanwhile waits out the busy timeout. Closing the cursor ends the
    statement, so the rollback or close that follows ends the transaction.
    """
    try:
        yield
    except BaseException:
        driver_cursor = getattr(cursor, "_cursor", None)  # aiosqlite's, under the adapter
        if driver_cursor is not None:
            try:
                await_only(driver_cursor.close())
            except BaseException:  # the first failure is the one to raise
                logger.debug("could not close a failed statement's cursor", exc_info=True)
        raise


def _dbapi_connection(connection: Any) -> object:
    # SQLAlchemy hands the dialect either the driver's connection or the pool's proxy
    # of it; the turn belongs to the driver's connection.
    return getattr(connection, "dbapi_connection", None) or connection


class SerialWritesDialect(SQLiteDialect_aiosqlite):
    """SQLAlchemy's aiosqlite dialect, with this engine's writers taking turns."""

    driver = DRIVER
    # What SQL it compiles is its parent's: the parent's statement cache is as valid.
    supports_statement_cache = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.write_turns = WriteTurns()

    def do_execute(self, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        with self._turn(statement, context), _closed_on_failure(cursor):
            super().do_execute(cursor, statement, parameters, context)

    def do_executemany(
        self, cursor: Any, statement: str, parameters: Any, context: Any = None
    ) -> None:
        with self._turn(statement, context), _closed_on_failure(cursor):
            super().do_executemany(cursor, statement, parameters, context)

    def do_execute_no_params(self, cursor: Any, statement: str, context: Any = None) -> None:
        with self._turn(statement, context), _closed_on_failure(cursor):
            super().do_execute_no_params(cursor, statement, context)

    @contextlib.contextmanager
    def _turn(self, statement: str, context: Any) -> Iterator[None]:
        """Take this connection's turn first if `statement` opens a write transaction."""
        connection = _dbapi_connection(context.root_connection.connection) if context else None
        took = False
        if (
            connection is not None
            and self.write_turns.holder is not connection
            and opens_write(statement)
        ):
            # Inside SQLAlchemy's greenlet, where the driver awaits its own calls too.
            await_only(self.write_turns.take(connection))
            took = True
        try:
            yield
        except BaseException:
            # The transaction may not have begun (a statement that did not compile);
            # if it did, SQLite's own lock keeps other writers out until it ends.
            if took:
                self.write_turns.give_up(connection)
            raise

    def do_commit(self, dbapi_connection: Any) -> None:
        try:
            super().do_commit(dbapi_connection)
        finally:
            self.write_turns.give_up(_dbapi_connection(dbapi_connection))

    def do_rollback(self, dbapi_connection: Any) -> None:
        try:
            super().do_rollback(dbapi_connection)
        finally:
            self.write_turns.give_up(_dbapi_connection(dbapi_connection))

    def do_close(self, dbapi_connection: Any) -> None:
        try:
            super().do_close(dbapi_connection)
        finally:
            self.write_turns.give_up(_dbapi_connection(dbapi_connection))

    def do_terminate(self, dbapi_connection: Any) -> None:
        try:
            super().do_terminate(dbapi_connection)
        finally:
            self.write_turns.give_up(_dbapi_connection(dbapi_connection))


registry.register(f"sqlite.{DRIVER}", __name__, "SerialWritesDialect")
