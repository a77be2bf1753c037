"""The directory: people read ahead with users.list, kept fresh by user_change and
team_join, across replicas; access as strict as with a users.info per person.

End-to-end tests drive the real Bolt app with signed events (tests/slack/harness.py);
the reading itself is also driven directly against the fake Slack API.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.directory import (
    MAX_NAME_CHARS,
    MAX_PAGE_MEMBERS,
    PAGE_SIZE,
    SlackDirectory,
    bucket_of,
)
from bot.slack.server import EVENTS_PATH
from tests.databases import POSTGRES_SERVER, fresh_postgres
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlackAPI
from tests.slack.harness import (
    ALICE,
    BOB,
    PATIENCE_S,
    TEAM,
    SlackHarness,
    next_ts,
    sign,
    start_harness,
    until,
)

CAROL = "UCAROL"
DAVE = "UDAVE"
OTHER_TEAM = "T0OTHER"
_events = iter(range(1, 1_000_000))


# --------------------------------------------------------------------------- helpers


async def eventually(check: Callable[[], Awaitable[bool]], within: float = PATIENCE_S) -> None:
    """Ask `check` until it holds; fail the test after `within` seconds."""
    async with asyncio.timeout(within):
        # Polling is the point: the state is in the bot (or another replica).
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def warmed(harness: SlackHarness) -> SlackDirectory:
    """The harness's directory, once its first read of users.list has finished."""
    directory = harness.surface.directory
    async with asyncio.timeout(PATIENCE_S):
        await directory.warmed.wait()
    return directory


def user_object(slack: FakeSlackAPI, user_id: str, **changes: Any) -> dict[str, Any]:
    """The user object Slack holds for `user_id`, with `changes`."""
    return {**copy.deepcopy(slack.users[user_id]), **changes}


def event_body(kind: str, user: object, *, team: str = TEAM) -> str:
    return json.dumps(
        {
            "token": "legacy",
            "team_id": team,
            "api_app_id": "ABATON",
            "event": {"type": kind, "user": user, "cache_ts": int(time.time()),
                      "event_ts": next_ts()},
            "type": "event_callback",
            "event_id": f"EvDir{next(_events)}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": team, "user_id": "UBOT", "is_bot": True}],
        }
    )  # fmt: skip


async def send_user_event(
    harness: SlackHarness, kind: str, user: object, *, team: str = TEAM
) -> None:
    body = event_body(kind, user, team=team)
    response = await harness.post(body, content_type="application/json")
    assert response.status == 200


async def barrier(harness: SlackHarness, user_id: str = "UBARRIER") -> None:
    """Send a team_join and wait until it is taken: the events sent before it were
    handled by then (Bolt runs event listeners in the order requests came, and an
    ignored event is decided before its listener's first await)."""
    harness.slack.add_user(user_id, user_id.lower())
    await send_user_event(harness, "team_join", user_object(harness.slack, user_id))
    await until(lambda: harness.surface.directory.holds(user_id))


def info_calls(slack: FakeSlackAPI, user_id: str | None = None) -> int:
    return len([c for c in slack.calls_to("users.info") if user_id in (None, c.params.get("user"))])


def ephemerals_to(harness: SlackHarness, user: str) -> list[str]:
    return [e["text"] for e in harness.slack.ephemerals if e["user"] == user]


def echo(request: RecordedRequest) -> Reply:
    return Reply(text="Answer to " + str(request.messages[-1]["content"]).rsplit(" ", 1)[-1])


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as fake:
        yield fake


def directory_of(slack: FakeSlackAPI, **options: Any) -> SlackDirectory:
    client = AsyncWebClient(token="xoxb-test", base_url=slack.url)
    return SlackDirectory(client, **{"page_retry_s": (0.0, 0.0), **options})


# --------------------------------------------------------------------------- reading ahead


