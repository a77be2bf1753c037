"""What people (and the agent) do with a thread's change: open its pull request, see
its diff, discard it. Surfaces call these; each says what happened in words."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from bot.forge.remote import safe_url
from bot.forge.threads import Published, ThreadRepository, ThreadWorkError
from bot.sessions.workbench import PullContext, PullResult
from bot.store.branches import BranchStore, ThreadBranch

logger = logging.getLogger(__name__)

# A thread's session key -> the agents that worked in it, and what it spent (words).
WorkOf = Callable[[str], Awaitable[tuple[tuple[str, ...], str | None]]]

_TITLE_CHARS = 120
_BODY_CHARS = 60_000


class ForgeDesk:
    """The thread branches of every workspace with a remote, by repository."""

    def __init__(
        self,
        *,
        store: BranchStore,
        repositories: Mapping[str, ThreadRepository],
        work_of: WorkOf | None = None,
    ) -> None:
        """`repositories`: owner/name -> the workspace that works on it. `work_of`
        tells the agents that worked in a thread and what it spent (for PR bodies)."""
        self.store = store
        self.repositories = dict(repositories)
        self.work_of = work_of

    def repository(self, row: ThreadBranch) -> ThreadRepository | None:
        return self.repositories.get(row.repo)

    async def branch(self, branch_id: int) -> ThreadBranch | None:
        return await self.store.get(branch_id)

    async def of_thread(self, session_key: str) -> ThreadBranch | None:
        return await self.store.of_thread(session_key)

    async def open_pull(
        self,
        row: ThreadBranch,
        *,
        context: PullContext,
        title: str | None = None,
        description: str | None = None,
        trusted: bool = False,
    ) -> PullResult:
        """Push the branch and open its draft pull request (or update the one it has);
        `trusted`: an approver asked (only they may push changes to CI workflows)."""
        repository = self.repository(row)
        if repository is None or not row.active:
            return PullResult(ok=False, text=_gone(row))
        change = await repository.change(row)
        if change is None and row.pr_number is None:
            return PullResult(ok=False, text=f"`{row.branch}` has no change to propose.")
        if self.work_of is not None:
            agents, usage = await self.work_of(row.session_key)
            context = replace(context, agents=agents, usage=usage)
        summary = change.summary() if change else None
        title = _one_line(title or "") or _default_title(row, summary or "")
        body = pull_body(context, description=description, summary=summary)
        try:
            published: Published = await repository.publish(
                row, title=title, body=body, trusted=trusted
            )
        except ThreadWorkError as error:
            return PullResult(
                ok=False,
                text=f"✗ Could not open the pull request for `{row.branch}`: {error} "
                "The work stays on its branch.",
                retry=error.retry,
            )
        pull = published.pull
        verb = "Opened draft pull request" if published.opened else "Updated pull request"
        url = safe_url(pull.url)
        shown = f"<{url}|#{pull.number}>" if url else f"#{pull.number}"
        return PullResult(ok=True, text=f"{verb} {shown}.", url=url)

    async def diff(self, row: ThreadBranch) -> bytes:
        repository = self.repository(row)
        if repository is None or not row.active:
            raise ThreadWorkError(_gone(row))
        return await repository.diff(row)

    async def discard(self, row: ThreadBranch) -> str:
        repository = self.repository(row)
        if repository is None or not row.active:
            return _gone(row)
        try:
            await repository.discard(row)
        except ThreadWorkError as error:
            return f"✗ {error}"
        tail = (
            f" Its pull request {pull_link(row)} stays open on the forge."
            if row.pr_number is not None
            else ""
        )
        return f"⊘ Discarded `{row.branch}` and its worktree.{tail}"


def pull_body(context: PullContext, *, description: str | None, summary: str | None) -> str:
    """The pull request's body: the agent's description, then where it came from."""
    lines = []
    if description and description.strip():
        lines += [description.strip(), ""]
    lines.append("---")
    where = f"[a Slack thread]({context.thread_url})" if context.thread_url else "a Slack thread"
    lines.append(f"Made by Baton in {where}, asked by {context.asked_by}.")
    if context.agents:
        lines.append("Agents: " + ", ".join(f"`{name}`" for name in context.agents) + ".")
    if context.usage:
        lines.append(f"Spent: {context.usage}.")
    if summary:
        lines.append(f"Change: {summary}")
    return "\n".join(lines)[:_BODY_CHARS]


def _default_title(row: ThreadBranch, summary: str) -> str:
    return f"Baton: {summary.split(':')[0]}" if summary else f"Baton: {row.branch}"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_TITLE_CHARS]


def _gone(row: ThreadBranch) -> str:
    if row.state == "discarded":
        return f"`{row.branch}` was discarded."
    if row.state in ("merged", "closed"):
        return f"The pull request of `{row.branch}` was {row.state}."
    return f"`{row.branch}` belongs to no workspace with a remote any more."


def pull_link(row: ThreadBranch) -> str:
    """`<url|#12>` for Slack, or `#12` when the stored URL is not one Slack can show."""
    url = safe_url(row.pr_url)
    return f"<{url}|#{row.pr_number}>" if url else f"#{row.pr_number}"
