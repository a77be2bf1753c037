"""Approvals in threads: ask with buttons, wait for the first decision, report it.

The database is the truth. A click in this process wakes the waiting run at once;
a click that reached another replica is seen by polling the row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.engine import ApprovalDecision, ApprovalFunc, ApprovalRequest
from bot.slack.approval_views import arguments_modal, outcome_message, request_message
from bot.slack.approvers import Approvers
from bot.store.approvals import ApprovalRecord, ApprovalStore
from bot.store.instances import Instances

logger = logging.getLogger(__name__)

POLL_S = 1.0
RESTART_NOTE = "⌛ Expired: Baton restarted before anyone decided; the call did not run"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClickResult:
    """What to tell the person who clicked (ephemeral), if anything."""

    message: str | None


class SlackApprovals:
    """Asks people in the thread and turns their clicks into decisions."""

    def __init__(
        self,
        *,
        store: ApprovalStore,
        client: AsyncWebClient,
        approvers: Approvers,
        instances: Instances,
        timeout_s: float,
        poll_s: float = POLL_S,
    ) -> None:
        self.store = store
        self.instances = instances
        self.client = client
        self.approvers = approvers
        self.timeout_s = timeout_s
        self.poll_s = poll_s
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
        )
        woken = self._waiting[record.id] = asyncio.Event()
        posted_ts: str | None = None
        try:
            text, blocks = request_message(record, timeout_s=self.timeout_s)
            try:
                posted = await self.client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, text=text, blocks=blocks
                )
            except SlackApiError as exc:
                # Nobody can see the question, so nobody can approve: fail closed.
                await self.store.decide(record.id, "cancelled", by=None)
                return ApprovalDecision(
                    approved=False,
                    message="the approval request could not be posted to Slack "
                    f"({exc.response.get('error')}), so the call was not run",
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
            if final is not None:
                note = None
                if final.state == "approved":
                    note = (
                        f"✓ Approved by <@{final.decided_by}>, but the run stopped before the "
                        "call ran"
                    )
                await asyncio.shield(self._show_outcome(final, note=note))
            raise
        finally:
            self._waiting.pop(record.id, None)
        await self._show_outcome(record)
        return self._decision(record)

    async def _cancel(self, approval_id: str) -> ApprovalRecord | None:
        return await self.store.decide(approval_id, "cancelled", by=None) or await self.store.get(
            approval_id
        )

    async def _wait(self, approval_id: str, woken: asyncio.Event) -> ApprovalRecord:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), min(self.poll_s, remaining))

    async def _reload(self, approval_id: str) -> ApprovalRecord:
        record = await self.store.get(approval_id)
        assert record is not None
        return record

    def _decision(self, record: ApprovalRecord) -> ApprovalDecision:
        if record.state == "approved":
            return ApprovalDecision(approved=True, message=f"approved by <@{record.decided_by}>")
        if record.state == "denied":
            return ApprovalDecision(
                approved=False,
                message=f"a person (<@{record.decided_by}>) denied this call, so it was not run. "
                "Do not retry it; explain what you wanted to do or ask how to proceed.",
            )
        if record.state == "expired":
            return ApprovalDecision(
                approved=False,
                message=f"nobody decided within {self.timeout_s:g} s, so the call was not run. "
                "Nobody denied it: you may ask in the thread whether to try again.",
            )
        return ApprovalDecision(approved=False, message="the approval request was cancelled")

    async def _show_outcome(self, record: ApprovalRecord, note: str | None = None) -> None:
        if not record.channel_id or not record.message_ts:
            return
        text, blocks = outcome_message(record, timeout_s=self.timeout_s, note=note)
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
        if not await self.approvers.may_decide(user, record.requested_by):
            return ClickResult(
                message=f"Only <@{record.requested_by}>, who started this run, or an approver "
                "can decide this request. It stays open."
            )
        decided = await self.store.decide(approval_id, "approved" if approve else "denied", by=user)
        if decided is None:
            latest = await self.store.get(approval_id)
            return ClickResult(message=_already(latest) if latest else None)
        if waiting := self._waiting.get(approval_id):
            waiting.set()
        return ClickResult(message=None)

    async def show_arguments(
        self, value: str, *, trigger_id: str, view: dict[str, Any] | None
    ) -> None:
        """Open the full arguments (from the message), or turn a page (inside the modal)."""
        approval_id, _, page = value.partition(":")
        record = await self.store.get(approval_id)
        if record is None:
            return
        modal = arguments_modal(record, page=int(page) if page.isdigit() else 0)
        if view is not None and view.get("private_metadata") == approval_id:
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
