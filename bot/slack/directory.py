"""Who people are, from Slack: users.info and usergroups.users.list, cached.

It is the access `Directory` (`bot.access.directory`) and also gives the names runs
show; one users.info per person serves both.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.directory import Person

logger = logging.getLogger(__name__)

DIRECTORY_TTL_S = 300.0


class SlackDirectory:
    """People, their names and group members, each answer kept `ttl` seconds.

    Failures are not cached: the next question asks Slack again.
    """

    def __init__(self, client: AsyncWebClient, *, ttl: float = DIRECTORY_TTL_S) -> None:
        self.client = client
        self.ttl = ttl
        self._users: dict[str, tuple[float, dict[str, Any]]] = {}
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    async def person(self, user_id: str) -> Person | None:
        user = await self._user(user_id)
        if user is None:
            return None
        return Person(
            id=user_id,
            team_id=user.get("team_id") or (user.get("profile") or {}).get("team"),
            enterprise_id=(user.get("enterprise_user") or {}).get("enterprise_id"),
            guest=bool(user.get("is_restricted") or user.get("is_ultra_restricted")),
            deactivated=bool(user.get("deleted")),
        )

    async def name_of(self, user_id: str) -> str:
        """The name people know someone by; their id when Slack cannot say."""
        user = await self._user(user_id) or {}
        profile = user.get("profile") or {}
        return str(
            profile.get("display_name")
            or profile.get("real_name")
            or user.get("real_name")
            or user.get("name")
            or user_id
        )

    async def email_of(self, user_id: str) -> str | None:
        """Their email, when Slack shares it (the app needs `users:read.email`)."""
        user = await self._user(user_id) or {}
        email = (user.get("profile") or {}).get("email")
        return email if isinstance(email, str) and "@" in email else None

    async def group_members(self, group_id: str) -> frozenset[str] | None:
        cached = self._groups.get(group_id)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.usergroups_users_list(usergroup=group_id)
        except SlackApiError as exc:
            logger.warning(
                "usergroups.users.list %s failed: %s", group_id, exc.response.get("error")
            )
            return None
        members = frozenset(response.get("users") or ())
        self._groups[group_id] = (time.monotonic(), members)
        return members

    async def _user(self, user_id: str) -> dict[str, Any] | None:
        cached = self._users.get(user_id)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.users_info(user=user_id)
        except SlackApiError as exc:
            logger.warning("users.info %s failed: %s", user_id, exc.response.get("error"))
            return None
        user = dict(response.get("user") or {})
        self._users[user_id] = (time.monotonic(), user)
        return user
