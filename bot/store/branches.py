"""Threads' branches on workspaces with a git remote, and their pull requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from bot.store.database import Database
from bot.store.models import ThreadBranchRow, utcnow


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadBranch:
    """A thread's branch, as stored (see `ThreadBranchRow`)."""

    id: int
    session_key: str
    channel_id: str
    thread_ts: str
    repo: str
    branch: str
    base: str
    worktree: str
    requester: str | None
    head: str | None
    pushed: str | None
    pr_number: int | None
    pr_url: str | None
    checks_sha: str | None
    checks_told: tuple[str, ...]
    state: str

    @property
    def active(self) -> bool:
        return self.state == "active"


def _branch(row: ThreadBranchRow) -> ThreadBranch:
    assert row.id is not None
    return ThreadBranch(
        id=row.id,
        session_key=row.session_key,
        channel_id=row.channel_id,
        thread_ts=row.thread_ts,
        repo=row.repo,
        branch=row.branch,
        base=row.base,
        worktree=row.worktree,
        requester=row.requester,
        head=row.head,
        pushed=row.pushed,
        pr_number=row.pr_number,
        pr_url=row.pr_url,
        checks_sha=row.checks_sha,
        checks_told=tuple(row.checks_told or ()),
        state=row.state,
    )


class BranchStore:
    """Reads and writes `thread_branches`; every replica sees the same rows."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def of_thread(self, session_key: str) -> ThreadBranch | None:
        return await self._first(ThreadBranchRow.session_key == session_key)

    async def get(self, branch_id: int) -> ThreadBranch | None:
        async with self.database.sessions() as session:
            row = await session.get(ThreadBranchRow, branch_id)
            return None if row is None else _branch(row)

    async def by_branch(self, repo: str, branch: str) -> ThreadBranch | None:
        return await self._first(ThreadBranchRow.repo == repo, ThreadBranchRow.branch == branch)

    async def by_pull(self, repo: str, number: int) -> ThreadBranch | None:
        return await self._first(ThreadBranchRow.repo == repo, ThreadBranchRow.pr_number == number)

    async def _first(self, *conditions: Any) -> ThreadBranch | None:
        async with self.database.sessions() as session:
            row = (await session.exec(select(ThreadBranchRow).where(*conditions))).first()
            return None if row is None else _branch(row)

    async def with_pulls(
        self, *, channel_id: str | None = None, requester: str | None = None, limit: int = 10
    ) -> list[ThreadBranch]:
        """Branches with a pull request, newest first, of a channel (`/tasks`) or of the
        threads a person asked in (App Home); never unscoped."""
        if channel_id is None and requester is None:
            raise ValueError("listing pull requests needs a channel or a person")
        query = select(ThreadBranchRow).where(col(ThreadBranchRow.pr_url).is_not(None))
        if channel_id is not None:
            query = query.where(ThreadBranchRow.channel_id == channel_id)
        if requester is not None:
            query = query.where(ThreadBranchRow.requester == requester)
        query = query.order_by(col(ThreadBranchRow.updated_at).desc()).limit(limit)
        async with self.database.sessions() as session:
            return [_branch(row) for row in (await session.exec(query)).all()]

    async def add(
        self,
        *,
        session_key: str,
        channel_id: str,
        thread_ts: str,
        repo: str,
        branch: str,
        base: str,
        worktree: str,
        requester: str | None,
    ) -> ThreadBranch:
        """Record a thread's new branch; the thread's existing one if another process
        recorded it first (the session key is unique)."""
        try:
            async with self.database.sessions() as session:
                row = ThreadBranchRow(
                    session_key=session_key,
                    channel_id=channel_id,
                    thread_ts=thread_ts,
                    repo=repo,
                    branch=branch,
                    base=base,
                    worktree=worktree,
                    requester=requester,
                )
                session.add(row)
                await session.commit()
                await session.refresh(row)
                return _branch(row)
        except IntegrityError:
            existing = await self.of_thread(session_key)
            if existing is None:
                raise
            return existing

    async def set(self, branch_id: int, **values: Any) -> None:
        """Change a branch's columns (head, pushed, pr_*, checks_*, state, worktree)."""
        allowed = {
            "head",
            "pushed",
            "pr_number",
            "pr_url",
            "checks_sha",
            "checks_told",
            "state",
            "worktree",
            "requester",
        }
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"not a thread branch column: {', '.join(sorted(unknown))}")
        async with self.database.sessions() as session:
            await session.exec(
                update(ThreadBranchRow)
                .where(col(ThreadBranchRow.id) == branch_id)
                .values(**values, updated_at=utcnow())
            )
            await session.commit()

    async def remove(self, branch_id: int) -> None:
        """Forget a branch (after Discard): the thread's next change starts a new one."""
        async with self.database.sessions() as session:
            row = await session.get(ThreadBranchRow, branch_id)
            if row is not None:
                await session.delete(row)
                await session.commit()
