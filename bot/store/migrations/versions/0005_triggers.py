"""Work that starts itself: schedules, their fire times, trigger windows; what started a run.

`runs.trigger` and `thread_messages.trigger` name the schedule, webhook or watched
channel that started a run (None: a person did).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("cron", sa.String(length=120), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=32), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_schedules_channel_id", "schedules", ["channel_id"])
    op.create_table(
        "schedule_states",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("spec", sa.String(length=200), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_by", sa.String(length=32), nullable=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "schedule_fires",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("missed", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("message_ts", sa.String(length=64), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "fire_at"),
    )
    op.create_index("ix_schedule_fires_name", "schedule_fires", ["name"])
    op.create_table(
        "trigger_windows",
        sa.Column("key", sa.String(length=160), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("noted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("trigger", sa.String(length=96), nullable=True))
        batch.create_index("ix_runs_trigger", ["trigger"])
    with op.batch_alter_table("thread_messages") as batch:
        batch.add_column(sa.Column("trigger", sa.String(length=96), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("thread_messages") as batch:
        batch.drop_column("trigger")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_trigger")
        batch.drop_column("trigger")
    op.drop_table("trigger_windows")
    op.drop_index("ix_schedule_fires_name", table_name="schedule_fires")
    op.drop_table("schedule_fires")
    op.drop_table("schedule_states")
    op.drop_index("ix_schedules_channel_id", table_name="schedules")
    op.drop_table("schedules")
