"""The async database: engine, sessions, schema; SQLite by default, PostgreSQL at scale."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.errors import ConfigError
from bot.redaction import redact, url_password
from bot.store import models  # noqa: F401  (registers the tables on SQLModel.metadata)

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
        if self.url.startswith("sqlite"):
            options["connect_args"] = {"timeout": 30}
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        if self.url.startswith("sqlite"):
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)

    async def create_schema(self) -> None:
        async with self.engine.begin() as connection:
            await connection.run_sync(SQLModel.metadata.create_all)

    async def close(self) -> None:
        await self.engine.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers go on while a writer commits; foreign keys are off by default.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
