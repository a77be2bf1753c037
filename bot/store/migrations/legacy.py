"""Databases made by `create_all` before Baton had migrations, brought to revision 0001.

Such a database has Baton's tables but no `alembic_version`. `create_all` only ever
added missing tables, never columns, so an old database lacks the tables and the
columns (with their indexes) that releases after it added. Going through
`git log -p -- bot/store/models.py` up to revision 0001, releases added:

- columns `tasks.owner`, `approvals.owner` (indexed), table `instances` (8ba4604);
- columns `sessions.prompt_tokens`, `sessions.completion_tokens` (336d4c9);
- table `runs` (1094240); tables `usage`, `approval_deciders` (ee35929);
- table `compactions` (155a0ba); tables `feedback`, `slack_rate` (6253faa).

Whatever of that is missing is added here, in place, keeping every row; the caller
then stamps the database at 0001. A database that was already complete gets nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

# The schema as it was when migrations came in; pre-Alembic databases are stamped here.
FIRST_REVISION = "0001"
# The tables of the oldest release: one of them present means Baton made the database.
FIRST_TABLES = frozenset(
    {"sessions", "messages", "tasks", "task_sequences", "task_log", "approvals", "processed_events"}
)


@dataclass(frozen=True)
class _Added:
    """A column a release added to a table that existed before it."""

    table: str
    column: str
    type: sa.types.TypeEngine[object]
    nullable: bool = True
    # Existing rows need a value for a NOT NULL column; the models' default.
    fill: str | None = None
    indexed: bool = False


ADDED_COLUMNS = (
    _Added("tasks", "owner", sa.String(length=64), indexed=True),
    _Added("approvals", "owner", sa.String(length=64), indexed=True),
    _Added("sessions", "prompt_tokens", sa.Integer(), nullable=False, fill="0"),
    _Added("sessions", "completion_tokens", sa.Integer(), nullable=False, fill="0"),
)


def bring_to_first_revision(
    connection: Connection, first_tables: Mapping[str, Callable[[], None]]
) -> None:
    """Add what revision 0001 has and this pre-migrations database lacks; `first_tables`
    are revision 0001's `TABLES` (each table's name and what creates it)."""
    # Alembic is imported only when there is something to migrate (see the package).
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    inspector = sa.inspect(connection)
    existing = set(inspector.get_table_names())
    columns = {name: {c["name"] for c in inspector.get_columns(name)} for name in existing}
    indexes = {name: {i["name"] for i in inspector.get_indexes(name)} for name in existing}
    postgres = connection.dialect.name == "postgresql"
    with Operations.context(MigrationContext.configure(connection)) as op:
        for added in ADDED_COLUMNS:
            if added.table not in existing:
                continue  # created whole below
            if added.column not in columns[added.table]:
                op.add_column(
                    added.table,
                    sa.Column(
                        added.column,
                        added.type,
                        nullable=added.nullable,
                        server_default=added.fill,
                    ),
                )
                if added.fill is not None and postgres:
                    # Revision 0001 has no server default; SQLite cannot drop one in
                    # place, and there it is harmless (the models always give a value).
                    op.alter_column(added.table, added.column, server_default=None)
            index = f"ix_{added.table}_{added.column}"
            if added.indexed and index not in indexes[added.table]:
                op.create_index(index, added.table, [added.column])
        for name, create in first_tables.items():
            if name not in existing:
                create()
