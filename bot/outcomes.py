"""How a run ended, as data: an outcome and its cause. Words, icons and metric labels
are derived from these (bot/describe.py); nothing reads them back out of display text.

A leaf module: the engine's stop reasons, the turn machine's outcomes and every
surface's rendering import it, and it imports nothing of Baton's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    """Why the engine's loop ended (`Done.stop_reason`)."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    BUDGET = "budget"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    ERROR = "error"


class RunOutcome(StrEnum):
    """How a run of a thread ended; its value is the `baton_runs` metric label."""

    DONE = "done"
    TURN_LIMIT = "max_turns"
    BUDGET = "budget"
    CUT = "cut"
    FILTERED = "filtered"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REFUSED = "refused"
    INTERRUPTED = "interrupted"
    HANDED_OVER = "handed_over"

    @classmethod
    def of_stop(cls, reason: str) -> RunOutcome:
        """The outcome of a run whose engine stopped for `reason`."""
        return _BY_STOP.get(reason, cls.FAILED)

    @property
    def succeeded(self) -> bool:
        return self is RunOutcome.DONE


_BY_STOP = {
    StopReason.COMPLETED: RunOutcome.DONE,
    StopReason.MAX_TURNS: RunOutcome.TURN_LIMIT,
    StopReason.BUDGET: RunOutcome.BUDGET,
    StopReason.LENGTH: RunOutcome.CUT,
    StopReason.CONTENT_FILTER: RunOutcome.FILTERED,
}


class StopCause(StrEnum):
    """What, beside the outcome itself, made a run end as it did."""

    ACCESS = "access"  # refused: whom it runs for may not start runs (a trigger's owner)
    BUDGET_SPENT = "budget_spent"  # refused: the daily token budget is spent
    BUDGET_SPENT_WAITING = "budget_spent_waiting"  # ... and it was spent while queued
    RESTART = "restart"  # interrupted: shutdown stopped it, or others took it for dead
    QUEUE_CLOSED = "queue_closed"  # interrupted: its run was closed while it was queued
    NO_TASK = "no_task"  # failed: `@agent` with nothing after the name
    UNKNOWN_AGENT = "unknown_agent"  # failed: `@name` names no agent
    ERROR = "error"  # failed: `RunEnd.error` says what went wrong


@dataclass(frozen=True, slots=True)
class ChildUsage:
    """Tokens a foreground sub-agent of the run spent."""

    task_id: str
    agent: str
    tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnd:
    """How one run ended, and what it cost: everything a surface shows of its end."""

    outcome: RunOutcome
    cause: StopCause | None = None
    by: str | None = None  # who cancelled it (a user id), when a person did
    error: str | None = None  # what went wrong, redacted, for StopCause.ERROR
    agent: str | None = None  # the agent of an `@agent` run
    agent_state: str | None = None  # how that agent's task ended, when not completed
    turns: int | None = None  # None: the run never reached the model
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    children: tuple[ChildUsage, ...] = ()
    run_tokens: int = 0  # the run's total, its sub-agents' included

    @property
    def retryable(self) -> bool:
        """Whether a Retry can run its question again (a restart stopped it)."""
        return self.outcome is RunOutcome.INTERRUPTED and self.cause is StopCause.RESTART
