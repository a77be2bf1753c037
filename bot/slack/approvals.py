"""Approvals in threads: ask with buttons, wait for the first decision, report it.

The database is the truth. A click in this process wakes the waiting run at once;
a click that reached another replica wakes it through an "approval" signal (on
PostgreSQL), and polling the row is the fallback should a signal be lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.access.deciders import Deciders
from bot.describe import Redact, redacted_arguments
from bot.engine import ApprovalDecision, ApprovalFunc, ApprovalRequest
from bot.slack.approval_views import (
    arguments_modal,
    decision_log_line,
    outcome_message,
    request_message,
)
from bot.store.approvals import ApprovalRecord, ApprovalStore
from bot.store.instances import Instances
from bot.store.signals import APPROVAL, Signals, event_or_signal

logger = logging.getLogger(__name__)

POLL_S = 1.0
RESTART_NOTE = "⌛ Expired: Baton restarted before anyone decided; the call did not run"

# Appends one line to a sub-agent task's log: (task id, line).
TaskLog = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClickResult:
    """What to tell the person who clicked (ephemeral), if anything."""

    message: str | None


class SlackApprovals:
    """Asks people in the thread and turns their clicks into decisions.

    Who may decide is fixed when a request is made (its approver sets and this
    deployment's `self_approval`, stored with it), so a click on any replica is
    judged by the same rules.
    """

    def __init__(
        self,
        *,
        store: ApprovalStore,
        client: AsyncWebClient,
        deciders: Deciders,
        instances: Instances,
        timeout_s: float,
        self_approval: bool,
        task_log: TaskLog | None = None,
        poll_s: float = POLL_S,
        signals: Signals | None = None,
        redact: Redact | None = None,
    ) -> None:
        """Build the approvals of one process.

        Args:
            store: Where requests and decisions live (shared by all replicas).
            client: The Slack Web API client.
            deciders: Who may approve, deny and cancel.
            instances: This process's id (the owner of the requests it waits on).
            timeout_s: How long a request waits for a decision.
            self_approval: Whether requesters may approve their own requests.
            task_log: Appends a line to a task's log; each decision on a task's
                request is recorded there (shown by `/tasks` View log).
            poll_s: How often a waiting run reads its request again.
            signals: Tells every replica that a request was decided, so the run
                waiting on it (wherever it is) reads it at once; None: polling only.
            redact: Takes Baton's own secrets out of what the thread is shown (the
                arguments, whole, before anything shortens them; the reason).
        """
        self.store = store
        self.instances = instances
        self.client = client
        self.deciders = deciders
        self.timeout_s = timeout_s
        self.self_approval = self_approval
        self.task_log = task_log
        self.poll_s = poll_s
        self.signals = signals
        self.redact = redact
        self._waiting: dict[str, asyncio.Event] = {}

    def for_run(
        self, *, session_id: int, channel: str, thread_ts: str, requested_by: str
    ) -> ApprovalFunc:
        """The approval function of one run: requests go to its thread."""

        async def ask(request: ApprovalRequest) -> ApprovalDecision:
            return await self.request(
                request,
                session_id=session_id,
                channel=channel,
                thread_ts=thread_ts,
                requested_by=requested_by,
            )

        return ask

    async def request(
        self,
        request: ApprovalRequest,
        *,
        session_id: int,
        channel: str,
        thread_ts: str,
        requested_by: str,
    ) -> ApprovalDecision:
        record = await self.store.create(
            session_id=session_id,
            agent=request.agent,
            task_id=request.task_id,
            tool=request.tool_name,
            arguments=request.arguments,
            reason=request.reason,
            requested_by=requested_by,
            channel_id=channel,
            owner=self.instances.id,
            approver_sets=request.approver_sets,
            self_approval=self.self_approval,
        )
        woken = self._waiting[record.id] = asyncio.Event()
        posted_ts: str | None = None
        try:
            text, blocks = request_message(
                self.shown(record),
                timeout_s=self.timeout_s,
                who_may_decide=self._who_may_decide(record),
            )
            try:
                posted = await self.client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, text=text, blocks=blocks
                )
            except SlackApiError as exc:
                # Nobody can see the question, so nobody can approve: fail closed.
                await self.store.decide(record.id, "cancelled", by=None)
                metrics.record_approval("cancelled")
                return ApprovalDecision(
                    approved=False,
                    message="the approval request could not be posted to Slack "
                    f"({exc.response.get('error')}), so the call was not run",
                    state="cancelled",
                )
            posted_ts = posted["ts"]
            await self.store.set_message(record.id, channel_id=channel, message_ts=posted_ts)
            record = await self._wait(record.id, woken)
        except BaseException:
            # Cancelled, or something broke (network, database): nobody may approve a
            # request that no run waits for any more, so close it and say so.
            final = await asyncio.shield(self._cancel(record.id))
            if final is not None and posted_ts and not final.message_ts:
                # Stopped between posting and recording the message: the buttons still
                # have to go, and this process knows where they are.
                final = replace(final, channel_id=channel, message_ts=posted_ts)
            metrics.record_approval(final.state if final is not None else "cancelled")
            if final is not None:
                note = None
                if final.state == "approved":
                    note = (
                        f"✓ Approved by <@{final.decided_by}>, but the run stopped before the "
                        "call ran"
                    )
                await asyncio.shield(self._show_outcome(final, note=note))
                await asyncio.shield(self._log_decision(final))
            raise
        finally:
            self._waiting.pop(record.id, None)
        metrics.record_approval(record.state)
        await self._show_outcome(record)
        await self._log_decision(record)
        return self._decision(record)

    def _who_may_decide(self, record: ApprovalRecord) -> str:
        return self.deciders.who_may_decide(
            requester=record.requested_by,
            approver_sets=record.approver_sets,
            self_approval=record.self_approval,
        )

    async def _log_decision(self, record: ApprovalRecord) -> None:
        """Record the outcome of a task's request in that task's log (View log shows it).

        The waiting process writes it, whichever replica took the click, so it is
        written once; a failure is logged and never changes the decision.
        """
        if self.task_log is None or not record.task_id:
            return
        try:
            await self.task_log(record.task_id, decision_log_line(record, timeout_s=self.timeout_s))
        except Exception:
            logger.exception("could not log decision of %s in task %s", record.id, record.task_id)

    async def _cancel(self, approval_id: str) -> ApprovalRecord | None:
        return await self.store.decide(approval_id, "cancelled", by=None) or await self.store.get(
            approval_id
        )

    async def _wait(self, approval_id: str, woken: asyncio.Event) -> ApprovalRecord:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        # Subscribed before the first read, so a decision between a read and the
        # wait that follows it is not missed.
        decided = self.signals.subscribe(APPROVAL) if self.signals is not None else None
        try:
            while True:
                record = await self.store.get(approval_id)
                assert record is not None
                if record.state != "pending":
                    return record
                remaining = deadline - loop.time()
                if remaining <= 0:
                    expired = await self.store.decide(approval_id, "expired", by=None)
                    # None: a decision landed just before the deadline; it stands.
                    return expired or await self._reload(approval_id)
                await event_or_signal(woken, decided, min(self.poll_s, remaining))
        finally:
            if decided is not None:
                decided.close()

    async def _reload(self, approval_id: str) -> ApprovalRecord:
        record = await self.store.get(approval_id)
        assert record is not None
        return record

    def _decision(self, record: ApprovalRecord) -> ApprovalDecision:
        if record.state == "approved":
            return ApprovalDecision(
                approved=True, message=f"approved by <@{record.decided_by}>", state="approved"
            )
        if record.state == "denied":
            return ApprovalDecision(
                approved=False,
                message=f"a person (<@{record.decided_by}>) denied this call, so it was not run. "
                "Do not retry it; explain what you wanted to do or ask how to proceed.",
                state="denied",
            )
        if record.state == "expired":
            return ApprovalDecision(
                approved=False,
                message=f"nobody decided within {self.timeout_s:g} s, so the call was not run. "
                "Nobody denied it: you may ask in the thread whether to try again.",
                state="expired",
            )
        return ApprovalDecision(
            approved=False, message="the approval request was cancelled", state="cancelled"
        )

    def shown(self, record: ApprovalRecord) -> ApprovalRecord:
        """`record` as people may see it: Baton's own secrets out of its arguments and
        reason (the request as the rules judged it stays whole in the store)."""
        if self.redact is None:
            return record
        return replace(
            record,
            arguments=redacted_arguments(record.arguments, self.redact),
            reason=self.redact(record.reason),
        )

    async def _show_outcome(self, record: ApprovalRecord, note: str | None = None) -> None:
        if not record.channel_id or not record.message_ts:
            return
        text, blocks = outcome_message(self.shown(record), timeout_s=self.timeout_s, note=note)
        try:
            await self.client.chat_update(
                channel=record.channel_id, ts=record.message_ts, text=text, blocks=blocks
            )
        except SlackApiError as exc:
            logger.warning("could not update approval %s: %s", record.id, exc.response.get("error"))

    async def click(self, approval_id: str, *, user: str, approve: bool) -> ClickResult:
        """A person pressed Approve or Deny."""
        record = await self.store.get(approval_id)
        if record is None:
            return ClickResult(message="This approval request no longer exists.")
        if record.state != "pending":
            return ClickResult(message=_already(record))
        if datetime.now(UTC) >= record.created_at + timedelta(seconds=self.timeout_s):
            # Its waiting run gives up now (or its process is gone and the request will
            # be expired): a late click must not approve what nobody waits for.
            return ClickResult(message="This request has expired; nothing changed.")
        judge = self.deciders.may_approve if approve else self.deciders.may_deny
        allowed = await judge(
            user,
            requester=record.requested_by,
            approver_sets=record.approver_sets,
            self_approval=record.self_approval,
        )
        if not allowed:
            verb = "approve" if approve else "decide"
            return ClickResult(
                message=f"You may not {verb} this request. Who may approve it: "
                f"{self._who_may_decide(record)}. It stays open."
            )
        decided = await self.store.decide(approval_id, "approved" if approve else "denied", by=user)
        if decided is None:
            latest = await self.store.get(approval_id)
            return ClickResult(message=_already(latest) if latest else None)
        if waiting := self._waiting.get(approval_id):
            waiting.set()
        elif self.signals is not None:
            # The run waiting on it is on another replica.
            await self.signals.notify(APPROVAL, approval_id)
        return ClickResult(message=None)

    async def show_arguments(
        self,
        value: str,
        *,
        trigger_id: str,
        view: dict[str, Any] | None,
        channel: str | None = None,
    ) -> None:
        """Open the full arguments (from the message), or turn a page (inside the modal).

        The button exists only on the request's own message and in its own modal, so a
        value carried anywhere else (another channel, another modal) shows nothing.
        """
        approval_id, _, page = value.partition(":")
        record = await self.store.get(approval_id)
        if record is None:
            return
        if view is not None:
            if view.get("private_metadata") != approval_id:
                return
        elif record.channel_id is None or channel != record.channel_id:
            return
        modal = arguments_modal(self.shown(record), page=int(page) if page.isdigit() else 0)
        if view is not None:
            await self.client.views_update(view_id=view["id"], hash=view.get("hash"), view=modal)
        else:
            await self.client.views_open(trigger_id=trigger_id, view=modal)

    async def expire_abandoned(self) -> list[ApprovalRecord]:
        """Requests whose waiting process is gone (a restart) are expired."""
        expired = []
        for record in await self.store.orphans(alive=await self.instances.alive()):
            if record.id in self._waiting:
                continue
            final = await self.store.decide(record.id, "expired", by=None)
            if final is not None:
                expired.append(final)
                await self._show_outcome(final, note=RESTART_NOTE)
        return expired


def _already(record: ApprovalRecord) -> str:
    by = f" by <@{record.decided_by}>" if record.decided_by else ""
    return f"Thanks, but this request was already {record.state}{by}; nothing changed."


def approval_value(body: dict[str, Any]) -> str:
    return str(body["actions"][0]["value"])