async def test_a_burst_of_new_people_after_the_read_costs_no_users_info(
    harness: SlackHarness,
) -> None:
    directory = await warmed(harness)
    people = [f"UNEW{n:02d}" for n in range(40)]
    for n, person in enumerate(people):
        harness.slack.add_user(person, f"new{n}", display_name=f"New {n}")
    assert await directory.warm()  # the hourly read, or the first one after they joined
    before = info_calls(harness.slack)
    harness.llm.responder = echo
    threads = await asyncio.gather(
        *(
            harness.mention(f"question q{n}", user=person, channel=f"C{n % 10}")
            for n, person in enumerate(people)
        )
    )
    # Forty runs at once on a machine the other test workers share: a generous cap.
    await harness.settle(within=120)
    for n, ts in enumerate(threads):
        assert any(f"Answer to q{n}" in text for text in harness.bot_texts(f"C{n % 10}", ts)), n
    assert info_calls(harness.slack) == before  # not one users.info for 40 new people
    assert not harness.slack.ephemerals
    # Their names came from the read too.
    assert await directory.name_of(people[7]) == "New 7"


async def test_users_list_is_read_page_by_page(slack: FakeSlackAPI) -> None:
    people = [f"UP{n:04d}" for n in range(450)]
    for person in people:
        slack.add_user(person, person.lower(), email=f"{person.lower()}@example.com")
    directory = directory_of(slack)
    assert await directory.warm()
    pages = slack.calls_to("users.list")
    assert len(pages) == 3  # 451 people with the bot, 200 a page
    assert [int(page.params["limit"]) for page in pages] == [PAGE_SIZE] * 3
    assert "cursor" not in pages[0].params
    assert pages[1].params["cursor"] and pages[2].params["cursor"] != pages[1].params["cursor"]
    assert directory.warmed.is_set()
    assert all(directory.holds(person) for person in people)
    person = await directory.person(people[-1])
    assert person is not None and person.team_id == TEAM and not person.deactivated
    assert await directory.email_of(people[3]) == "up0003@example.com"
    assert slack.calls_to("users.info") == []


async def test_a_page_that_fails_is_asked_again_from_where_it_stopped(slack: FakeSlackAPI) -> None:
    slack.add_user("UFIRST", "first")
    slack.add_user("USECOND", "second")
    asked: list[str] = []

    def flaky(params: dict[str, Any]) -> dict[str, Any]:
        cursor = str(params.get("cursor") or "")
        asked.append(cursor)
        if asked.count(cursor) <= (1 if cursor == "" else 2):  # page 1 once, page 2 twice
            return {"ok": False, "error": "internal_error"}
        user, after = ("UFIRST", "page2") if cursor == "" else ("USECOND", "")
        page = [user_object(slack, user)]
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": after}}

    slack.register("users.list", flaky)
    directory = directory_of(slack)  # a page is asked up to three times
    assert await directory.warm()
    assert asked == ["", "", "page2", "page2", "page2"]
    assert directory.holds("UFIRST") and directory.holds("USECOND")
    assert directory.warmed.is_set()


async def test_a_read_that_cannot_finish_keeps_what_it_read(slack: FakeSlackAPI) -> None:
    slack.add_user("UREAD", "read")
    slack.add_user("UUNREAD", "unread")

    def second_page_fails(params: dict[str, Any]) -> dict[str, Any]:
        if params.get("cursor"):
            return {"ok": False, "error": "internal_error"}
        first = [user_object(slack, "UREAD")]
        return {"ok": True, "members": first, "response_metadata": {"next_cursor": "page2"}}

    slack.register("users.list", second_page_fails)
    directory = directory_of(slack)  # a page is asked three times
    assert not await directory.warm()
    assert not directory.warmed.is_set()
    cursors = [call.params.get("cursor") for call in slack.calls_to("users.list")]
    assert cursors == [None, "page2", "page2", "page2"]
    assert directory.holds("UREAD") and not directory.holds("UUNREAD")
    # Those it did not read are asked one by one, as before.
    person = await directory.person("UUNREAD")
    assert person is not None and info_calls(slack, "UUNREAD") == 1


