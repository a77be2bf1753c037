"""Where a thread's runs work, and what they leave: the interface to `bot.forge`.

On a workspace with a git remote each thread works in a worktree of its own on a
branch of its own (`bot.forge`), and after a run that changed files its change is
offered to people (Open pull request, Show diff, Discard). The turn machine asks the
channel's `Workbench` for both; channels without one work in their site's directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.sessions.main_agent import Place
from bot.store import SessionKey


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkChange:
    """A thread branch's change after a run, for people.

    Attributes:
        branch_id: The branch's record (the buttons' value).
        branch: Its name.
        summary: Files, lines added and removed.
        pr_url: The pull request it has, if any.
        note: What happened to it after the run ("pushed: the pull request shows it"),
            or why that failed; None when nothing was pushed.
    """

    branch_id: int
    branch: str
    summary: str
    pr_url: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullContext:
    """What a pull request's body says of where the work came from.

    Attributes:
        thread_url: The Slack thread's link (None when Slack could not give one).
        asked_by: Who asked, as the forge should show it.
        agents: The sub-agents that worked in the thread.
        usage: Tokens (and cost, when priced) the thread's runs spent.
    """

    thread_url: str | None
    asked_by: str
    agents: tuple[str, ...] = ()
    usage: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullResult:
    """What opening (or updating) a pull request did; `text` says it for people."""

    ok: bool
    text: str
    url: str | None = None
    retry: bool = False  # the forge could not be reached: offering to try again makes sense


class Workbench(Protocol):
    """A workspace's threads' worktrees: where a run works, and committing after it."""

    async def place(self, key: SessionKey, *, user_id: str) -> Place:
        """The thread's worktree, made on its first turn from the fetched base."""
        ...

    async def after_run(self, key: SessionKey, *, user_id: str, message: str) -> WorkChange | None:
        """Commit the run's work; the thread's change when this run changed files."""
        ...
