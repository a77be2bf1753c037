"""Schedules from Slack, end to end through the Bolt app: `/tasks schedule` (a modal),
`/tasks schedules` and App Home (lists with Pause, Resume, Delete), who may do what
(checked again on every submission and click), and runs that triggers started shown in
`/tasks` and App Home."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from bot.config import AccessConfig
from bot.slack.schedule_views import (
    AGENT_BLOCK,
    CHANNEL_BLOCK,
    CRON_BLOCK,
    NAME_BLOCK,
    PROMPT_BLOCK,
    SCHEDULE_VIEW,
    TIMEZONE_BLOCK,
    schedule_modal,
)
from bot.triggers.definitions import ScheduleConfig, TriggersConfig
from bot.triggers.scheduler import ScheduleInfo
from tests.fakes.openai_api import Reply
from tests.slack.harness import ALICE, BOB, TEAM, SlackHarness, sign, start_harness, until
from tests.triggers.clock import ManualClock

CAROL = "UCAROL"
SCHEDULERS = "SSCHEDULERS"
# A Monday, 08:00 UTC: schedules' fire times are computed with this clock.
START = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
PAUSE, RESUME, DELETE = "baton_schedule_pause", "baton_schedule_resume", "baton_schedule_delete"
IN_FILE = ScheduleConfig(
    name="deps-report",
    cron="0 9 * * 1",
    timezone="Europe/Berlin",
    channel="C1",
    prompt="List outdated dependencies",
    owner=BOB,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def harness(tmp_path: Path, clock: ManualClock) -> AsyncIterator[SlackHarness]:
    """Schedulers are a user group with Alice in it; Baton works in C1 and C2; baton.yaml
    sets deps-report in C1, owned by Bob."""
    async for value in start_harness(
        tmp_path,
        trigger_clock=clock,
        access=AccessConfig(schedulers=(SCHEDULERS,), channels=("C1", "C2")),
        triggers=TriggersConfig(schedules=(IN_FILE,)),
    ):
        value.slack.add_usergroup(SCHEDULERS, [ALICE])
        value.slack.add_user(CAROL, "carol", real_name="Carol Ann", display_name="Carol")
        yield value


# ------------------------------------------------------------------------- helpers


def buttons(blocks: list[dict[str, Any]] | None) -> set[tuple[str, str]]:
    """(action id, value) of every button of `blocks`."""
    return {
        (element["action_id"], element["value"])
        for block in blocks or ()
        if block.get("type") == "actions"
        for element in block["elements"]
    }


def rendered(blocks: Any) -> str:
    return json.dumps(blocks, ensure_ascii=False)


async def listing(harness: SlackHarness, **where: str) -> dict[str, ScheduleInfo]:
    """The schedules as the scheduler lists them, by (source) name: `slack:x`, `yaml:x`."""
    infos = await harness.surface.triggers.scheduler.listing(**where)
    return {f"{'yaml' if i.source == 'baton.yaml' else 'slack'}:{i.name}": i for i in infos}


async def open_modal(harness: SlackHarness, *, user: str = ALICE, channel: str = "C1") -> dict:
    before = len(harness.slack.calls_to("views.open"))
    assert await harness.command("schedule", channel=channel, user=user) == 200
    await until(lambda: len(harness.slack.calls_to("views.open")) > before)
    return harness.slack.calls_to("views.open")[-1].params["view"]


async def submit(
    harness: SlackHarness,
    view: dict[str, Any],
    *,
    user: str,
    name: str = "standup-notes",
    cron: str = "30 8 * * 1-5",
    timezone: str = "Europe/Berlin",
    channel: str | None = "C1",
    prompt: str = "Summarise yesterday's merged pull requests.",
    agent: str = "",
) -> dict[str, Any] | None:
    """Post the view_submission Slack sends when `user` submits the modal `view` with
    these fields; Baton's answer (its JSON, None for an empty 200)."""

    def text(value: str) -> dict[str, Any]:
        return {"value": {"type": "plain_text_input", "value": value}}

    values = {
        NAME_BLOCK: text(name),
        CRON_BLOCK: text(cron),
        TIMEZONE_BLOCK: text(timezone),
        PROMPT_BLOCK: text(prompt),
        AGENT_BLOCK: text(agent),
        CHANNEL_BLOCK: {
            "value": {"type": "conversations_select", "selected_conversation": channel}
        },
    }
    payload = {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "baton-test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "ABATON",
        "token": "legacy",
        "trigger_id": f"{time.time()}.trigger",
        "view": {**view, "id": "VSCHEDULE", "team_id": TEAM, "state": {"values": values}},
    }
    body = urlencode({"payload": json.dumps(payload)})
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(body)}
    async with harness.http.post(f"{harness.url}/slack/events", data=body, headers=headers) as r:
        assert r.status == 200
        raw = await r.text()
    return json.loads(raw) if raw.strip() else None


