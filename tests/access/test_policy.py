"""AccessPolicy over the real Slack directory, talking to the fake Slack Web API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.policy import AccessPolicy
from bot.access.refusal import Refusal
from bot.config import AccessConfig
from bot.slack.directory import SlackDirectory
from tests.fakes.slack_api import FakeSlackAPI

TEAM = "T0001"  # the fake's own workspace: where Baton is installed
CHANNEL = "C0001"
DM = "D0001"

WHOM = "the people who run Baton in this workspace"
CHANNEL_TEXT = (
    "Baton only works in some channels here, and this isn't one of them. "
    f"Ask {WHOM} if you need it here."
)
NOT_LISTED_TEXT = (
    "Baton is only open to some people here, and you aren't one of them yet. "
    f"Ask {WHOM} if you need it."
)
EXTERNAL_TEXT = (
    "Baton only takes requests from people of this organisation, and you're from "
    f"another one. Ask {WHOM} if you need it."
)
GUEST_TEXT = f"Baton doesn't take requests from guests here. Ask {WHOM} if you need it."
UNKNOWN_TEXT = (
    "Baton could not check who you are, so it can't start this. "
    f"Try again in a moment, or ask {WHOM} if it keeps happening."
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI(team_id=TEAM) as server:
        for user_id, name in [("U1", "alice"), ("U2", "bob"), ("U3", "carol")]:
            server.add_user(user_id, name)
        yield server


@pytest.fixture
def client(fake: FakeSlackAPI) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=fake.url)


def make_policy(
    client: AsyncWebClient,
    *,
    approvers: Sequence[str] = (),
    ttl: float = 300.0,
    **access: Any,
) -> AccessPolicy:
    return AccessPolicy(
        AccessConfig(**access), SlackDirectory(client, ttl=ttl), approvers=approvers
    )


async def check(
    policy: AccessPolicy,
    user_id: str,
    *,
    channel_id: str = CHANNEL,
    is_dm: bool = False,
    team_id: str | None = TEAM,
    user_team: str | None = TEAM,
    enterprise_id: str | None = None,
) -> Refusal | None:
    return await policy.may_start(
        user_id=user_id,
        channel_id=channel_id,
        is_dm=is_dm,
        team_id=team_id,
        user_team=user_team,
        enterprise_id=enterprise_id,
    )


def refusal(reason: str, text: str) -> Refusal:
    return Refusal(reason=reason, text=text)


# --------------------------------------------------------------------------- no config


async def test_no_config_admits_members_but_not_guests_or_externals(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_user("U4", "guest", is_restricted=True)
    fake.add_user("U5", "partner", team_id="T0099")
    policy = make_policy(client)

    assert await check(policy, "U1") is None
    assert await check(policy, "U1", channel_id=DM, is_dm=True) is None
    assert await check(policy, "U4") == refusal("guest", GUEST_TEXT)
    assert await check(policy, "U5", user_team="T0099") == refusal("external", EXTERNAL_TEXT)


async def test_nobody_is_looked_up_when_nothing_needs_it(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    policy = make_policy(client, guests=True, external=True)

    assert await check(policy, "U1", user_team=None) is None
    assert await check(policy, "U404", user_team="T0099") is None
    assert fake.calls_to("users.info") == []
    assert fake.calls_to("usergroups.users.list") == []


# --------------------------------------------------------------------------- person lists


async def test_users_list_admits_only_those_listed(client: AsyncWebClient) -> None:
    policy = make_policy(client, users=["U1", "U2"])

    assert await check(policy, "U1") is None
    assert await check(policy, "U2") is None
    assert await check(policy, "U3") == refusal("not_listed", NOT_LISTED_TEXT)


@pytest.mark.parametrize("user_id", ["U12", "XU1", "U", "u1", "U1 ", " U1", "U1,U2", "W1"])
async def test_an_id_that_only_resembles_a_listed_one_is_not_admitted(
    fake: FakeSlackAPI, client: AsyncWebClient, user_id: str
) -> None:
    fake.add_user(user_id, "mallory")
    fake.add_usergroup("S1", ["U2"])
    policy = make_policy(client, users=["U1"], user_groups=["S1"], guests=True, external=True)

    assert await check(policy, user_id) == refusal("not_listed", NOT_LISTED_TEXT)


async def test_user_groups_admit_their_members(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.add_usergroup("S1", ["U1"])
    fake.add_usergroup("S2", ["U2"])
    policy = make_policy(client, user_groups=["S1", "S2"])

    assert await check(policy, "U1") is None
    assert await check(policy, "U2") is None
    assert await check(policy, "U3") == refusal("not_listed", NOT_LISTED_TEXT)


async def test_users_and_user_groups_together_admit_either(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_usergroup("S1", ["U2"])
    policy = make_policy(client, users=["U1"], user_groups=["S1"])

    assert await check(policy, "U1") is None
    assert await check(policy, "U2") is None
    assert await check(policy, "U3") == refusal("not_listed", NOT_LISTED_TEXT)


async def test_group_members_are_cached_until_the_ttl(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_usergroup("S1", ["U1"])
    policy = make_policy(client, user_groups=["S1"], guests=True, external=True, ttl=0.5)

    assert await check(policy, "U1") is None
    assert await check(policy, "U1") is None
    assert await check(policy, "U2") is not None
    assert len(fake.calls_to("usergroups.users.list")) == 1

    fake.add_usergroup("S1", ["U2"])
    await asyncio.sleep(0.6)
    assert await check(policy, "U1") == refusal("not_listed", NOT_LISTED_TEXT)
    assert await check(policy, "U2") is None
    assert len(fake.calls_to("usergroups.users.list")) == 2


async def test_a_group_that_fails_to_load_admits_nobody_from_it(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_usergroup("S1", ["U1"])
    fake.add_usergroup("S2", ["U2"])
    fake.fail_next("usergroups.users.list", error="internal_error")
    # S1 is asked first and fails once; S404 does not exist (no_such_subteam).
    policy = make_policy(client, users=["U3"], user_groups=["S1", "S404", "S2"])

    assert await check(policy, "U1") == refusal("not_listed", NOT_LISTED_TEXT)
    # Other groups and listed users still work; the failure was not cached.
    assert await check(policy, "U2") is None
    assert await check(policy, "U3") is None
    assert await check(policy, "U1") is None


# --------------------------------------------------------------------------- channels


async def test_channels_list_refuses_other_channels_but_not_dms(
    client: AsyncWebClient,
) -> None:
    policy = make_policy(client, channels=[CHANNEL])

    assert await check(policy, "U1") is None
    assert await check(policy, "U1", channel_id="C0002") == refusal("channel", CHANNEL_TEXT)
    assert await check(policy, "U1", channel_id="c0001") == refusal("channel", CHANNEL_TEXT)
    assert await check(policy, "U1", channel_id=DM, is_dm=True) is None


async def test_dms_are_governed_by_the_person_lists(client: AsyncWebClient) -> None:
    policy = make_policy(client, channels=[CHANNEL], users=["U1"])

    assert await check(policy, "U1", channel_id=DM, is_dm=True) is None
    assert await check(policy, "U2", channel_id=DM, is_dm=True) == refusal(
        "not_listed", NOT_LISTED_TEXT
    )


# --------------------------------------------------------------------------- guests


@pytest.mark.parametrize("kind", ["is_restricted", "is_ultra_restricted"])
async def test_guests_are_refused_unless_allowed(
    fake: FakeSlackAPI, client: AsyncWebClient, kind: str
) -> None:
    fake.add_user("U4", "guest", **{kind: True})

    assert await check(make_policy(client), "U4") == refusal("guest", GUEST_TEXT)
    # Being listed does not lift the guest rule; `guests: true` does.
    assert await check(make_policy(client, users=["U4"]), "U4") == refusal("guest", GUEST_TEXT)
    assert await check(make_policy(client, guests=True), "U4") is None


# --------------------------------------------------------------------------- external


async def test_people_of_another_organisation_are_refused_unless_allowed(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_user("U5", "partner", team_id="T0099")

    assert await check(make_policy(client), "U5", user_team="T0099") == refusal(
        "external", EXTERNAL_TEXT
    )
    assert await check(make_policy(client, external=True), "U5", user_team="T0099") is None


async def test_without_user_team_the_home_team_is_looked_up(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_user("U5", "partner", team_id="T0099")
    policy = make_policy(client, guests=True)

    assert await check(policy, "U5", user_team=None) == refusal("external", EXTERNAL_TEXT)
    assert await check(policy, "U1", user_team=None) is None
    assert len(fake.calls_to("users.info")) == 2


async def test_same_enterprise_is_not_external(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.add_user("W6", "sister", team_id="T0002", enterprise_id="E1")
    fake.add_user("W7", "stranger", team_id="T0003", enterprise_id="E2")
    fake.add_user("U8", "no-grid", team_id="T0004")
    policy = make_policy(client)

    assert await check(policy, "W6", user_team="T0002", enterprise_id="E1") is None
    # An org-level Grid account carries the enterprise id as its team.
    assert await check(policy, "W6", user_team="E1", enterprise_id="E1") is None
    assert await check(policy, "W7", user_team="T0003", enterprise_id="E1") == refusal(
        "external", EXTERNAL_TEXT
    )
    assert await check(policy, "U8", user_team="T0004", enterprise_id="E1") == refusal(
        "external", EXTERNAL_TEXT
    )
    # Baton outside any Grid: another team is another organisation, whatever its enterprise.
    assert await check(policy, "W6", user_team="T0002") == refusal("external", EXTERNAL_TEXT)


async def test_an_external_person_is_refused_without_a_lookup(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    policy = make_policy(client, guests=True)

    assert await check(policy, "U404", user_team="T0099") == refusal("external", EXTERNAL_TEXT)
    assert fake.calls_to("users.info") == []


# --------------------------------------------------------------------------- fail closed


async def test_a_person_who_cannot_be_looked_up_is_refused(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.fail_next("users.info", error="internal_error")
    policy = make_policy(client)

    assert await check(policy, "U1") == refusal("unknown_person", UNKNOWN_TEXT)
    assert await check(policy, "U404") == refusal("unknown_person", UNKNOWN_TEXT)
    # Failures are not remembered: the next try asks Slack again.
    assert await check(policy, "U1") is None


async def test_an_unknown_enterprise_or_team_is_refused(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.fail_next("users.info", error="internal_error", times=2)
    policy = make_policy(client, guests=True)

    # Another team in a Grid install, and the person cannot be looked up.
    assert await check(policy, "U1", user_team="T0002", enterprise_id="E1") == refusal(
        "unknown_person", UNKNOWN_TEXT
    )
    # No user_team in the event, and users.info fails.
    assert await check(policy, "U1", user_team=None) == refusal("unknown_person", UNKNOWN_TEXT)
    # The installing team is unknown: nothing to compare with.
    assert await check(policy, "U1", team_id=None) == refusal("unknown_person", UNKNOWN_TEXT)


# --------------------------------------------------------------------------- texts, order


async def test_refusals_name_the_approvers(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.add_user("U4", "guest", is_ultra_restricted=True)
    policy = make_policy(client, approvers=["U9", "S7", "U9"], users=["U1", "U4"])
    whom = "<@U9> or <!subteam^S7>"

    assert await check(policy, "U2") == refusal(
        "not_listed",
        "Baton is only open to some people here, and you aren't one of them yet. "
        f"Ask {whom} if you need it.",
    )
    assert await check(policy, "U4") == refusal(
        "guest", f"Baton doesn't take requests from guests here. Ask {whom} if you need it."
    )

    single = make_policy(client, approvers=["U9"], channels=[CHANNEL])
    assert await check(single, "U1", channel_id="C0002") == refusal(
        "channel",
        "Baton only works in some channels here, and this isn't one of them. "
        "Ask <@U9> if you need it here.",
    )


async def test_the_first_failing_check_is_the_one_told(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.add_user("U4", "guest", is_restricted=True, team_id="T0099")
    policy = make_policy(client, channels=[CHANNEL], users=["U1"])

    assert await check(policy, "U4", channel_id="C0002", user_team="T0099") == refusal(
        "channel", CHANNEL_TEXT
    )
    assert await check(policy, "U4", user_team="T0099") == refusal("not_listed", NOT_LISTED_TEXT)
    listed = make_policy(client, users=["U4"])
    assert await check(listed, "U4", user_team="T0099") == refusal("external", EXTERNAL_TEXT)
    assert await check(make_policy(client, users=["U4"], external=True), "U4") == refusal(
        "guest", GUEST_TEXT
    )


# --------------------------------------------------------------------------- deactivated


async def test_a_deactivated_account_starts_nothing(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    # Only a schedule's or webhook's owner can be one: their runs stop with their account.
    fake.add_user("U9", "left", deleted=True)
    text = (
        f"The account of <@U9> is deactivated. Ask {WHOM} to give its schedules and "
        "webhooks a new owner."
    )
    assert await check(make_policy(client), "U9") == refusal("deactivated", text)
    assert await check(make_policy(client, guests=True), "U9") == refusal("deactivated", text)
    # Listed by name, and a guest-friendly, cross-organisation setup: still refused when
    # the directory was asked anyway.
    assert await check(make_policy(client, users=("U9",)), "U9") == refusal("deactivated", text)
