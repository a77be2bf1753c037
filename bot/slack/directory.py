"""The access `Directory` over Slack: users.info and usergroups.users.list, cached."""

from __future__ import annotations

import logging
import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.directory import Person

logger = logging.getLogger(__name__)

DIRECTORY_TTL_S = 300.0


class SlackDirectory:
    """People and group members, each answer kept `ttl` seconds.

    Failures are not cached: the next question asks Slack again.
    """

    def __init__(self, client: AsyncWebClient, *, ttl: float = DIRECTORY_TTL_S) -> None:
        self.client = client
        self.ttl = ttl
        self._people: dict[str, tuple[float, Person]] = {}
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    async def person(self, user_id: str) -> Person | None:
        cached = self._people.get(user_id)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.users_info(user=user_id)
        except SlackApiError as exc:
            logger.warning("users.info %s failed: %s", user_id, exc.response.get("error"))
            return None
        user = response.get("user") or {}
        person = Person(
            id=user_id,
            team_id=user.get("team_id") or (user.get("profile") or {}).get("team"),
            enterprise_id=(user.get("enterprise_user") or {}).get("enterprise_id"),
            guest=bool(user.get("is_restricted") or user.get("is_ultra_restricted")),
        )
        self._people[user_id] = (time.monotonic(), person)
        return person

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
