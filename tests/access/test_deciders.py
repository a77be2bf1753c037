"""Who may approve, deny and cancel: Deciders over SlackDirectory and the fake Slack API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.deciders import Deciders
from bot.slack.directory import SlackDirectory
from tests.fakes.slack_api import FakeSlackAPI

ALICE = "UALICE"  # the requester
CAROL = "UCAROL"  # a global approver
DAVE = "UDAVE"  # in the global approver group SOPS
PAT = "UPAT"  # in the platform group S0PLATFORM
PEG = "UPEG"  # in both S0PLATFORM and SSEC
MALLORY = "UMALLORY"  # nobody

PLATFORM = ("S0PLATFORM",)
SECURITY = ("SSEC", CAROL)


@pytest.fixture
async def directory() -> AsyncIterator[SlackDirectory]:
    async with FakeSlackAPI(bot_user_id="UBOT") as slack:
        for user in (ALICE, CAROL, DAVE, PAT, PEG, MALLORY):
            slack.add_user(user, user.lower())
        slack.add_usergroup("SOPS", [DAVE])
        slack.add_usergroup("S0PLATFORM", [PAT, PEG, ALICE])
        slack.add_usergroup("SSEC", [PEG])
        yield SlackDirectory(AsyncWebClient(token="xoxb-test", base_url=slack.url))


def deciders(directory: SlackDirectory, *, self_approval: bool = True) -> Deciders:
    return Deciders(directory, (CAROL, "SOPS"), self_approval=self_approval)


@pytest.mark.parametrize(
    ("user", "expected"),
    [(CAROL, True), (DAVE, True), (ALICE, False), (PAT, False), (MALLORY, False)],
)
async def test_is_approver_expands_groups(
    directory: SlackDirectory, user: str, expected: bool
) -> None:
    assert await deciders(directory).is_approver(user) is expected


# (self_approval, approver_sets, user, may approve, may deny)
CASES = [
    # No rule sets: the requester (when self_approval) or a global approver.
    (True, (), ALICE, True, True),
    (True, (), CAROL, True, True),
    (True, (), DAVE, True, True),
    (True, (), MALLORY, False, False),
    (False, (), ALICE, False, True),  # the requester may still deny
    (False, (), CAROL, True, True),
    (False, (), DAVE, True, True),
    (False, (), MALLORY, False, False),
    # A rule's set: only its members; global approvers do not override it.
    (True, (PLATFORM,), PAT, True, True),
    (True, (PLATFORM,), ALICE, True, True),  # requester in the set, self_approval on
    (True, (PLATFORM,), CAROL, False, False),
    (True, (PLATFORM,), DAVE, False, False),
    (True, (PLATFORM,), MALLORY, False, False),
    (False, (PLATFORM,), ALICE, False, True),  # in the set, but may not approve their own
    (False, (PLATFORM,), PAT, True, True),
    # Several sets (several matching rules): a decider must be in every one.
    (True, (PLATFORM, SECURITY), PEG, True, True),
    (True, (PLATFORM, SECURITY), PAT, False, False),
    (True, (PLATFORM, SECURITY), CAROL, False, False),
    (True, (PLATFORM, SECURITY), ALICE, False, True),
]


@pytest.mark.parametrize(("self_approval", "sets", "user", "approve", "deny"), CASES)
async def test_who_may_approve_and_deny(
    directory: SlackDirectory,
    self_approval: bool,
    sets: tuple[tuple[str, ...], ...],
    user: str,
    approve: bool,
    deny: bool,
) -> None:
    decide = deciders(directory, self_approval=self_approval)
    assert await decide.may_approve(user, requester=ALICE, approver_sets=sets) is approve
    assert await decide.may_deny(user, requester=ALICE, approver_sets=sets) is deny


async def test_the_value_stored_with_a_request_overrides_the_setting(
    directory: SlackDirectory,
) -> None:
    strict = deciders(directory, self_approval=False)
    assert await strict.may_approve(ALICE, requester=ALICE, approver_sets=(), self_approval=True)
    lenient = deciders(directory, self_approval=True)
    assert not await lenient.may_approve(
        ALICE, requester=ALICE, approver_sets=(), self_approval=False
    )


async def test_an_unreadable_group_grants_nothing(directory: SlackDirectory) -> None:
    decide = deciders(directory)
    assert not await decide.may_approve(PAT, requester=ALICE, approver_sets=(("SMISSING",),))
    assert not await decide.may_deny(PAT, requester=ALICE, approver_sets=(("SMISSING",),))
    # The requester may always say no, even then.
    assert await decide.may_deny(ALICE, requester=ALICE, approver_sets=(("SMISSING",),))


@pytest.mark.parametrize(
    ("user", "expected"), [(ALICE, True), (CAROL, True), (DAVE, True), (PAT, False)]
)
async def test_may_cancel_is_the_starter_or_a_global_approver(
    directory: SlackDirectory, user: str, expected: bool
) -> None:
    assert await deciders(directory).may_cancel(user, ALICE) is expected


def test_who_may_decide_names_people_and_groups(directory: SlackDirectory) -> None:
    lenient = deciders(directory)
    text = lenient.who_may_decide(requester=ALICE, approver_sets=())
    assert text == f"you (the requester, <@{ALICE}>) or <@{CAROL}> or anyone in <!subteam^SOPS>"

    strict = deciders(directory, self_approval=False)
    text = strict.who_may_decide(requester=ALICE, approver_sets=())
    assert text.startswith(f"<@{CAROL}> or anyone in <!subteam^SOPS>")
    assert f"<@{ALICE}>, who asked, may deny" in text

    text = lenient.who_may_decide(requester=ALICE, approver_sets=(PLATFORM,))
    assert text.startswith("anyone in <!subteam^S0PLATFORM>")
    assert f"<@{CAROL}>" not in text  # global approvers do not override a rule's set

    text = strict.who_may_decide(requester=ALICE, approver_sets=(PLATFORM, SECURITY))
    assert "someone in each of (anyone in <!subteam^S0PLATFORM>)" in text
    assert f"(<@{CAROL}> or anyone in <!subteam^SSEC>)" in text
    assert f"not <@{ALICE}>" in text
