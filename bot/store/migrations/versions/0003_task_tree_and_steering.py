"""Sub-agents that nest, work in worktrees, hand off validated results and take steering.

`tasks` gains the task's parent and depth (nesting), its fan-in group, an isolated
child's branch, change summary and merge state, and its handoff (JSON).
`task_messages` holds steering messages for running tasks until the process running
the task takes them.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("parent_id", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("depth", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("group_name", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("branch", sa.String(length=160), nullable=True))
        batch.add_column(sa.Column("branch_commit", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("change", sa.Text(), nullable=True))
        batch.add_column(sa.Column("merge_state", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("handoff", sa.Text(), nullable=True))
        batch.create_index("ix_tasks_parent_id", ["parent_id"])
    op.create_table(
        "task_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(length=128), nullable=False),
        sa.Column("author", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("taken", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_messages_task_id", "task_messages", ["task_id"])
    op.create_index("ix_task_messages_taken", "task_messages", ["taken"])


def downgrade() -> None:
    op.drop_table("task_messages")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_parent_id")
        for column in (
            "handoff",
            "merge_state",
            "change",
            "branch_commit",
            "branch",
            "group_name",
            "depth",
            "parent_id",
        ):
            batch.drop_column(column)
