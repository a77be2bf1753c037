"""Attacks on who may start runs and who may decide, against the real Slack directory."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.deciders import Deciders
from bot.access.policy import AccessPolicy
from bot.config import AccessConfig
from bot.slack.directory import SlackDirectory
from tests.fakes.slack_api import FakeSlackAPI

TEAM = "T0001"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI(team_id=TEAM) as server:
        server.add_user("U1", "member")
        server.add_user("UOUT", "outsider", team_id="T0OTHER")
        server.add_user("WOUT", "other-grid", team_id="T0003", enterprise_id="E2")
        server.add_usergroup("SPLATFORM", ["U1", "U2"])
        yield server


@pytest.fixture
def directory(fake: FakeSlackAPI) -> SlackDirectory:
    return SlackDirectory(AsyncWebClient(token="xoxb-test", base_url=fake.url))


@pytest.mark.parametrize(
    ("user", "claimed", "enterprise"),
    [("UOUT", TEAM, None), ("WOUT", "E1", "E1"), ("WOUT", TEAM, "E1")],
    ids=["home-team", "home-enterprise", "home-team-in-grid"],
)
async def test_a_user_team_claiming_this_organisation_is_checked_with_users_info(
    directory: SlackDirectory, user: str, claimed: str, enterprise: str | None
) -> None:
    # guests: true, so nothing else would look the person up.
    policy = AccessPolicy(AccessConfig(guests=True), directory)
    refusal = await policy.may_start(
        user_id=user, channel_id="C1", is_dm=False, team_id=TEAM, user_team=claimed,
        enterprise_id=enterprise,
    )  # fmt: skip
    assert refusal is not None and refusal.reason == "external"
    member = await policy.may_start(
        user_id="U1", channel_id="C1", is_dm=False, team_id=TEAM, user_team=TEAM
    )
    assert member is None


async def test_a_rule_set_whose_group_cannot_be_read_lets_nobody_approve(
    fake: FakeSlackAPI, directory: SlackDirectory
) -> None:
    """Not even the requester with self-approval on, nor a global approver."""
    deciders = Deciders(directory, ["UADMIN"], self_approval=True)
    fake.fail_next("usergroups.users.list", error="internal_error", times=3)
    for user in ("U1", "UADMIN", "U2"):
        allowed = await deciders.may_approve(user, requester="U1", approver_sets=(("SPLATFORM",),))
        assert not allowed, user
    # The requester may still say no.
    assert await deciders.may_deny("U1", requester="U1", approver_sets=(("SPLATFORM",),))


async def test_a_requester_inside_the_rules_set_may_not_approve_without_self_approval(
    directory: SlackDirectory,
) -> None:
    deciders = Deciders(directory, [], self_approval=True)
    sets = (("SPLATFORM",),)
    assert not await deciders.may_approve("U1", requester="U1", approver_sets=sets,
                                          self_approval=False)  # fmt: skip
    assert await deciders.may_approve("U2", requester="U1", approver_sets=sets,
                                      self_approval=False)  # fmt: skip
    # A group id is never taken for a person whose id happens to equal it.
    assert not await deciders.may_approve("SPLATFORM", requester="U1", approver_sets=sets)
