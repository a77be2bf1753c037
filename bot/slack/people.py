"""Names of Slack users, looked up with users.info and cached."""

from __future__ import annotations

import logging
import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

logger = logging.getLogger(__name__)

NAME_TTL_S = 3600.0


class UserNames:
    """Display names by user id; a failed lookup falls back to the id itself."""

    def __init__(self, client: AsyncWebClient, *, ttl: float = NAME_TTL_S) -> None:
        self.client = client
        self.ttl = ttl
        self._cache: dict[str, tuple[float, str]] = {}

    async def name_of(self, user_id: str) -> str:
        cached = self._cache.get(user_id)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.users_info(user=user_id)
        except SlackApiError as exc:
            logger.info("users.info %s failed: %s", user_id, exc.response.get("error"))
            return user_id
        user = response.get("user") or {}
        profile = user.get("profile") or {}
        name = (
            profile.get("display_name")
            or profile.get("real_name")
            or user.get("real_name")
            or user.get("name")
            or user_id
        )
        self._cache[user_id] = (time.monotonic(), name)
        return name
