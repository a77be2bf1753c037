"""The schema when migrations came in: every table of bot/store/models.py then.

One function a table, in the order foreign keys need, so that `legacy.py` can
create just the tables a database made by an older release lacks.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _moment(name: str, *, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _indexes(table: str, *columns: str, unique: Sequence[str] = ()) -> None:
    for column in columns:
        op.create_index(f"ix_{table}_{column}", table, [column], unique=column in unique)


def sessions() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("team_id", sa.String(length=32), nullable=True),
        sa.Column("channel_id", sa.String(length=32), nullable=True),
        sa.Column("thread_ts", sa.String(length=32), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        _moment("created_at"),
        _moment("updated_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("sessions", "channel_id", "key", unique=["key"])


def messages() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.JSON(), nullable=True),
        sa.Column("tool_call_id", sa.String(length=128), nullable=True),
        sa.Column("name", sa.String(length=128), nullable=True),
        _moment("created_at"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("session_id", "seq"),
    )
    _indexes("messages", "session_id")


def compactions() -> None:
    op.create_table(
        "compactions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("through_seq", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("folded", sa.Integer(), nullable=False),
        _moment("created_at"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("compactions", "session_id")


def tasks() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=True),
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("background", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("started_by", sa.String(length=32), nullable=True),
        sa.Column("owner", sa.String(length=64), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("delivered", sa.Boolean(), nullable=False),
        _moment("created_at"),
        _moment("finished_at", nullable=True),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("tasks", "channel_id", "owner", "session_id", "state")


def task_sequences() -> None:
    op.create_table(
        "task_sequences",
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("last", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("agent"),
    )


def task_log() -> None:
    op.create_table(
        "task_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(length=128), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        _moment("created_at"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("task_log", "task_id")


def approvals() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(length=128), nullable=True),
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested_by", sa.String(length=32), nullable=True),
        sa.Column("owner", sa.String(length=64), nullable=True),
        sa.Column("decided_by", sa.String(length=32), nullable=True),
        _moment("decided_at", nullable=True),
        sa.Column("channel_id", sa.String(length=32), nullable=True),
        sa.Column("message_ts", sa.String(length=32), nullable=True),
        _moment("created_at"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("approvals", "owner", "session_id", "state")


def runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("progress_ts", sa.String(length=32), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("cancel_requested_by", sa.String(length=32), nullable=True),
        _moment("created_at"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("runs", "owner", "session_id", "state")


def instances() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        _moment("started_at"),
        _moment("heartbeat_at"),
        sa.PrimaryKeyConstraint("id"),
    )


def processed_events() -> None:
    op.create_table(
        "processed_events",
        sa.Column("key", sa.String(length=255), nullable=False),
        _moment("created_at"),
        sa.PrimaryKeyConstraint("key"),
    )


def usage() -> None:
    op.create_table(
        "usage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=True),
        sa.Column("channel_id", sa.String(length=32), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("task_id", sa.String(length=128), nullable=True),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        _moment("created_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("usage", "channel_id", "day", "run_id", "user_id")


def approval_deciders() -> None:
    op.create_table(
        "approval_deciders",
        sa.Column("approval_id", sa.String(length=64), nullable=False),
        sa.Column("approver_sets", sa.JSON(), nullable=True),
        sa.Column("self_approval", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["approval_id"], ["approvals.id"]),
        sa.PrimaryKeyConstraint("approval_id"),
    )


def feedback() -> None:
    op.create_table(
        "feedback",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("value", sa.String(length=8), nullable=False),
        _moment("created_at"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("run_id", "user_id"),
    )
    _indexes("feedback", "channel_id")


def slack_rate() -> None:
    op.create_table(
        "slack_rate",
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("tat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )


# Every table, parents before the tables whose foreign keys point at them.
TABLES: dict[str, Callable[[], None]] = {
    create.__name__: create
    for create in (
        sessions,
        messages,
        compactions,
        tasks,
        task_sequences,
        task_log,
        approvals,
        runs,
        instances,
        processed_events,
        usage,
        approval_deciders,
        feedback,
        slack_rate,
    )
}


def upgrade() -> None:
    for create in TABLES.values():
        create()


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)
