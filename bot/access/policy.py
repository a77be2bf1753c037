"""Who may start runs: the `access` section of baton.yaml, decided per request.

Checks run in this order, and the first that fails is the one the person hears about:

1. channel: only the listed channels (when any are listed); DMs are not channels.
2. person lists: `users` and `user_groups` together; being in either admits.
3. external: people from another organisation (Slack Connect), unless `external: true`.
4. guest: multi- and single-channel guests, unless `guests: true`.

The place comes before the person, and what the operator listed before what kind of
account it is: both need no `users.info`, and "ask to be added" is the answer most
people need. The person is looked up once, and only when check 3 or 4 needs it; an
event's `user_team` naming another organisation refuses at once, but one naming this
organisation is confirmed with `users.info`.
Whatever cannot be established is refused (fail closed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bot.access.directory import Directory, Person, includes, mention
from bot.access.refusal import Refusal
from bot.config import AccessConfig

logger = logging.getLogger(__name__)

NOBODY_NAMED = "the people who run Baton in this workspace"


class AccessPolicy:
    """Decides whether a person may start a run here, and says why not.

    Args:
        config: The `access` section.
        directory: Where people and user group members are looked up.
        approvers: Whom a refused person should ask (user or user group ids).
    """

    def __init__(
        self, config: AccessConfig, directory: Directory, *, approvers: Sequence[str] = ()
    ) -> None:
        self.config = config
        self.directory = directory
        named = " or ".join(mention(approver) for approver in dict.fromkeys(approvers))
        self._whom = named or NOBODY_NAMED

    async def may_start(
        self,
        *,
        user_id: str,
        channel_id: str,
        is_dm: bool,
        team_id: str | None,
        user_team: str | None = None,
        enterprise_id: str | None = None,
    ) -> Refusal | None:
        """None when `user_id` may start a run in `channel_id`, else why not.

        Args:
            user_id: Who asks.
            channel_id: Where they ask.
            is_dm: A direct message with Baton: the `channels` list does not apply.
            team_id: The workspace Baton is installed in (the event wrapper's `team_id`).
            user_team: The asker's home workspace, when the event says (`user_team`);
                otherwise it is looked up.
            enterprise_id: The Enterprise Grid organisation Baton is installed in, if any
                (the event wrapper's `enterprise_id`).
        """
        config = self.config
        if config.channels and not is_dm and channel_id not in config.channels:
            return self._refuse(
                "channel",
                "Baton only works in some channels here, and this isn't one of them. "
                f"Ask {self._whom} if you need it here.",
                user_id,
            )
        listed = config.users + config.user_groups
        if listed and not await includes(self.directory, listed, user_id):
            return self._refuse(
                "not_listed",
                "Baton is only open to some people here, and you aren't one of them yet. "
                f"Ask {self._whom} if you need it.",
                user_id,
            )
        person: Person | None = None
        if not config.external:
            home = user_team
            if home is None or home in (team_id, enterprise_id):
                # No claim, or a claim of this organisation: Slack's directory decides,
                # so an event's `user_team` alone never lets an outsider in.
                person = await self.directory.person(user_id)
                home = person.team_id if person else None
            if home is None or team_id is None:
                return self._unknown(user_id)
            # A user_team equal to the installing enterprise is an org-level Grid account.
            if home not in (team_id, enterprise_id):
                if enterprise_id is None:
                    return self._external(user_id)
                # Another workspace of the same Grid organisation is not external.
                person = person or await self.directory.person(user_id)
                if person is None:
                    return self._unknown(user_id)
                if person.enterprise_id != enterprise_id:
                    return self._external(user_id)
        if not config.guests or person is not None:
            person = person or await self.directory.person(user_id)
            if person is None:
                return self._unknown(user_id)
            if person.deactivated:
                # Only a trigger's owner can be: a deactivated account writes nothing.
                return self._refuse(
                    "deactivated",
                    f"The account of <@{user_id}> is deactivated. Ask {self._whom} to give "
                    "its schedules and webhooks a new owner.",
                    user_id,
                )
            if not config.guests and person.guest:
                return self._refuse(
                    "guest",
                    "Baton doesn't take requests from guests here. "
                    f"Ask {self._whom} if you need it.",
                    user_id,
                )
        return None

    def _external(self, user_id: str) -> Refusal:
        return self._refuse(
            "external",
            "Baton only takes requests from people of this organisation, and you're from "
            f"another one. Ask {self._whom} if you need it.",
            user_id,
        )

    def _unknown(self, user_id: str) -> Refusal:
        return self._refuse(
            "unknown_person",
            "Baton could not check who you are, so it can't start this. "
            f"Try again in a moment, or ask {self._whom} if it keeps happening.",
            user_id,
        )

    @staticmethod
    def _refuse(reason: str, text: str, user_id: str) -> Refusal:
        logger.info("access refused to %s: %s", user_id, reason)
        return Refusal(reason=reason, text=text)