async def make_schedule(harness: SlackHarness, **fields: Any) -> None:
    """Alice makes a schedule through the modal (standup-notes in C1 by default)."""
    view = await open_modal(harness, channel=fields.get("channel") or "C1")
    assert await submit(harness, view, user=ALICE, **fields) is None
    name = fields.get("name", "standup-notes")
    await until(lambda: any(f"*{name}* made" in e["text"] for e in harness.slack.ephemerals))


async def ephemeral(harness: SlackHarness, text: str, *, user: str, channel: str = "C1") -> dict:
    """The next ephemeral message for `user` in `channel` after `/tasks text`."""
    before = len(harness.slack.ephemerals)
    assert await harness.command(text, channel=channel, user=user) == 200
    await until(lambda: len(harness.slack.ephemerals) > before)
    (answer,) = harness.slack.ephemerals[before:]
    assert (answer["user"], answer["channel"]) == (user, channel)
    return answer


async def click(
    harness: SlackHarness,
    action: str,
    value: str,
    *,
    user: str,
    channel: str = "C1",
    view: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Click a schedule button in `channel` (or in App Home, `view`); what Baton answered:
    the ephemeral message, or the App Home published again."""
    before_ephemerals = len(harness.slack.ephemerals)
    before_home = len(harness.slack.calls_to("views.publish"))
    assert await harness.click(action, value, user=user, channel=channel, view=view) == 200
    if view is not None:
        await until(lambda: len(harness.slack.calls_to("views.publish")) > before_home)
        return harness.slack.home_views[user]
    await until(lambda: len(harness.slack.ephemerals) > before_ephemerals)
    return harness.slack.ephemerals[-1]


async def home(harness: SlackHarness, user: str) -> dict[str, Any]:
    """The App Home `user` sees when they open it."""
    before = len(harness.slack.calls_to("views.publish"))
    event = {"type": "app_home_opened", "user": user, "channel": "D1", "tab": "home",
             "event_ts": "1.1"}  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    await until(lambda: len(harness.slack.calls_to("views.publish")) > before)
    call = harness.slack.calls_to("views.publish")[-1]
    assert call.params["user_id"] == user
    return harness.slack.home_views[user]


async def carols_schedule(harness: SlackHarness) -> None:
    """A schedule in C1 owned by Carol, who is no scheduler (made while she was one)."""
    await harness.surface.triggers.store.create(
        name="carol-digest",
        cron="0 17 * * 5",
        timezone="UTC",
        channel_id="C1",
        prompt="Write the weekly digest.",
        agent="",
        owner=CAROL,
        created_by=CAROL,
    )


# ---------------------------------------------------------------------- the modal


async def test_a_scheduler_makes_a_schedule_in_the_modal_and_sees_it_listed(
    harness: SlackHarness,
) -> None:
    view = await open_modal(harness)
    assert view["callback_id"] == SCHEDULE_VIEW
    fields = {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}
    assert fields[CHANNEL_BLOCK]["type"] == "conversations_select"
    assert fields[CHANNEL_BLOCK]["initial_conversation"] == "C1"
    assert fields[TIMEZONE_BLOCK]["initial_value"] == "UTC"
    assert fields[PROMPT_BLOCK]["multiline"] is True

    assert await submit(harness, view, user=ALICE, cron="30  8 * * 1-5") is None
    made = (await listing(harness))["slack:standup-notes"]
    assert (made.cron, made.timezone, made.channel_id) == ("30 8 * * 1-5", "Europe/Berlin", "C1")
    assert (made.owner, made.created_by, made.paused) == (ALICE, ALICE, False)
    # 08:30 in Berlin is 07:30 UTC: the next is Tuesday's.
    assert made.next_fire == datetime(2025, 3, 4, 7, 30, tzinfo=UTC)

    # Told in the channel, only to her, when it first runs.
    await until(lambda: any("standup-notes" in e["text"] for e in harness.slack.ephemerals))
    told = next(e for e in harness.slack.ephemerals if "standup-notes" in e["text"])
    assert (told["user"], told["channel"]) == (ALICE, "C1")
    first = int(datetime(2025, 3, 4, 7, 30, tzinfo=UTC).timestamp())
    assert f"<!date^{first}^" in told["text"] and "2025-03-04 07:30 UTC" in told["text"]

    # `/tasks schedules` lists it beside baton.yaml's, with the buttons a scheduler has.
    answer = await ephemeral(harness, "schedules", user=ALICE)
    text = rendered(answer["blocks"])
    assert "standup-notes" in text and f"made in Slack by <@{ALICE}>" in text
    assert "deps-report" in text and "set in baton.yaml" in text and f"owner <@{BOB}>" in text
    assert buttons(answer["blocks"]) == {
        (PAUSE, "slack:standup-notes"),
        (DELETE, "slack:standup-notes"),
        (PAUSE, "yaml:deps-report"),
    }
    # `/tasks <task id>` still asks for a task.
    answer = await ephemeral(harness, "task-explore-7", user=ALICE)
    assert "no task `task-explore-7`" in answer["text"]


async def test_someone_who_is_no_scheduler_gets_no_modal_and_a_forged_submission_makes_nothing(
    harness: SlackHarness,
) -> None:
    answer = await ephemeral(harness, "schedule", user=BOB)
    assert "access.schedulers" in answer["text"] and "can make schedules" in answer["text"]
    assert harness.slack.calls_to("views.open") == []

    # Bob posts the modal's submission himself: the server decides, and makes nothing.
    answer_body = await submit(harness, schedule_modal(channel_id="C1"), user=BOB)
    assert answer_body is not None and answer_body["response_action"] == "errors"
    assert "can make schedules" in answer_body["errors"][NAME_BLOCK]
    assert list(await listing(harness)) == ["yaml:deps-report"]

    # Alice, in the schedulers' group, may; but only where she may start runs.
    view = await open_modal(harness)
    answer_body = await submit(harness, view, user=ALICE, channel="C3")
    assert answer_body is not None and set(answer_body["errors"]) == {CHANNEL_BLOCK}
    assert "some channels" in answer_body["errors"][CHANNEL_BLOCK]
    assert list(await listing(harness)) == ["yaml:deps-report"]


async def test_schedulers_are_the_approvers_when_access_names_none(tmp_path: Path) -> None:
    async for harness in start_harness(tmp_path, approvers=(CAROL,)):
        harness.slack.add_user(CAROL, "carol", real_name="Carol Ann", display_name="Carol")
        answer = await ephemeral(harness, "schedule", user=ALICE)
        assert "approvers" in answer["text"]
        view = await open_modal(harness, user=CAROL)
        assert await submit(harness, view, user=CAROL, name="nightly") is None
        assert (await listing(harness))["slack:nightly"].owner == CAROL


@pytest.mark.parametrize(
    ("fields", "block", "words"),
    [
        ({"cron": "0 9 * *"}, CRON_BLOCK, "5 fields"),
        ({"cron": "0 25 * * *"}, CRON_BLOCK, "cron"),
        ({"timezone": "Mars/Olympus_Mons"}, TIMEZONE_BLOCK, "time zone name"),
        ({"name": "deps-report"}, NAME_BLOCK, "baton.yaml has a schedule named deps-report"),
        ({"name": "Deps Report"}, NAME_BLOCK, "lowercase"),
        ({"prompt": "   "}, PROMPT_BLOCK, "Write what Baton should do"),
        ({"agent": "Not An Agent"}, AGENT_BLOCK, "agent"),
        ({"agent": "no-such-agent"}, AGENT_BLOCK, "No agent named no-such-agent works in"),
        ({"channel": None}, CHANNEL_BLOCK, "Choose a channel"),
    ],
)
async def test_what_is_wrong_shows_under_its_field_and_nothing_is_made(
    harness: SlackHarness, fields: dict[str, Any], block: str, words: str
) -> None:
    view = await open_modal(harness)
    answer = await submit(harness, view, user=ALICE, **fields)
    assert answer is not None and answer["response_action"] == "errors"
    assert set(answer["errors"]) == {block}, answer
    assert words in answer["errors"][block]
    assert list(await listing(harness)) == ["yaml:deps-report"]


async def test_a_name_made_in_slack_already_is_refused_under_the_name(
    harness: SlackHarness,
) -> None:
    await make_schedule(harness)
    view = await open_modal(harness)
    answer = await submit(harness, view, user=ALICE, cron="0 12 * * *")
    assert answer is not None
    assert answer["errors"] == {
        NAME_BLOCK: "The schedule was not made: a schedule named standup-notes exists already."
    }
    assert (await listing(harness))["slack:standup-notes"].cron == "30 8 * * 1-5"


# ------------------------------------------------------------ /tasks schedules


async def test_pause_resume_and_delete_from_tasks_schedules(harness: SlackHarness) -> None:
    await make_schedule(harness)
    await carols_schedule(harness)

    answer = await click(harness, PAUSE, "slack:standup-notes", user=ALICE)
    assert "Paused *standup-notes*" in answer["text"]
    info = (await listing(harness))["slack:standup-notes"]
    assert (info.paused, info.paused_by, info.next_fire) == (True, ALICE, None)
    # The list shown again says so, with Resume instead of Pause.
    text = rendered(answer["blocks"])
    assert f"paused by <@{ALICE}>" in text
    assert (RESUME, "slack:standup-notes") in buttons(answer["blocks"])
    assert (PAUSE, "slack:standup-notes") not in buttons(answer["blocks"])

    answer = await click(harness, RESUME, "slack:standup-notes", user=ALICE)
    assert "Resumed *standup-notes*" in answer["text"]
    assert not (await listing(harness))["slack:standup-notes"].paused

    # Bob is neither its owner nor a scheduler: refused, whatever he clicks.
    answer = await click(harness, PAUSE, "slack:standup-notes", user=BOB)
    assert f"Only its owner <@{ALICE}>" in answer["text"]
    answer = await click(harness, DELETE, "slack:standup-notes", user=BOB)
    assert f"Only its owner <@{ALICE}>" in answer["text"]
    answer = await click(harness, PAUSE, "yaml:deps-report", user=BOB)
    assert "schedule of baton.yaml" in answer["text"]
    schedules = await listing(harness)
    assert not schedules["slack:standup-notes"].paused and not schedules["yaml:deps-report"].paused

    # Carol owns hers, though no scheduler: she sees its buttons and may pause it.
    answer = await ephemeral(harness, "schedules", user=CAROL)
    assert buttons(answer["blocks"]) == {
        (PAUSE, "slack:carol-digest"),
        (DELETE, "slack:carol-digest"),
    }
    await click(harness, PAUSE, "slack:carol-digest", user=CAROL)
    assert (await listing(harness))["slack:carol-digest"].paused_by == CAROL

    # baton.yaml's: a scheduler pauses it; nobody deletes it from Slack, even forged.
    await click(harness, PAUSE, "yaml:deps-report", user=ALICE)
    assert (await listing(harness))["yaml:deps-report"].paused
    for value in ("yaml:deps-report", "slack:deps-report"):
        answer = await click(harness, DELETE, value, user=ALICE)
        assert "*deps-report* is set in baton.yaml; change it there." in answer["text"]
    assert "yaml:deps-report" in await listing(harness)

    answer = await click(harness, DELETE, "slack:standup-notes", user=ALICE)
    assert "Deleted *standup-notes*" in answer["text"]
    assert "slack:standup-notes" not in await listing(harness)
    # The list under the notice no longer has it.
    assert "standup-notes" not in rendered(answer["blocks"][1:])


async def test_tasks_schedules_shows_only_the_channel_it_is_typed_in(
    harness: SlackHarness,
) -> None:
    await make_schedule(harness, name="in-c2", channel="C2")
    answer = await ephemeral(harness, "schedules", user=ALICE, channel="C2")
    text = rendered(answer["blocks"])
    assert "in-c2" in text
    assert "deps-report" not in text and "C1" not in text

    # A button's value carried to another channel reaches nothing there.
    answer = await click(harness, PAUSE, "yaml:deps-report", user=ALICE, channel="C2")
    assert "There is no schedule *deps-report* in this channel." in answer["text"]
    assert not (await listing(harness))["yaml:deps-report"].paused

    # Only to people who may see that channel's tasks: C3 is not one of Baton's.
    answer = await ephemeral(harness, "schedules", user=BOB, channel="C3")
    assert "some channels" in answer["text"] and not answer["blocks"]


# ---------------------------------------------------------------------- App Home


async def test_app_home_lists_the_viewers_schedules_and_every_one_for_schedulers(
    harness: SlackHarness,
) -> None:
    await make_schedule(harness)
    await carols_schedule(harness)

    # Carol sees her own, with its buttons.
    view = await home(harness, CAROL)
    text = rendered(view["blocks"])
    assert "Your schedules" in text and "carol-digest" in text
    assert "standup-notes" not in text and "deps-report" not in text
    assert buttons(view["blocks"]) >= {(PAUSE, "slack:carol-digest")}
    view = await click(harness, PAUSE, "slack:carol-digest", user=CAROL, view=view)
    assert "Paused *carol-digest*" in rendered(view["blocks"])
    assert f"paused by <@{CAROL}>" in rendered(view["blocks"])
    assert (await listing(harness))["slack:carol-digest"].paused
    view = await click(harness, RESUME, "slack:carol-digest", user=CAROL, view=view)
    assert not (await listing(harness))["slack:carol-digest"].paused

    # Bob owns baton.yaml's deps-report: he sees it, without buttons; a forged click
    # is refused.
    view = await home(harness, BOB)
    text = rendered(view["blocks"])
    assert "deps-report" in text and "carol-digest" not in text
    assert buttons(view["blocks"]) == set()
    view = await click(harness, PAUSE, "yaml:deps-report", user=BOB, view=view)
    assert "schedule of baton.yaml" in rendered(view["blocks"])
    view = await click(harness, DELETE, "slack:carol-digest", user=BOB, view=view)
    assert "Only its owner" in rendered(view["blocks"])
    assert "slack:carol-digest" in await listing(harness)

    # Alice, a scheduler, sees every schedule and deletes Carol's from there.
    view = await home(harness, ALICE)
    text = rendered(view["blocks"])
    assert all(name in text for name in ("deps-report", "standup-notes", "carol-digest"))
    assert (DELETE, "yaml:deps-report") not in buttons(view["blocks"])
    view = await click(harness, DELETE, "slack:carol-digest", user=ALICE, view=view)
    assert "Deleted *carol-digest*" in rendered(view["blocks"])
    assert "slack:carol-digest" not in await listing(harness)
    view = await click(harness, DELETE, "yaml:deps-report", user=ALICE, view=view)
    assert "set in baton.yaml; change it there" in rendered(view["blocks"])


# ---------------------------------------------------------------- triggered runs


async def test_a_scheduled_run_shows_in_tasks_and_app_home_with_its_trigger(
    harness: SlackHarness, clock: ManualClock
) -> None:
    harness.llm.script(Reply(text="Nothing merged yesterday."))
    await make_schedule(harness, name="every-minute", cron="* * * * *", timezone="UTC")
    clock.advance(timedelta(seconds=61))

    # The scheduler's loop wakes on the clock and fires: the run's announcement, then
    # its answer in the thread.
    def answered() -> bool:
        return any(
            "every-minute" in m.get("text", "")
            and "Nothing merged yesterday." in json.dumps(harness.thread("C1", m["ts"]))
            for m in harness.slack.channel_messages("C1")
        )

    await until(answered)
    await harness.settle()
    (run,) = await harness.surface.turns.run_store.triggered(user_id=ALICE)
    assert run.trigger == "schedule:every-minute"

    answer = await ephemeral(harness, "", user=ALICE)
    text = rendered(answer["blocks"])
    assert "Started by triggers" in text and "⏰ schedule every-minute" in text
    link = f"https://baton-test.slack.com/archives/C1/p{run.thread_ts.replace('.', '')}"
    assert link in text

    # Another channel's panel never shows it.
    answer = await ephemeral(harness, "", user=ALICE, channel="C2")
    assert "every-minute" not in rendered(answer["blocks"])

    view = await home(harness, ALICE)
    text = rendered(view["blocks"])
    assert "Runs triggers started for you" in text and "⏰ schedule every-minute" in text
    assert "every-minute" not in rendered((await home(harness, BOB))["blocks"])
