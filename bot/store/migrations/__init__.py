"""Baton's schema migrations (Alembic): the environment, the revisions, and start-up.

`upgrade(connection)` is what the Database runs at start-up, on its own connection
and under its lock: an empty database gets every revision; a database made by
`create_all` before Baton had migrations (no `alembic_version` table) is first
brought to the first revision in place (`legacy.py`) and stamped; a database at a
revision this code does not know (a newer Baton ran on it) is refused. A database
already at the newest revision, what nearly every start finds, is recognised without
Alembic: importing it (with Mako and Pygments) costs a replica about 10 MB for good,
so it is imported only when there is something to migrate.

No alembic.ini is needed: the script location is this directory. For developers,
`python -m bot.store.migrations <alembic command>` (e.g. `revision --autogenerate
-m "…"`, `upgrade head`, `current`) runs Alembic's commands against DATABASE_URL.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from bot.errors import ConfigError
from bot.store.migrations import legacy
from bot.store.migrations.legacy import FIRST_REVISION

# Alembic narrates at INFO (plugins set up on import, "Context impl …" on every start);
# Baton says in one line what changed instead. Configuring the "alembic" logger wins.
if logging.getLogger("alembic").level == logging.NOTSET:
    logging.getLogger("alembic").setLevel(logging.WARNING)

logger = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).parent
VERSION_TABLE = "alembic_version"
# A revision file's header, as script.py.mako writes it.
_REVISION = re.compile(r'^revision: str = "([^"]+)"$', re.MULTILINE)
_DOWN_REVISION = re.compile(r'^down_revision: .* = "([^"]+)"$', re.MULTILINE)


def alembic_config(connection: Connection | None = None) -> Any:
    """Alembic's configuration (an `alembic.config.Config`), set in code; `connection`
    is the one env.py migrates."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this code knows."""
    from alembic.script import ScriptDirectory

    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def current(connection: Connection) -> tuple[str, ...]:
    """The revisions the database is stamped at (none before migrations)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_heads()


def head_of_files() -> str | None:
    """The newest revision as the revision files' headers say it, read without Alembic;
    None when they do not say it plainly (a merge revision, a header written otherwise)."""
    revisions: set[str] = set()
    replaced: set[str] = set()
    for path in (SCRIPT_LOCATION / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        found = _REVISION.search(source)
        if found is None:
            return None
        revisions.add(found[1])
        replaced.update(_DOWN_REVISION.findall(source))
    heads = revisions - replaced
    return heads.pop() if len(heads) == 1 else None


def stamped_revisions(connection: Connection) -> tuple[str, ...]:
    """`current`, read with plain SQL (no Alembic)."""
    if VERSION_TABLE not in inspect(connection).get_table_names():
        return ()
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
    return tuple(row[0] for row in rows)


def upgrade(connection: Connection) -> None:
    """Bring the database to the newest revision; the caller commits.

    Raises:
        ConfigError: the database is at a revision this Baton does not know.
    """
    newest = head_of_files()
    if newest is not None and stamped_revisions(connection) == (newest,):
        return
    _upgrade_with_alembic(connection)


def _upgrade_with_alembic(connection: Connection) -> None:
    from alembic import command
    from alembic.script import ScriptDirectory

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
            first = script.get_revision(FIRST_REVISION)
            assert first is not None
            legacy.bring_to_first_revision(connection, first.module.TABLES)
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
