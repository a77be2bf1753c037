"""The Slack surface, built once from its parts (`SlackParts`): the Bolt app, its client,
its listeners."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot import metrics
from bot.access.deciders import Deciders
from bot.access.policy import AccessPolicy
from bot.config import Settings
from bot.forge.webhooks import ForgeTurn, ForgeWebhooks, forge_author
from bot.mcp.report import summary
from bot.sessions.surface import Where
from bot.sessions.turns import TriggerEnd, TurnMachine
from bot.slack.approvals import POLL_S, SlackApprovals
from bot.slack.directory import SlackDirectory
from bot.slack.forge_actions import ForgeActions
from bot.slack.listeners import ListenerParts, Listeners
from bot.slack.parts import SlackParts
from bot.slack.rate_budget import RateBudget, call_channel
from bot.slack.schedule_actions import ScheduleActions
from bot.slack.thread_surface import SlackThreadSurface
from bot.slack.triggers import SlackTriggers
from bot.store import SessionKey
from bot.store.branches import ThreadBranch
from bot.store.thread_inbox import Inbound
from bot.triggers.clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)

# A dead replica's work is reported within its heartbeat's expiry (STALE_AFTER_S in
# bot/store/instances.py, 6 s) plus one sweep: under 10 s.
MAINTENANCE_EVERY_S = 1.0
# Old event claims are few and need no hurry: they are forgotten once a minute.
PRUNE_EVERY_SWEEPS = 60


class CountingWebClient(AsyncWebClient):
    """The Web API client: every call waits for the rate budget, and is counted.

    The budget (`bot/slack/rate_budget.py`) is shared by every client of the process
    (and, on PostgreSQL, by every replica); a call waits at the priority its task set
    with `priority(...)`, URGENT by default, unless a `budget.slot(...)` around it
    already paid. Calls are counted by method in `baton_slack_api_calls`.
    """

    def __init__(self, *args: Any, budget: RateBudget | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = budget

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        if self.budget is not None and not self.budget.take_prepaid(api_method):
            await self.budget.acquire(api_method, call_channel(kwargs))
        metrics.record_slack_call(api_method)
        # A pass-through, not a call of its own: the methods and their scopes are
        # checked where they are called (tests/slack/test_manifest.py), so this line
        # must not read to that scan as an api_call with a computed name.
        forward = super().api_call
        return await forward(api_method, **kwargs)


class CountingRateLimitRetryHandler(AsyncRateLimitErrorRetryHandler):
    """Retries a 429 after its Retry-After, counting each one in `baton_slack_api_rate_limited`.

    Every 429 answer is offered to the retry handlers, the last one included (when
    the retries are used up), so each is counted once.
    """

    async def can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None and response.status_code == 429:
            metrics.record_slack_rate_limited(request.url.rstrip("/").rsplit("/", 1)[-1])
        return await super().can_retry_async(
            state=state, request=request, response=response, error=error
        )


def build_web_client(
    settings: Settings, *, with_token: bool = True, budget: RateBudget | None = None
) -> CountingWebClient:
    """The Web API client: SLACK_API_URL, the rate budget, retries that honour
    Retry-After on 429 (a safety net: the budget should leave none), metrics.

    With `with_token`, it calls as the bot (SLACK_BOT_TOKEN); without, each call (or
    Bolt, per request) must bring its token. Without a `budget`, calls are not paced.
    """
    return CountingWebClient(
        token=settings.slack_bot_token if with_token else None,
        base_url=settings.slack_api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            CountingRateLimitRetryHandler(max_retry_count=3),
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
        budget=budget,
    )


def budgeted_request_client(
    app_client: CountingWebClient,
) -> Callable[..., Awaitable[None]]:
    """A Bolt middleware: the listeners' `client` (and `say`) go through the budget.

    Bolt builds a plain `AsyncWebClient` per request from the app's client (its URL,
    session and retry handlers, not its class), so calls made with it would bypass
    the budget and the metrics. This swaps it, after authorization gave it the token,
    for a `CountingWebClient` with the app client's budget. `respond` posts to the
    request's response_url (a webhook, not the Web API): it is outside the budget.
    """

    async def budgeted_client(
        context: AsyncBoltContext, next: Callable[[], Awaitable[Any]]
    ) -> None:
        # The same client in every other respect (token, URL, session, retries, team):
        # its state copied as it is, whatever Bolt put there.
        budgeted = CountingWebClient.__new__(CountingWebClient)
        budgeted.__dict__.update(context.client.__dict__)
        budgeted.budget = app_client.budget
        context["client"] = budgeted
        await next()

    return budgeted_client


def build_bolt_app(
    settings: Settings,
    authorize: Callable[..., Awaitable[AuthorizeResult]],
    *,
    budget: RateBudget | None = None,
) -> AsyncApp:
    """The Bolt app; its token comes from `authorize`, once per request.

    Bolt warns at start when it gets a token beside `authorize`, and reads
    SLACK_BOT_TOKEN from the environment itself to find one. So its client carries no
    token (Bolt's per-request clients copy its URL and retry handlers, and get the
    token from `authorize`), and the variable, already read into the settings, is out
    of the environment while Bolt looks.
    """
    hidden = os.environ.pop("SLACK_BOT_TOKEN", None)
    client = build_web_client(settings, with_token=False, budget=budget)
    try:
        app = AsyncApp(
            # Named, so Bolt does not read the caller's name off `inspect.stack()`, which
            # reads the source of every frame on the stack: 40-90 ms at each start.
            name="baton",
            client=client,
            authorize=authorize,
            signing_secret=settings.slack_signing_secret or "",
            # Socket Mode messages are not signed; HTTP requests always are checked.
            request_verification_enabled=not settings.socket_mode,
            # Every listener acks and hands its work to a task at once, so Slack's
            # answer waits for nothing more: without this, Bolt runs the listener in a
            # task of its own and polls every 10 ms for its ack, which each ack paid.
            # (And a listener's tasks are owned before Slack hears back.)
            process_before_response=True,
        )
    finally:
        if hidden is not None:
            os.environ["SLACK_BOT_TOKEN"] = hidden
    if budget is not None:
        app.middleware(budgeted_request_client(client))
    return app


class SlackSurface:
    """Baton in Slack."""

    def __init__(
        self,
        parts: SlackParts,
        *,
        approval_poll_s: float = POLL_S,
        rate_budget: RateBudget | None = None,
        trigger_clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`trigger_clock`: what schedules' fire times are computed with (tests drive
        one)."""
        settings = parts.settings
        self.parts = parts
        # One budget for every Slack call of this process; on PostgreSQL, of every replica.
        # (Tests and benchmarks against a fake Slack may pass one on a faster clock.)
        self.budget = rate_budget or RateBudget(parts.rates)
        self.client: CountingWebClient = build_web_client(settings, budget=self.budget)
        self.app = build_bolt_app(settings, self._authorizer(), budget=self.budget)
        # People are read ahead (users.list) once started; changes reach other replicas
        # through the signals.
        self.directory = SlackDirectory(self.client, signals=parts.signals)
        self.deciders = Deciders(
            self.directory, settings.approvers, self_approval=settings.self_approval
        )
        self.approvals = SlackApprovals(
            store=parts.approvals,
            client=self.client,
            deciders=self.deciders,
            instances=parts.instances,
            timeout_s=settings.approval_timeout_s,
            self_approval=settings.self_approval,
            task_log=parts.tracker.append_log,
            poll_s=approval_poll_s,
            signals=parts.signals,
            redact=parts.redact,
        )
        self.access = AccessPolicy(settings.access, self.directory, approvers=settings.approvers)
        self.threads = SlackThreadSurface(
            self.client, approvals=self.approvals, directory=self.directory, redact=parts.redact
        )
        self.turns = TurnMachine(
            self.threads,
            dataclasses.replace(parts.turn_parts, trigger_ended=self._trigger_ended),
            access=self.access,
            admission_poll_s=approval_poll_s,
        )
        # Schedules, webhooks and watched channels start turns on the same machine.
        self.triggers = SlackTriggers(
            parts, turns=self.turns, threads=self.threads, clock=trigger_clock
        )
        self.schedule_actions = ScheduleActions(
            scheduler=self.triggers.scheduler,
            client=self.client,
            deciders=self.deciders,
            directory=self.directory,
            access=self.access,
            schedulers=settings.access.schedulers,
            spawn=self.turns.spawn,
            refresh_home=self._refresh_home,
            team_id=self.triggers.launcher.team_id,
            agent_names=parts.agent_names,
        )
        self.listeners = Listeners(
            ListenerParts(
                turns=self.turns,
                threads=self.threads,
                deciders=self.deciders,
                approvals=self.approvals,
                access=self.access,
                tracker=parts.tracker,
                budgets=parts.budgets,
                feedback=parts.feedback,
                merge_task=parts.merge_task,
                discard_task=parts.discard_task,
                sandbox_notice=parts.sandbox_notice,
                servers_summary=lambda: summary(parts.mcp_status()),
                agents_summary=parts.agents_summary,
                instructions_line=parts.instructions_line,
                pulls_line=parts.pulls_line,
                redact=parts.redact,
                watched=self.triggers.watched,
                schedules=self.schedule_actions,
                directory=self.directory,
            )
        )
        self.listeners.register(self.app)
        self.schedule_actions.register(self.app)
        self.forge_hooks: ForgeWebhooks | None = None
        if (forge := parts.forge) is not None:
            self.forge_hooks = ForgeWebhooks(
                secret=settings.github_webhook_secret,
                ledger=parts.events,
                store=forge.store,
                repositories=forge.desk.repositories,
                say=self._say_on_branch,
                start_turn=self._forge_turn,
                logins=forge.forge.logins if forge.forge is not None else None,
            )
            ForgeActions(
                desk=forge.desk,
                threads=self.threads,
                deciders=self.deciders,
                directory=self.directory,
                may_act=self.listeners.may_act,
                pull_requesters=settings.access.pull_requests,
                redact=parts.redact,
                spawn=self.turns.spawn,
            ).register(self.app)
        self._maintenance: asyncio.Task[None] | None = None

    async def _refresh_home(self, user_id: str, notice: str | None) -> None:
        await self.listeners.publish_home(user_id, notice)

    async def _trigger_ended(self, end: TriggerEnd) -> None:
        await self.triggers.ended(end)

    async def _say_on_branch(self, branch: ThreadBranch, text: str) -> None:
        await self.threads.say(Where(branch.channel_id, branch.thread_ts), text)

    async def _forge_turn(self, turn: ForgeTurn) -> None:
        """A review or comment from the forge: said in the thread, then a turn there for
        the person who asked for the work, attributed to the forge's user."""
        branch = turn.branch
        response = await self.client.chat_postMessage(
            channel=branch.channel_id, thread_ts=branch.thread_ts, text=turn.announcement
        )
        ts = str(response.get("ts") or "")
        if not ts or not branch.requester:
            return
        message = Inbound(
            session_key=branch.session_key,
            channel_id=branch.channel_id,
            thread_ts=branch.thread_ts,
            ts=ts,
            user_id=branch.requester,
            author_id=forge_author(turn.author),
            text=turn.prompt,
            team_id=SessionKey.parse(branch.session_key).team_id,
        )
        stored = await self.turns.intake(message)
        if stored is not None:
            self.turns.spawn(self.turns.dispatch(stored), f"message-{stored.id}", run=True)

    def use_rate_budget(self, budget: RateBudget) -> None:
        """Pace every Slack call of this surface with `budget` from now on (benchmarks and
        tests use a budget on a faster clock against a fake Slack that runs as fast)."""
        self.budget = budget
        self.client.budget = budget
        app_client = self.app.client
        if isinstance(app_client, CountingWebClient):
            app_client.budget = budget

    def _authorizer(self) -> Callable[..., Awaitable[AuthorizeResult]]:
        # The bot's identity is learnt once, at start: a request never waits on auth.test.
        # A plain function: Bolt passes arguments by the names it finds in the signature.
        async def authorize(
            enterprise_id: str | None, team_id: str | None, user_id: str | None
        ) -> AuthorizeResult:
            await self.threads.identify()
            return AuthorizeResult(
                enterprise_id=enterprise_id,
                team_id=team_id,
                bot_token=self.parts.settings.slack_bot_token,
                bot_user_id=self.threads.bot_user_id,
                bot_id=self.threads.bot_id,
            )

        return authorize

    async def start(self) -> None:
        """Post background results to their threads; close what a restart interrupted."""
        await self.threads.identify()
        self.directory.start(team_id=self.threads.team_id)
        self.parts.tracker.on_finish(self.turns.post_task_finished)
        self.parts.instances.on_lost(self.turns.on_lost)
        self.parts.start_heartbeat()
        await self.tidy()
        await self.parts.recover_worktrees()
        self._maintenance = asyncio.create_task(self._maintain(), name="maintenance")
        self.triggers.start()

    async def tidy(self, *, prune: bool = True) -> None:
        """Fail and expire the work of processes that are gone; forget old event claims."""
        await self.parts.recover_tasks()
        await self.approvals.expire_abandoned()
        await self.turns.tidy()
        await self.parts.instances.forget_dead()
        if prune:
            await self.parts.events.prune()
            await self.turns.prune()
            await self.triggers.windows.prune()

    async def _maintain(self) -> None:
        # A replica that died while this one runs leaves work behind: take care of it.
        sweeps = 0
        while True:
            await asyncio.sleep(MAINTENANCE_EVERY_S)
            sweeps += 1
            try:
                await self.tidy(prune=sweeps % PRUNE_EVERY_SWEEPS == 0)
            except Exception:
                logger.exception("maintenance failed")

    async def stop(self, grace_s: float) -> None:
        """Shut down gracefully: take no new work; let runs and background tasks finish for
        `grace_s` seconds; end what still runs then as interrupted by a restart."""
        self.turns.accepting = False
        await self.triggers.stop()
        await self.directory.close()
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
        tracker = self.parts.tracker
        await asyncio.gather(self.turns.drain(grace_s), tracker.settle(grace_s))
        # The tasks first: a run's foreground children, stopped with it, would otherwise
        # end as "cancelled with the run".
        await tracker.interrupt()
        await self.turns.interrupt()
        await self.turns.stop_watching()
        await tracker.shutdown()
