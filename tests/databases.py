"""Databases for tests: a fresh SQLite file, or a fresh PostgreSQL database.

PostgreSQL is used when BATON_TEST_POSTGRES_URL names a server where the user may
create databases (`.ci/run` sets one up when it can); each use gets its own
database, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

POSTGRES_SERVER = os.environ.get("BATON_TEST_POSTGRES_URL")


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
