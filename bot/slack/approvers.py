"""Who may decide for others: `approvers` from baton.yaml, user groups expanded."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

logger = logging.getLogger(__name__)

GROUP_TTL_S = 300.0


class Approvers:
    """User ids (`U…`, `W…`) are taken as they are; user-group ids (`S…`) are expanded."""

    def __init__(
        self, client: AsyncWebClient, ids: Sequence[str], *, ttl: float = GROUP_TTL_S
    ) -> None:
        self.client = client
        self.users = frozenset(i for i in ids if not i.startswith("S"))
        self.groups = tuple(i for i in ids if i.startswith("S"))
        self.ttl = ttl
        self._members: dict[str, tuple[float, frozenset[str]]] = {}

    async def includes(self, user_id: str) -> bool:
        if user_id in self.users:
            return True
        for group in self.groups:
            if user_id in await self._group_members(group):
                return True
        return False

    async def may_decide(self, user_id: str, started_by: str | None) -> bool:
        """The person who started the work, or an approver."""
        return user_id == started_by or await self.includes(user_id)

    async def _group_members(self, group: str) -> frozenset[str]:
        cached = self._members.get(group)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.usergroups_users_list(usergroup=group)
        except SlackApiError as exc:
            # Fail closed: an unreadable group grants nobody anything.
            logger.warning("usergroups.users.list %s failed: %s", group, exc.response.get("error"))
            return frozenset()
        members = frozenset(response.get("users") or ())
        self._members[group] = (time.monotonic(), members)
        return members