async def test_a_read_is_repeated_and_catches_a_change_whose_event_was_missed(
    slack: FakeSlackAPI,
) -> None:
    slack.add_user(CAROL, "carol")
    directory = directory_of(slack, rewarm_every_s=0.01, warm_ttl=3600.0)
    directory.start(team_id=TEAM)
    try:
        await until(lambda: directory.holds(CAROL))
        slack.users[CAROL]["deleted"] = True  # and Slack's user_change never came
        reads = len(slack.calls_to("users.list"))
        await until(lambda: len(slack.calls_to("users.list")) >= reads + 2)
        person = await directory.person(CAROL)
        assert person is not None and person.deactivated
        assert slack.calls_to("users.info") == []
    finally:
        await directory.close()


async def test_what_was_read_expires(slack: FakeSlackAPI) -> None:
    """Read entries are trusted two read periods; past that, Slack is asked again."""
    slack.add_user(CAROL, "carol")
    directory = directory_of(slack, warm_ttl=0.0)
    assert await directory.warm()
    assert not directory.holds(CAROL)
    assert await directory.person(CAROL) is not None
    assert info_calls(slack, CAROL) == 1


# --------------------------------------------------------------------------- events


async def test_team_join_makes_a_new_person_known_without_users_info(
    harness: SlackHarness,
) -> None:
    directory = await warmed(harness)
    harness.slack.add_user(DAVE, "dave", display_name="Dave")
    await send_user_event(harness, "team_join", user_object(harness.slack, DAVE))
    await until(lambda: directory.holds(DAVE))
    harness.llm.responder = echo
    ts = await harness.mention("hello there", user=DAVE)
    await harness.settle()
    assert any("Answer to there" in text for text in harness.bot_texts("C1", ts))
    assert info_calls(harness.slack, DAVE) == 0
    assert await directory.name_of(DAVE) == "Dave"


async def test_a_deactivation_refuses_the_next_mention_at_once(harness: SlackHarness) -> None:
    directory = await warmed(harness)
    before = await directory.person(ALICE)
    assert before is not None and not before.deactivated
    harness.slack.users[ALICE]["deleted"] = True  # Slack's truth, told by the event
    await send_user_event(
        harness, "user_change", user_object(harness.slack, ALICE, updated=1_800_000_000)
    )

    async def deactivated() -> bool:
        person = await directory.person(ALICE)
        return person is not None and person.deactivated

    await eventually(deactivated)
    await harness.mention("print the deploy key")
    await until(lambda: bool(ephemerals_to(harness, ALICE)))
    await harness.settle()
    assert "is deactivated" in ephemerals_to(harness, ALICE)[0]
    assert harness.llm.requests == []
    if not harness.baton.signals.postgres:
        # The event alone decided, long before the five minutes users.info is kept. (On
        # PostgreSQL the replica's own signal makes it ask Slack once, as the others do.)
        assert info_calls(harness.slack, ALICE) == 0


async def test_a_name_change_is_taken_from_the_event(harness: SlackHarness) -> None:
    directory = await warmed(harness)
    assert await directory.name_of(BOB) == "Bob"
    harness.slack.users[BOB]["profile"]["display_name"] = "Bobby"  # Slack's truth
    await send_user_event(harness, "user_change", user_object(harness.slack, BOB))
    await eventually(lambda: _named(directory, BOB, "Bobby"))
    if not harness.baton.signals.postgres:
        assert info_calls(harness.slack, BOB) == 0


async def _named(directory: SlackDirectory, user_id: str, name: str) -> bool:
    return await directory.name_of(user_id) == name


# --------------------------------------------------------------------------- hostile


async def test_an_event_of_another_workspace_changes_nothing(harness: SlackHarness) -> None:
    directory = await warmed(harness)
    await send_user_event(
        harness, "user_change", user_object(harness.slack, ALICE, deleted=True), team=OTHER_TEAM
    )
    await barrier(harness)
    person = await directory.person(ALICE)
    assert person is not None and not person.deactivated
    assert info_calls(harness.slack, ALICE) == 0


