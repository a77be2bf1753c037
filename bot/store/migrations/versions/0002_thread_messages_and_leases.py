"""One turn per thread across replicas: stored thread messages and thread leases.

`thread_messages` keeps each person's message from the moment it is taken from
Slack (the question survives a crash; a queued mention or a steering reply waits
there for the replica running the thread's turn); `thread_leases` says which
process runs a thread's turn now.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "thread_leases",
        sa.Column("session_key", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("direct", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_key"),
    )
    op.create_index("ix_thread_leases_owner", "thread_leases", ["owner"])
    op.create_table(
        "thread_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_key", sa.String(length=255), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("author_id", sa.String(length=32), nullable=False),
        sa.Column("team_id", sa.String(length=32), nullable=True),
        sa.Column("user_team", sa.String(length=32), nullable=True),
        sa.Column("enterprise_id", sa.String(length=32), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=True),
        sa.Column("is_dm", sa.Boolean(), nullable=False),
        sa.Column("addressed", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("channel_id", "ts"),
    )
    for column in ("holder", "run_id", "session_key", "state"):
        op.create_index(f"ix_thread_messages_{column}", "thread_messages", [column])


def downgrade() -> None:
    op.drop_table("thread_messages")
    op.drop_table("thread_leases")
