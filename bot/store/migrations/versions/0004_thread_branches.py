"""A branch per thread on workspaces with a git remote, and its pull request.

`thread_messages.author_id` widens to 64 characters: a message from the forge names
its author `gh:<login>` (GitHub logins reach 39 characters).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "thread_branches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_key", sa.String(length=255), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=False),
        sa.Column("repo", sa.String(length=255), nullable=False),
        sa.Column("branch", sa.String(length=160), nullable=False),
        sa.Column("base", sa.String(length=200), nullable=False),
        sa.Column("worktree", sa.Text(), nullable=False),
        sa.Column("requester", sa.String(length=32), nullable=True),
        sa.Column("head", sa.String(length=64), nullable=True),
        sa.Column("pushed", sa.String(length=64), nullable=True),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("pr_url", sa.Text(), nullable=True),
        sa.Column("checks_sha", sa.String(length=64), nullable=True),
        sa.Column("checks_told", sa.JSON(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("repo", "branch"),
        # Ids are never reused: an old message's buttons must not reach a new branch.
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_thread_branches_session_key", "thread_branches", ["session_key"], unique=True
    )
    op.create_index("ix_thread_branches_repo", "thread_branches", ["repo"])
    op.create_index("ix_thread_branches_state", "thread_branches", ["state"])
    with op.batch_alter_table("thread_messages") as batch:
        batch.alter_column(
            "author_id",
            existing_type=sa.String(length=32),
            type_=sa.String(length=64),
            existing_nullable=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("thread_messages") as batch:
        batch.alter_column(
            "author_id",
            existing_type=sa.String(length=64),
            type_=sa.String(length=32),
            existing_nullable=False,
        )
    op.drop_table("thread_branches")