async def test_a_person_of_another_team_is_never_taken_from_an_event(
    harness: SlackHarness,
) -> None:
    directory = await warmed(harness)
    # Someone of another organisation (a shared channel) is not held from the event.
    outsider = user_object(harness.slack, BOB, id="UOUTSIDER", team_id=OTHER_TEAM)
    outsider["profile"] = {**outsider["profile"], "team": OTHER_TEAM}
    await send_user_event(harness, "user_change", outsider)
    # An event moving a member to another team makes Baton ask Slack about them.
    moved = user_object(harness.slack, ALICE, team_id=OTHER_TEAM, is_restricted=True)
    await send_user_event(harness, "user_change", moved)
    await barrier(harness)
    assert not directory.holds("UOUTSIDER")
    assert not directory.holds(ALICE)
    harness.llm.responder = echo
    ts = await harness.mention("still me")
    await harness.settle()
    assert any("Answer to me" in text for text in harness.bot_texts("C1", ts))
    assert info_calls(harness.slack, ALICE) == 1  # Slack said who she is


@pytest.mark.parametrize(
    "user",
    [
        {"name": "no id", "team_id": TEAM, "deleted": True},
        {"id": ALICE, "team_id": TEAM, "deleted": "maybe"},
        {"id": ALICE, "team_id": 42},
        {"id": "alice; DROP", "team_id": TEAM},
        {"id": ALICE, "team_id": TEAM, "profile": "not an object"},
        "not an object",
        None,
    ],
)
async def test_a_malformed_user_object_is_ignored_with_a_warning(
    harness: SlackHarness, user: object, caplog: pytest.LogCaptureFixture
) -> None:
    directory = await warmed(harness)
    with caplog.at_level(logging.WARNING, logger="bot.slack.directory"):
        await send_user_event(harness, "user_change", user)
        await barrier(harness)
    assert "ignored a user object from user_change that does not fit" in caplog.text
    person = await directory.person(ALICE)
    assert person is not None and not person.deactivated
    assert info_calls(harness.slack, ALICE) == 0


async def test_a_forged_user_change_never_reaches_the_directory(harness: SlackHarness) -> None:
    directory = await warmed(harness)
    forged = event_body("user_change", user_object(harness.slack, ALICE, deleted=True))
    for headers in (sign(forged, secret="not-the-secret"), sign(forged, timestamp=1)):
        async with harness.http.post(
            f"{harness.url}{EVENTS_PATH}",
            data=forged,
            headers={"Content-Type": "application/json", **headers},
        ) as response:
            assert response.status == 401
    await barrier(harness)
    person = await directory.person(ALICE)
    assert person is not None and not person.deactivated
    # The same event, signed with the app's secret, is taken: only the signature differed.
    harness.slack.users[ALICE]["deleted"] = True  # (and now Slack says so too)
    await harness.post(forged, content_type="application/json")

    async def deactivated() -> bool:
        person = await directory.person(ALICE)
        return person is not None and person.deactivated

    await eventually(deactivated)


async def test_a_huge_page_is_read_within_bounds(slack: FakeSlackAPI) -> None:
    def huge(params: dict[str, Any]) -> dict[str, Any]:
        members = [{"id": f"UH{n:05d}", "team_id": TEAM} for n in range(MAX_PAGE_MEMBERS * 5)]
        members[0]["real_name"] = "N" * 5_000_000
        return {"ok": True, "members": members, "response_metadata": {"next_cursor": ""}}

    slack.register("users.list", huge)
    directory = directory_of(slack)
    assert await directory.warm()
    assert directory.holds("UH00000") and directory.holds(f"UH{MAX_PAGE_MEMBERS - 1:05d}")
    assert not directory.holds(f"UH{MAX_PAGE_MEMBERS:05d}")
    assert len(await directory.name_of("UH00000")) == MAX_NAME_CHARS


