"""Slack's documented Web API rate limits, as token buckets, for the fake Slack server.

Model (``SlackLimits``):

* Every method in ``SLACK_TIERS`` has one bucket per workspace (the fake serves one
  workspace, so one bucket per method). A tier allows ``TIER_PER_MINUTE[tier]`` calls a
  minute; the bucket refills at ``per_minute / 60`` tokens a second and holds
  ``max(1, per_minute // 6)`` tokens, i.e. ten seconds' worth of calls as a burst
  (Tier 1: 1, Tier 2: 3, Tier 3: 8, Tier 4: 16). Slack says it allows "some bursting"
  above a tier's rate; this keeps the burst modest while the rate over a minute stays the
  documented one (a full minute allows at most ``per_minute + capacity`` calls).
* ``chat.postMessage`` has no tier ("special": several hundred a minute per workspace),
  modelled as a 300-a-minute workspace bucket (capacity 50, same rule).
* Messages posted to a channel (``chat.postMessage``, ``chat.startStream``,
  ``files.completeUploadExternal`` with a channel) also share one bucket per channel:
  "about one message per second, short bursts allowed" as capacity 3, refill 1/s.
* A call is admitted only when every bucket it draws from holds a whole token; then it
  takes one token from each. A refused call takes nothing, and its ``Retry-After`` is the
  whole number of seconds (at least 1) until all its buckets hold a token again.
* Buckets start full and are measured with the caller's monotonic clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHANNEL_MESSAGES_PER_SECOND",
    "CHANNEL_MESSAGE_BURST",
    "CHANNEL_MESSAGE_METHODS",
    "POST_MESSAGE_PER_MINUTE",
    "SLACK_TIERS",
    "TIER_PER_MINUTE",
    "SlackLimits",
    "TokenBucket",
    "burst_capacity",
]

TIER_PER_MINUTE: dict[int, int] = {1: 1, 2: 20, 3: 50, 4: 100}
"""Calls a minute per method and workspace for each documented tier."""

# Slack's documented tier of each Web API method this bot calls (docs.slack.dev, "Rate
# Limits" in each method's reference page). "Special" methods are treated as their nearest
# tier: chat.getPermalink and auth.test as Tier 4. chat.postMessage is special and not here
# (see POST_MESSAGE_PER_MINUTE and the per-channel limit). Methods not listed are not limited.
SLACK_TIERS: dict[str, int] = {
    "auth.test": 4,
    "chat.update": 3,
    "chat.delete": 3,
    "chat.postEphemeral": 4,
    "chat.getPermalink": 4,
    "chat.startStream": 2,
    "chat.appendStream": 4,
    "chat.stopStream": 2,
    "conversations.replies": 3,
    "conversations.history": 3,
    "users.info": 4,
    "users.list": 2,
    "usergroups.users.list": 2,
    "reactions.add": 3,
    "views.open": 4,
    "views.publish": 4,
    "views.update": 4,
    "assistant.threads.setStatus": 3,
    "files.getUploadURLExternal": 4,
    "files.completeUploadExternal": 4,
}

POST_MESSAGE_PER_MINUTE = 300
"""chat.postMessage's workspace limit ("several hundred messages per minute")."""

CHANNEL_MESSAGES_PER_SECOND = 1.0
CHANNEL_MESSAGE_BURST = 3
CHANNEL_MESSAGE_METHODS = frozenset(
    {"chat.postMessage", "chat.startStream", "files.completeUploadExternal"}
)
"""Methods that post a message to a channel and so draw from its per-channel bucket."""


def burst_capacity(per_minute: int) -> int:
    """Bucket capacity for a per-minute limit: ten seconds' worth, at least one call."""
    return max(1, per_minute // 6)


@dataclass
class TokenBucket:
    """A token bucket refilled continuously from a monotonic clock.

    Attributes:
        capacity: Most tokens held (the burst).
        rate: Tokens added per second.
        tokens: Tokens held at ``updated`` (starts full).
        updated: Clock time of the last refill (``None`` until first used).
    """

    capacity: float
    rate: float
    tokens: float = 0.0
    updated: float | None = None

    def __post_init__(self) -> None:
        self.tokens = self.capacity

    def _refill(self, now: float) -> None:
        if self.updated is not None:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def wait(self, now: float) -> float:
        """Seconds until the bucket holds a whole token (0 when it does now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        """Take one token (call ``wait`` first; the bucket never goes negative)."""
        self._refill(now)
        self.tokens = max(0.0, self.tokens - 1.0)


class SlackLimits:
    """Per-method (per workspace) and per-channel buckets, as described in the module doc."""

    def __init__(self) -> None:
        self._methods: dict[str, TokenBucket] = {}
        self._channels: dict[str, TokenBucket] = {}

    @staticmethod
    def per_minute(method: str) -> int | None:
        """The workspace limit of ``method`` in calls a minute, or ``None`` if unlimited."""
        if method == "chat.postMessage":
            return POST_MESSAGE_PER_MINUTE
        tier = SLACK_TIERS.get(method)
        return None if tier is None else TIER_PER_MINUTE[tier]

    @staticmethod
    def message_channel(method: str, params: dict[str, Any]) -> str | None:
        """The channel a call posts a message to, if it draws from a channel's bucket."""
        if method not in CHANNEL_MESSAGE_METHODS:
            return None
        if method == "files.completeUploadExternal":
            channel = params.get("channel_id") or str(params.get("channels") or "").split(",")[0]
        else:
            channel = params.get("channel")
        return str(channel) if channel else None

    def _buckets(self, method: str, params: dict[str, Any]) -> list[TokenBucket]:
        buckets: list[TokenBucket] = []
        per_minute = self.per_minute(method)
        if per_minute is not None:
            bucket = self._methods.get(method)
            if bucket is None:
                bucket = TokenBucket(capacity=burst_capacity(per_minute), rate=per_minute / 60)
                self._methods[method] = bucket
            buckets.append(bucket)
        channel = self.message_channel(method, params)
        if channel is not None:
            bucket = self._channels.get(channel)
            if bucket is None:
                bucket = TokenBucket(
                    capacity=CHANNEL_MESSAGE_BURST, rate=CHANNEL_MESSAGES_PER_SECOND
                )
                self._channels[channel] = bucket
            buckets.append(bucket)
        return buckets

    def admit(self, method: str, params: dict[str, Any], now: float) -> int | None:
        """Admit a call (taking its tokens) or refuse it.

        Args:
            method: API method name.
            params: The call's decoded parameters (for the channel).
            now: Monotonic clock time in seconds.

        Returns:
            ``None`` when admitted, else the ``Retry-After`` seconds (whole, at least 1).
        """
        buckets = self._buckets(method, params)
        wait = max((bucket.wait(now) for bucket in buckets), default=0.0)
        if wait > 0:
            return max(1, math.ceil(wait - 1e-9))
        for bucket in buckets:
            bucket.take(now)
        return None
