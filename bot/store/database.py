"""The async database: engine, sessions, schema; SQLite by default, PostgreSQL at scale.

The schema is Alembic's (bot/store/migrations): `create_schema` migrates the database
to the newest revision at start-up, under a lock so that any number of replicas may
start together on one database.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import configure_mappers
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.errors import ConfigError
from bot.redaction import redact, url_password
from bot.store import (
    migrations,
    models,  # noqa: F401  (registers the tables on SQLModel.metadata)
    sqlite_writes,
)

# pg_advisory_lock's key for "migrating Baton's schema" ("baton" in ASCII); one per database.
MIGRATION_LOCK = 0x6261746F6E
_LOCK_POLL_S = 0.05

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


def async_url(url: str) -> str:
    """Turn a plain `sqlite:///…` or `postgresql://…` URL into one with an async driver."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        # The value is not echoed: a URL that does not parse cannot be trusted to
        # show where its password is, and the message reaches logs and terminals.
        raise ConfigError(
            redact(
                f"DATABASE_URL is not a database URL ({exc}); "
                "use sqlite:///path or postgresql://user:password@host/database",
                [url_password(url)],
            )
        ) from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend not in _ASYNC_DRIVERS:
        raise ConfigError(
            f"DATABASE_URL: {backend!r} is not supported; use sqlite:///path or postgresql://…"
        )
    if not driver or driver in {"psycopg2", "pysqlite"}:
        parsed = parsed.set(drivername=_ASYNC_DRIVERS[backend])
    return parsed.render_as_string(hide_password=False)


class Database:
    """Owns the async engine and hands out sessions."""

    def __init__(self, url: str) -> None:
        self.url = async_url(url)
        options: dict[str, Any] = {}
        engine_url = make_url(self.url)
        if engine_url.drivername == _ASYNC_DRIVERS["sqlite"]:
            # The same driver, its writers taking turns in this process rather than
            # sleeping in SQLite's busy handler (bot/store/sqlite_writes.py).
            engine_url = engine_url.set(drivername=f"sqlite+{sqlite_writes.DRIVER}")
        if self.url.startswith("sqlite"):
            options["connect_args"] = {"timeout": sqlite_writes.BUSY_TIMEOUT_S}
        self.engine: AsyncEngine = create_async_engine(engine_url, **options)
        if self.url.startswith("sqlite"):
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)
        # Messages are stored before Slack hears back (the ack), one batch at a time
        # (a group commit). On PostgreSQL that writer has a connection of its own: in a
        # burst, the runs the acks start hold every pooled connection, and an ack would
        # queue for one behind them. It autocommits: a batch is one INSERT statement,
        # which is its own transaction, so the ack waits on one round trip to the server
        # instead of three (BEGIN, the INSERT, COMMIT), each also a turn of a loop busy
        # with the burst. SQLite's writers take turns on one file whatever the engine
        # (bot/store/sqlite_writes.py): a second engine would only race them.
        self.intake_engine: AsyncEngine = (
            self.engine
            if engine_url.get_backend_name() == "sqlite"
            else create_async_engine(
                engine_url, pool_size=1, max_overflow=1, isolation_level="AUTOCOMMIT", **options
            )
        )
        # The ORM's mappers are set up here, once per process, rather than by the first
        # query (the first event's turn, which would wait about 25 ms for it).
        configure_mappers()

    async def create_schema(self) -> None:
        """Migrate the schema to the newest revision (every table, on an empty database).

        One replica migrates at a time; the others wait, then find nothing to do.

        Raises:
            ConfigError: the database is at a revision this Baton does not know.
        """
        if self.engine.dialect.name == "postgresql":
            async with self.engine.connect() as connection, _pg_advisory_lock(connection):
                await self._migrate(connection)
            return
        async with _file_lock(self.engine.url.database):
            async with self.engine.connect() as connection:
                # Foreign keys off while migrating: SQLite's batch ALTERs copy tables.
                await connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
                try:
                    await self._migrate(connection)
                finally:
                    await connection.exec_driver_sql("PRAGMA foreign_keys=ON")

    async def _migrate(self, connection: AsyncConnection) -> None:
        try:
            await connection.run_sync(migrations.upgrade)
            await connection.commit()
        except BaseException:
            await connection.rollback()
            raise

    async def close(self) -> None:
        if self.intake_engine is not self.engine:
            await self.intake_engine.dispose()
        await self.engine.dispose()


@contextlib.asynccontextmanager
async def _pg_advisory_lock(connection: AsyncConnection) -> AsyncIterator[None]:
    """Hold PostgreSQL's session lock MIGRATION_LOCK on `connection` meanwhile."""
    await connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
    await connection.commit()
    try:
        yield
    finally:
        try:
            await connection.execute(
                text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK}
            )
            await connection.commit()
        except Exception:
            # The connection is broken (the lock went with it) or cannot run the
            # unlock; it must not go back to the pool still holding the lock.
            await connection.invalidate()


@contextlib.asynccontextmanager
async def _file_lock(database: str | None) -> AsyncIterator[None]:
    """Hold an exclusive flock on `<database file>.migrate.lock`; none for in-memory SQLite."""
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    descriptor = _open_lock_file(database)
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(_LOCK_POLL_S)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def _open_lock_file(database: str) -> int:
    return os.open(f"{os.path.expanduser(database)}.migrate.lock", os.O_RDWR | os.O_CREAT, 0o600)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers go on while a writer commits; foreign keys are off by default.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Another process writing the same file is waited for this long; this process's
    # own writers never wait here (bot/store/sqlite_writes.py).
    cursor.execute(f"PRAGMA busy_timeout={int(sqlite_writes.BUSY_TIMEOUT_S * 1000)}")
    cursor.close()