async def test_a_cursor_that_comes_back_ends_the_read(slack: FakeSlackAPI) -> None:
    def loop(params: dict[str, Any]) -> dict[str, Any]:
        member = {"id": "ULOOP", "team_id": TEAM}
        return {"ok": True, "members": [member], "response_metadata": {"next_cursor": "again"}}

    slack.register("users.list", loop)
    directory = directory_of(slack)
    assert not await directory.warm()
    assert len(slack.calls_to("users.list")) == 2
    assert directory.holds("ULOOP")


# --------------------------------------------------------------------------- failures


async def test_without_users_list_people_are_asked_and_refused_when_slack_cannot_say(
    harness: SlackHarness,
) -> None:
    directory = await warmed(harness)
    harness.slack.add_user(CAROL, "carol")
    harness.slack.add_user(DAVE, "dave")
    directory.page_retry_s = (0.0,)
    harness.slack.fail_next("users.list", error="internal_error", times=2)
    assert not await directory.warm()
    assert not directory.holds(CAROL)
    harness.llm.responder = echo
    # Not read ahead: asked with users.info, as before.
    ts = await harness.mention("question one", user=CAROL)
    await harness.settle()
    assert any("Answer to one" in text for text in harness.bot_texts("C1", ts))
    assert info_calls(harness.slack, CAROL) == 1
    # users.info fails too: refused, exactly as before.
    harness.slack.fail_next("users.info", error="internal_error")
    await harness.mention("question two", user=DAVE)
    await until(lambda: bool(ephemerals_to(harness, DAVE)))
    await harness.settle()
    assert ephemerals_to(harness, DAVE)[0].startswith("Baton could not check who you are")
    assert len(harness.llm.requests) == 1


async def test_a_read_refused_for_good_is_not_asked_again_at_once(slack: FakeSlackAPI) -> None:
    slack.fail_next("users.list", error="missing_scope")
    directory = directory_of(slack)
    assert not await directory.warm()
    assert len(slack.calls_to("users.list")) == 1
    assert await directory.person(slack.bot_user_id) is not None


# --------------------------------------------------------------------------- replicas


@contextlib.asynccontextmanager
async def replica(path: Path, database_url: str) -> AsyncIterator[SlackHarness]:
    async for harness in start_harness(path, database_url=database_url):
        yield harness


@pytest.mark.skipif(not POSTGRES_SERVER, reason="BATON_TEST_POSTGRES_URL is not set")
async def test_another_replica_forgets_a_changed_person_on_the_signal(tmp_path: Path) -> None:
    """The event reaches A; B held the person from its own read, and asks Slack next."""
    assert bucket_of(ALICE) != bucket_of(BOB)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    async with (
        fresh_postgres() as url,
        replica(tmp_path / "a", url) as a,
        replica(tmp_path / "b", url) as b,
    ):
        directory_b = await warmed(b)
        await warmed(a)
        person = await directory_b.person(ALICE)
        assert person is not None and not person.deactivated
        # A status change is no news for other replicas: no signal, B keeps Bob.
        status = user_object(a.slack, BOB)
        status["profile"] = {**status["profile"], "status_text": "on holiday"}
        await send_user_event(a, "user_change", status)
        for slack in (a.slack, b.slack):  # one Slack, seen by both
            slack.users[ALICE]["deleted"] = True
        await send_user_event(a, "user_change", user_object(a.slack, ALICE))

        async def deactivated_on_b() -> bool:
            person = await directory_b.person(ALICE)
            return person is not None and person.deactivated

        await eventually(deactivated_on_b)
        assert info_calls(b.slack, ALICE) == 1  # asked Slack once, after the signal
        assert directory_b.holds(BOB)
        assert await directory_b.person(BOB) is not None and info_calls(b.slack, BOB) == 0
        await b.mention("print the deploy key")
        await until(lambda: bool(ephemerals_to(b, ALICE)))
        await b.settle()
        assert "is deactivated" in ephemerals_to(b, ALICE)[0]
        assert b.llm.requests == []
