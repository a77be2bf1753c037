"""Who people are, as far as access decisions need: the `Directory` contract.

The Slack surface implements it with `users.info` and `usergroups.users.list`
(`bot.slack.directory`); decisions in `bot.access` only see this protocol.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Person:
    """What access decisions need to know of one user.

    Attributes:
        id: The user id.
        team_id: The workspace the person belongs to (their home team).
        enterprise_id: Their Enterprise Grid organisation, if any.
        guest: A multi- or single-channel guest (`is_restricted`, `is_ultra_restricted`).
        deactivated: The account was deactivated (`deleted`): a schedule or webhook it
            owns runs no more.
    """

    id: str
    team_id: str | None
    enterprise_id: str | None = None
    guest: bool = False
    deactivated: bool = False


class Directory(Protocol):
    """Looks people and user groups up; None when the answer cannot be had."""

    async def person(self, user_id: str) -> Person | None: ...

    async def group_members(self, group_id: str) -> frozenset[str] | None: ...


def is_group(identifier: str) -> bool:
    """User group ids start with S; user ids with U or W."""
    return identifier.startswith("S")


async def includes(directory: Directory, ids: Iterable[str], user_id: str) -> bool:
    """Whether `user_id` is one of `ids`, or a member of a user group among them.

    A group that cannot be read grants nobody anything (fail closed).
    """
    ids = tuple(ids)
    # A group's id names its members, never someone whose id happens to equal it.
    if user_id in ids and not is_group(user_id):
        return True
    for group in filter(is_group, ids):
        members = await directory.group_members(group)
        if members and user_id in members:
            return True
    return False


def mention(identifier: str) -> str:
    """How Slack renders a user or a user group in a message."""
    return f"<!subteam^{identifier}>" if is_group(identifier) else f"<@{identifier}>"
