"""The engine's one view of spending limits: may another LLM call be made, and what one cost.

The engine holds no policy: what a budget is, whose it is and how a stop is worded
belong to whoever builds the meter (bot/access/budgets.py for Slack runs).
"""

from __future__ import annotations

from typing import Protocol

from bot.engine.messages import Usage


class Meter(Protocol):
    """Counts the tokens of a run's LLM calls and says when no further call may be made."""

    def exhausted(self) -> str | None:
        """A note for the person when no further LLM call may be made; None while one may."""
        ...

    async def charge(self, *, model: str, usage: Usage, task_id: str | None) -> None:
        """Count what one LLM call spent; `task_id` names the sub-agent that made it, if any."""
        ...
