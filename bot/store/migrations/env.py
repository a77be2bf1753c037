"""Alembic's environment for Baton's schema; run by `bot.store.migrations.upgrade`.

At start-up the Database hands its own connection (already locked, see
bot/store/database.py) in `config.attributes["connection"]`; the developer commands
(`python -m bot.store.migrations …`) connect to DATABASE_URL instead.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel
from sqlmodel.sql.sqltypes import AutoString

from bot.store import models  # noqa: F401  (registers every table on SQLModel.metadata)
from bot.store.database import Database

TARGET_METADATA = SQLModel.metadata


def _render_item(kind: str, item: Any, _autogen_context: Any) -> str | bool:
    """New revisions say sa.String where the models say sqlmodel's AutoString."""
    if kind == "type" and isinstance(item, AutoString):
        return f"sa.String(length={item.length})" if item.length else "sa.String()"
    return False


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=TARGET_METADATA,
        # SQLite cannot ALTER most things: batch mode copies the table instead.
        render_as_batch=True,
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_on_url(url: str) -> None:
    database = Database(url)
    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(run_migrations)
            await connection.commit()
    finally:
        await database.close()


given = context.config.attributes.get("connection")
if context.is_offline_mode():
    raise SystemExit("Baton's migrations run against a database; offline (--sql) is not supported")
if given is not None:
    run_migrations(given)
else:
    asyncio.run(_run_on_url(os.environ.get("DATABASE_URL", "sqlite:///baton.db")))
