"""The turn machine's `Workbench` for a workspace with a git remote."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from bot.engine import Hook
from bot.forge.desk import ForgeDesk, pull_link
from bot.forge.threads import ThreadRepository
from bot.sessions.main_agent import Place
from bot.sessions.workbench import PullContext, PullResult, WorkChange
from bot.store import SessionKey
from bot.tools import ToolRegistry

logger = logging.getLogger(__name__)

# The site's tools and hooks rebuilt to work in a directory (a thread's worktree).
TreeParts = Callable[[Path], Awaitable[tuple[ToolRegistry, tuple[Hook, ...]]]]


class ThreadWorkbench:
    """Each thread of the workspace works in its own worktree, on its own branch."""

    def __init__(
        self, repository: ThreadRepository, *, tree_parts: TreeParts, desk: ForgeDesk
    ) -> None:
        self.repository = repository
        self.tree_parts = tree_parts
        self.desk = desk

    async def open_pull(
        self, key: SessionKey, *, title: str, body: str, context: PullContext
    ) -> PullResult:
        row = await self.repository.store.of_thread(key.key)
        if row is None or not row.active:
            return PullResult(ok=False, text="This thread has no branch with changes to propose.")
        return await self.desk.open_pull(row, context=context, title=title, description=body)

    async def place(self, key: SessionKey, *, user_id: str) -> Place:
        row, tree = await self.repository.open(key, requester=user_id)
        tools, hooks = await self.tree_parts(tree.path)
        return Place(root=tree.path, tools=tools, hooks=hooks, branch=row.branch)

    async def after_run(
        self,
        key: SessionKey,
        *,
        user_id: str,
        message: str,
        co_author: tuple[str, str] | None,
    ) -> WorkChange | None:
        row = await self.repository.store.of_thread(key.key)
        if row is None or not row.active:
            return None
        change = await self.repository.commit(row, message=message, co_author=co_author)
        if change is None:
            return None
        note = None
        if row.pr_number is not None:
            pushed = await self.repository.push_update(row)
            if pushed is not None and pushed.landed:
                note = f"Pushed: pull request {pull_link(row)} shows it."
            elif pushed is not None:
                note = f"✗ Not pushed to pull request #{row.pr_number}: {pushed.message}"
        return WorkChange(
            branch_id=row.id,
            branch=row.branch,
            summary=change.summary(),
            pr_url=row.pr_url,
            note=note,
        )
