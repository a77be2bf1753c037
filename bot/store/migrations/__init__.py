"""Baton's schema migrations (Alembic): the environment, the revisions, and start-up.

`upgrade(connection)` is what the Database runs at start-up, on its own connection
and under its lock: an empty database gets every revision; a database made by
`create_all` before Baton had migrations (no `alembic_version` table) is first
brought to the first revision in place (`legacy.py`) and stamped; a database at a
revision this code does not know (a newer Baton ran on it) is refused.

No alembic.ini is needed: the script location is this directory. For developers,
`python -m bot.store.migrations <alembic command>` (e.g. `revision --autogenerate
-m "…"`, `upgrade head`, `current`) runs Alembic's commands against DATABASE_URL.
"""

from __future__ import annotations

import logging
from pathlib import Path

# Alembic narrates at INFO (plugins set up on import, "Context impl …" on every start);
# Baton says in one line what changed instead. Configuring the "alembic" logger wins.
if logging.getLogger("alembic").level == logging.NOTSET:
    logging.getLogger("alembic").setLevel(logging.WARNING)

from alembic import command  # after the logger's level is set
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from bot.errors import ConfigError
from bot.store.migrations import legacy
from bot.store.migrations.legacy import FIRST_REVISION

logger = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).parent


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, set in code; `connection` is the one env.py migrates."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this code knows."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def current(connection: Connection) -> tuple[str, ...]:
    """The revisions the database is stamped at (none before migrations)."""
    return MigrationContext.configure(connection).get_current_heads()


def upgrade(connection: Connection) -> None:
    """Bring the database to the newest revision; the caller commits.

    Raises:
        ConfigError: the database is at a revision this Baton does not know.
    """
    config = alembic_config(connection)
    script = ScriptDirectory.from_config(config)
    known = {revision.revision for revision in script.walk_revisions()}
    stamped = current(connection)
    unknown = [revision for revision in stamped if revision not in known]
    if unknown:
        raise ConfigError(
            f"the database schema is at revision {', '.join(unknown)}, which this Baton "
            f"does not know (its newest is {script.get_current_head()}): a newer Baton "
            "has migrated it; run that version, or point DATABASE_URL at another database"
        )
    newest = script.get_current_head()
    if not stamped:
        tables = set(inspect(connection).get_table_names())
        if tables & legacy.FIRST_TABLES:
            legacy.bring_to_first_revision(connection, script)
            command.stamp(config, FIRST_REVISION)
            logger.info(
                "database made before migrations: brought to schema revision %s in place",
                FIRST_REVISION,
            )
            stamped = (FIRST_REVISION,)
        else:
            command.upgrade(config, "head")
            logger.debug("new database: schema created at revision %s", newest)
            return
    if stamped != (newest,):
        command.upgrade(config, "head")
        logger.info("database schema upgraded from revision %s to %s", ", ".join(stamped), newest)
