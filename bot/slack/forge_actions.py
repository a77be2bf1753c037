"""The buttons of a thread's change: Open pull request, Show diff, Discard.

Each acts only in the branch's own thread's channel, for the person who asked for the
work or an approver (the authority of Cancel); `access.pull_requests`, when set, names
who else may open pull requests and restricts it to them and the approvers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.deciders import Deciders
from bot.access.directory import Directory, includes
from bot.forge.desk import ForgeDesk
from bot.forge.threads import ThreadWorkError
from bot.redaction import Redactor
from bot.sessions.surface import Where
from bot.slack.forge_views import DISCARD_BRANCH, OPEN_PULL, SHOW_DIFF, retry_pull_message
from bot.slack.thread_surface import SlackThreadSurface
from bot.store.branches import ThreadBranch

logger = logging.getLogger(__name__)

_BRANCH_ID = re.compile(r"[0-9]{1,10}")
# The largest id the column holds (PostgreSQL's INTEGER); a larger value reaches no
# branch, rather than failing the query.
_MAX_BRANCH_ID = 2**31 - 1
# Whether the person who clicked (body, user) may act for work started by someone.
MayAct = Callable[[dict[str, Any], str, str | None], Awaitable[bool]]


class ForgeActions:
    """Listens to the three buttons; thin: check who and where, call the desk, say it."""

    def __init__(
        self,
        *,
        desk: ForgeDesk,
        threads: SlackThreadSurface,
        deciders: Deciders,
        directory: Directory,
        may_act: MayAct,
        pull_requesters: Sequence[str],
        redact: Redactor,
        spawn: Callable[..., Any],
    ) -> None:
        self.desk = desk
        self.threads = threads
        self.client: AsyncWebClient = threads.client
        self.deciders = deciders
        self.directory = directory
        self.may_act = may_act
        self.pull_requesters = tuple(pull_requesters)
        self.redact = redact
        self.spawn = spawn

    def register(self, app: AsyncApp) -> None:
        app.action(OPEN_PULL)(self.handle_open_pull)
        app.action(SHOW_DIFF)(self.handle_show_diff)
        app.action(DISCARD_BRANCH)(self.handle_discard)

    async def handle_open_pull(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.open_pull(body), "open_pull")

    async def handle_show_diff(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.show_diff(body), "show_diff")

    async def handle_discard(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.discard(body), "discard_branch")

    async def open_pull(self, body: dict[str, Any]) -> None:
        row = await self._clicked(body, doing="open a pull request for it", pull=True)
        if row is None:
            return
        user = body["user"]["id"]
        where = Where(row.channel_id, row.thread_ts)
        context = await self.threads.pull_context(where, row.requester or user)
        trusted = await self.deciders.is_approver(user)
        result = await self.desk.open_pull(row, context=context, trusted=trusted)
        text = self.redact(result.text)
        if result.ok:
            await self.threads.say(where, f"🔀 {text} (asked by <@{user}>)")
        elif result.retry:
            await self.threads.post_blocks(where, retry_pull_message(text, row.id))
        else:
            await self.threads.report(where, text)

    async def show_diff(self, body: dict[str, Any]) -> None:
        row = await self._clicked(body, doing="see its diff")
        if row is None:
            return
        try:
            patch = await self.desk.diff(row)
        except ThreadWorkError as error:
            await self._ephemeral(body, str(error))
            return
        text = patch.decode("utf-8", "replace") or "(no change)"
        try:
            await self.client.files_upload_v2(
                channel=row.channel_id,
                thread_ts=row.thread_ts,
                content=text,
                filename=f"{row.branch.removeprefix('baton/')}.diff",
                title=f"Diff of {row.branch}",
            )
        except SlackApiError as exc:
            logger.warning("could not upload the diff: %s", exc.response.get("error"))
            await self._ephemeral(body, f"Slack refused the diff: {exc.response.get('error')}")

    async def discard(self, body: dict[str, Any]) -> None:
        row = await self._clicked(body, doing="discard it")
        if row is None:
            return
        text = await self.desk.discard(row)
        await self.threads.say(
            Where(row.channel_id, row.thread_ts), f"{text} (by <@{body['user']['id']}>)"
        )

    async def _clicked(
        self, body: dict[str, Any], *, doing: str, pull: bool = False
    ) -> ThreadBranch | None:
        """The branch of a button clicked in its own channel by someone who may act on it;
        they are told when they may not. A value carried elsewhere reaches no branch."""
        user = (body.get("user") or {}).get("id")
        value = str(((body.get("actions") or [{}])[0]).get("value") or "")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        if not isinstance(user, str) or not channel:
            return None
        known = _BRANCH_ID.fullmatch(value) is not None and 0 < int(value) <= _MAX_BRANCH_ID
        row = await self.desk.branch(int(value)) if known else None
        if row is None or row.channel_id != channel:
            await self._ephemeral(body, "There is no such branch in this channel.")
            return None
        if pull and self.pull_requesters:
            allowed = await self.deciders.is_approver(user) or await includes(
                self.directory, self.pull_requesters, user
            )
        else:
            allowed = await self.may_act(body, user, row.requester)
        if not allowed:
            await self._ephemeral(
                body,
                f"Only the person who asked for this work or an approver can {doing}."
                if not (pull and self.pull_requesters)
                else f"Only the people `access.pull_requests` names, or an approver, can {doing}.",
            )
            return None
        return row

    async def _ephemeral(self, body: dict[str, Any], text: str) -> None:
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        if not user or not channel:
            return
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text)
        except SlackApiError as exc:
            logger.info("could not answer the click: %s", exc.response.get("error"))
