"""Databases for tests: a fresh SQLite file, or a fresh PostgreSQL database.

PostgreSQL is used when BATON_TEST_POSTGRES_URL names a server where the user may
create databases (`.ci/run` sets one up when it can); each use gets its own
database, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store import Database

POSTGRES_SERVER = os.environ.get("BATON_TEST_POSTGRES_URL")

_template_lock = threading.Lock()
_template: Path | None = None


def migrated_sqlite(path: Path) -> None:
    """Put at `path` a copy of a SQLite database at the newest revision.

    The copy's original was migrated once in this process, by Baton's own code
    (`Database.create_schema`, as a first start does); a start on the copy finds it at
    the newest revision, as every later start of a deployment does. Migrating from an
    empty database is what tests/store tests; doing it again for each of the thousands
    of tests that start Baton would cost about a third of the whole run.
    """
    shutil.copyfile(_migrated_template(), path)


def _migrated_template() -> Path:
    global _template
    with _template_lock:
        if _template is None:
            directory = Path(tempfile.mkdtemp(prefix="baton-template-"))
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            template = directory / "baton.db"
            # Its own thread and loop: callers may be inside a running loop.
            worker = threading.Thread(target=asyncio.run, args=(_migrate(template),))
            worker.start()
            worker.join()
            # Closed cleanly, SQLite folded its write-ahead log into the file.
            assert not template.with_name("baton.db-wal").exists(), "the template's WAL is left"
            assert template.stat().st_size > 0, "the template was not migrated"
            _template = template
        return _template


async def _migrate(path: Path) -> None:
    database = Database(f"sqlite:///{path}")
    try:
        await database.create_schema()
    finally:
        await database.close()


@contextlib.asynccontextmanager
async def fresh_postgres() -> AsyncIterator[str]:
    """The URL of a new, empty PostgreSQL database; skips the test without a server."""
    if not POSTGRES_SERVER:
        pytest.skip("BATON_TEST_POSTGRES_URL is not set")
    name = f"baton_test_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(
        make_url(POSTGRES_SERVER).set(drivername="postgresql+asyncpg"),
        isolation_level="AUTOCOMMIT",
    )
    async with admin.connect() as connection:
        await connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_SERVER).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as connection:
            await connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


@contextlib.asynccontextmanager
async def fresh_database(kind: str, directory: Path) -> AsyncIterator[str]:
    """A new database of `kind` ("sqlite" in `directory`, or "postgresql")."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'baton.db'}"
        return
    async with fresh_postgres() as url:
        yield url
