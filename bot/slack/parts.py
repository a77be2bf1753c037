"""What the Slack surface needs of the rest of Baton, handed in.

Whoever composes the bot (`bot.slack.server.slack_parts`, from `bot.app.Baton`) builds
one `SlackParts`; the surface, its listeners, its triggers and its HTTP server take
what they use from it. No Slack module looks anything up in the composition root or
opens a store of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.access.budgets import DailyBudgets
from bot.config import Settings
from bot.forge.build import ForgeParts
from bot.mcp.servers import ServerStatus
from bot.redaction import Redactor
from bot.sessions.turns import TurnParts
from bot.store import EventLedger
from bot.store.approvals import ApprovalStore
from bot.store.feedback import FeedbackStore
from bot.store.instances import Instances
from bot.store.rate import RateStore
from bot.store.schedules import ScheduleStore
from bot.store.signals import Signals
from bot.store.windows import TriggerWindows
from bot.subagents import TaskTracker


@dataclass(frozen=True, slots=True, kw_only=True)
class SlackParts:
    """The Slack surface's dependencies: settings, stores, and the few things of the
    rest of Baton it calls."""

    settings: Settings
    # The database's engine, for the health check's trivial query.
    engine: AsyncEngine
    # Stores only the Slack surface keeps.
    rates: RateStore
    approvals: ApprovalStore
    feedback: FeedbackStore
    schedules: ScheduleStore
    windows: TriggerWindows
    # Shared with the rest of Baton.
    events: EventLedger
    signals: Signals
    instances: Instances
    tracker: TaskTracker
    budgets: DailyBudgets
    redact: Redactor
    turn_parts: TurnParts
    forge: ForgeParts | None
    # The rest of Baton, as calls.
    agent_names: Callable[[str | None], Sequence[str]]
    merge_task: Callable[..., Awaitable[str]]
    discard_task: Callable[..., Awaitable[str]]
    sandbox_notice: Callable[[], str | None]
    mcp_status: Callable[[], Sequence[ServerStatus]]
    tools_settled: Callable[[], bool]
    agents_summary: Callable[[], str]
    instructions_line: Callable[[str | None], str | None]
    pulls_line: Callable[..., Awaitable[str | None]]
    start_heartbeat: Callable[[], None]
    recover_worktrees: Callable[[], Awaitable[None]]
    recover_tasks: Callable[[], Awaitable[object]]
