"""Token budgets: per run (a meter the engine asks before each LLM call) and per UTC day.

A run's budget is shared by the main agent and every sub-agent it starts, foreground
or background: a background child keeps charging the run, and the person and channel
that started it, after the parent's turn is over. Daily budgets never cut a run
short: the run that crosses one finishes and delivers its answer; the next run of that
person or in that channel is refused until 00:00 UTC.

Cost: tokens / 1e6 times the model's `prices` entry (input for prompt tokens, output for
completion tokens). With no `prices` at all, no cost is shown; with some, models that
are not listed are named as "cost unknown for <model>" instead of being guessed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from bot.access.refusal import Refusal
from bot.config import LimitsConfig, PriceConfig
from bot.engine import Usage
from bot.store.usage import UsageStore, UsageTotals

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def utc_day(moment: datetime) -> date:
    """The UTC calendar day of `moment` (a naive datetime is taken as UTC)."""
    if moment.tzinfo is None:
        return moment.date()
    return moment.astimezone(UTC).date()


class RunBudget:
    """The meter of one run: counts every LLM call of the run and records it for the day.

    One instance per run, handed to the main agent and, through it, to every child.
    `limit` is `limits.tokens_per_run`; 0 means no limit (calls are still recorded).
    """

    def __init__(
        self,
        *,
        usage: UsageStore,
        limit: int,
        run_id: str,
        user_id: str | None,
        channel_id: str | None,
        clock: Clock = utc_now,
    ) -> None:
        self.usage = usage
        self.limit = limit
        self.run_id = run_id
        self.user_id = user_id
        self.channel_id = channel_id
        self.clock = clock
        self.spent = Usage()

    def exhausted(self) -> str | None:
        if not self.limit or self.spent.total_tokens < self.limit:
            return None
        return (
            f"[Stopped: this run reached its token budget ({self.spent.total_tokens:,} of "
            f"{self.limit:,} tokens). The work above is partial.]"
        )

    async def charge(self, *, model: str, usage: Usage, task_id: str | None) -> None:
        # Counted in memory first: the run's own limit holds even if the write fails.
        self.spent += usage
        try:
            await self.usage.record(
                day=utc_day(self.clock()),
                user_id=self.user_id,
                channel_id=self.channel_id,
                run_id=self.run_id,
                task_id=task_id,
                model=model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
        except Exception:
            # A failed write must not end a run that already paid for its call; the day's
            # totals miss this call, which the log says.
            logger.exception(
                "could not record usage of run %s (%s, %d tokens)",
                self.run_id,
                model,
                usage.total_tokens,
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Spend:
    """What a person or a channel spent today.

    Attributes:
        tokens: Prompt plus completion tokens, sub-agents included.
        limit: The daily budget in tokens; 0 means none.
        cost: Cost of the priced models; None when `prices` is empty.
        unpriced: Models used today that `prices` does not name (their cost is unknown).
    """

    tokens: int
    limit: int
    cost: float | None
    unpriced: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageToday:
    """Today's (UTC) usage for a person and a channel; None for the one not asked about."""

    day: date
    user: Spend | None
    channel: Spend | None


class DailyBudgets:
    """Per-person and per-channel token budgets per UTC day, and what was spent today."""

    def __init__(
        self,
        usage: UsageStore,
        limits: LimitsConfig,
        prices: Mapping[str, PriceConfig],
    ) -> None:
        self.usage = usage
        self.limits = limits
        self.prices = dict(prices)

    async def refusal(
        self, *, user_id: str, channel_id: str | None, now: datetime | None = None
    ) -> Refusal | None:
        """Why `user_id` may not start a run in `channel_id` today, or None if they may."""
        moment = now if now is not None else utc_now()
        day = utc_day(moment)
        wait = _until_midnight(moment)
        if limit := self.limits.tokens_per_user_per_day:
            used = (await self.usage.user_day(user_id, day)).total_tokens
            if used >= limit:
                return Refusal(
                    reason="user_budget",
                    text=(
                        f"You have used {used:,} of your {limit:,} tokens for today, so I "
                        f"cannot start another run. Your budget resets at 00:00 UTC (in "
                        f"{wait}). To go on sooner, ask the operator to raise "
                        "`limits.tokens_per_user_per_day`."
                    ),
                )
        if channel_id and (limit := self.limits.tokens_per_channel_per_day):
            used = (await self.usage.channel_day(channel_id, day)).total_tokens
            if used >= limit:
                return Refusal(
                    reason="channel_budget",
                    text=(
                        f"This channel has used {used:,} of its {limit:,} tokens for today, "
                        "so I cannot start another run here. The budget resets at 00:00 UTC "
                        f"(in {wait}). To go on sooner, ask the operator to raise "
                        "`limits.tokens_per_channel_per_day`."
                    ),
                )
        return None

    async def today(
        self, *, user_id: str | None, channel_id: str | None, now: datetime | None = None
    ) -> UsageToday:
        """Tokens and cost today for the person and the channel, with their limits."""
        day = utc_day(now if now is not None else utc_now())
        user = (
            self._spend(
                await self.usage.user_day(user_id, day), self.limits.tokens_per_user_per_day
            )
            if user_id
            else None
        )
        channel = (
            self._spend(
                await self.usage.channel_day(channel_id, day),
                self.limits.tokens_per_channel_per_day,
            )
            if channel_id
            else None
        )
        return UsageToday(day=day, user=user, channel=channel)

    def cost(self, totals: UsageTotals) -> tuple[float | None, tuple[str, ...]]:
        """The cost of the priced models and the names of those without a price."""
        if not self.prices:
            return None, ()
        cost = 0.0
        unpriced: list[str] = []
        for used in totals.by_model:
            price = self.prices.get(used.model)
            if price is None:
                unpriced.append(used.model)
                continue
            cost += used.prompt_tokens / 1e6 * price.input
            cost += used.completion_tokens / 1e6 * price.output
        return cost, tuple(unpriced)

    def _spend(self, totals: UsageTotals, limit: int) -> Spend:
        cost, unpriced = self.cost(totals)
        return Spend(tokens=totals.total_tokens, limit=limit, cost=cost, unpriced=unpriced)


def describe_usage(usage: UsageToday) -> str:
    """One line: "Today: you 12,400 of 50,000 tokens · $0.03 · this channel 40,100 tokens"."""
    parts = [
        f"{who} {_describe_spend(spend)}"
        for who, spend in (("you", usage.user), ("this channel", usage.channel))
        if spend is not None
    ]
    return "Today: " + (" · ".join(parts) if parts else "nothing to show")


def _describe_spend(spend: Spend) -> str:
    text = (
        f"{spend.tokens:,} of {spend.limit:,} tokens" if spend.limit else f"{spend.tokens:,} tokens"
    )
    if spend.cost is not None and (spend.cost or not spend.unpriced):
        text += f" · {format_cost(spend.cost)}"
    if spend.unpriced:
        text += f" · cost unknown for {', '.join(spend.unpriced)}"
    return text


def format_cost(cost: float) -> str:
    """Cost in the operator's currency: "$0.03"; below a cent, "<$0.01"."""
    if 0 < cost < 0.01:
        return "<$0.01"
    return f"${cost:,.2f}"


def _until_midnight(moment: datetime) -> str:
    """How long until the next 00:00 UTC, as "3 h 12 min", "12 min" or "less than a minute"."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    midnight = datetime.combine(moment.date() + timedelta(days=1), datetime.min.time(), UTC)
    minutes = int((midnight - moment).total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min"
    return "less than a minute"
