"""Block Kit of schedules and of triggered runs: within Slack's limits, in words."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.slack.blocks import home_view, tasks_panel, trigger_in_words, triggered_runs_block
from bot.slack.schedule_views import (
    DELETE_SCHEDULE,
    PAUSE_SCHEDULE,
    RESUME_SCHEDULE,
    channel_schedules_blocks,
    home_schedules_blocks,
    parse_schedule_value,
    schedule_modal,
    schedule_state,
    schedule_text,
)
from bot.store.runs import FINISHED, RUNNING, RunRecord
from bot.triggers.scheduler import ScheduleInfo
from tests.slack.test_blocks import NOW, buttons, check_blocks, check_view, running_task

INFO = ScheduleInfo(
    name="deps-report",
    cron="0 9 * * 1",
    timezone="Europe/Berlin",
    channel_id="C1",
    prompt="List outdated dependencies <!channel> & open issues",
    agent="",
    owner="UBOB",
    source="slack",
    created_by="UALICE",
    paused=False,
    paused_by=None,
    failures=0,
    next_fire=datetime(2025, 3, 10, 8, 0, tzinfo=UTC),
    last_fire=None,
)


def run(index: int, trigger: str = "schedule:deps-report", **changes: Any) -> RunRecord:
    values: dict[str, Any] = {
        "id": f"run-{index}",
        "owner": "instance",
        "session_id": 1,
        "channel_id": "C1",
        "thread_ts": f"1700000000.{index:06d}",
        "user_id": "UALICE",
        "progress_ts": None,
        "state": FINISHED,
        "cancel_requested_by": None,
        "created_at": NOW - timedelta(minutes=5),
        "trigger": trigger,
    }
    values.update(changes)
    return RunRecord(**values)


def many(count: int) -> list[ScheduleInfo]:
    return [
        replace(INFO, name=f"schedule-{i:02d}", prompt="x" * 8_000, cron="*/5 * * * *")
        for i in range(count)
    ]


def test_a_schedule_in_words() -> None:
    text = schedule_text(INFO)
    assert text.startswith("⏰ *deps-report* · `0 9 * * 1` Europe/Berlin · next <!date^")
    assert "|2025-03-10 08:00 UTC>" in text
    assert "active · in <#C1> · owner <@UBOB> · made in Slack by <@UALICE>" in text
    # What a person wrote pings nobody.
    assert "&lt;!channel&gt; &amp; open issues" in text and "<!channel>" not in text
    in_file = schedule_text(replace(INFO, source="baton.yaml", created_by=None))
    assert "set in baton.yaml" in in_file


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"paused": True, "paused_by": "failures", "failures": 3},
         "paused after 3 failures in a row"),
        ({"paused": True, "paused_by": "UCAROL"}, "paused by <@UCAROL>"),
        ({"shadowed": True, "next_fire": None}, "shadowed"),
        ({}, "active"),
    ],
)  # fmt: skip
def test_a_schedules_state_in_words(changes: dict[str, Any], words: str) -> None:
    assert schedule_state(replace(INFO, **changes)) == words


def test_buttons_follow_the_state_and_where_it_is_set() -> None:
    def shown(info: ScheduleInfo) -> list[tuple[str, str, str | None]]:
        return buttons(channel_schedules_blocks([info], channel_id="C1", may_change=lambda i: True))

    assert [b[0] for b in shown(INFO)] == [PAUSE_SCHEDULE, DELETE_SCHEDULE]
    assert [b[0] for b in shown(replace(INFO, paused=True))] == [RESUME_SCHEDULE, DELETE_SCHEDULE]
    assert [b[0] for b in shown(replace(INFO, source="baton.yaml"))] == [PAUSE_SCHEDULE]
    assert [b[0] for b in shown(replace(INFO, shadowed=True))] == [DELETE_SCHEDULE]
    assert "shadowed" in json.dumps(channel_schedules_blocks(
        [replace(INFO, shadowed=True)], channel_id="C1", may_change=lambda i: True
    ))  # fmt: skip
    nobody = channel_schedules_blocks([INFO], channel_id="C1", may_change=lambda i: False)
    assert buttons(nobody) == []


def test_a_button_value_is_read_back_only_as_written() -> None:
    assert parse_schedule_value("slack:deps-report") == ("slack", "deps-report")
    assert parse_schedule_value("yaml:deps-report") == ("baton.yaml", "deps-report")
    for junk in (None, "", "deps-report", "file:x", "slack:Deps", "slack:" + "a" * 49):
        assert parse_schedule_value(junk) is None


@pytest.mark.parametrize("count", [0, 1, 20, 21, 60])
def test_the_channel_list_stays_within_a_message(count: int) -> None:
    blocks = channel_schedules_blocks(
        many(count), channel_id="C1", may_change=lambda i: True, notice="Paused *x*."
    )
    check_blocks(blocks, "message")
    if count > 20:
        assert f"… and {count - 20} more" in json.dumps(blocks, ensure_ascii=False)


def test_app_home_with_everything_stays_within_a_view() -> None:
    tasks = [replace(running_task(), id=f"task-explore-{i}") for i in range(40)]
    view = home_view(
        running=2,
        done=3,
        tasks=tasks,
        now=NOW,
        warning="w" * 5_000,
        usage="u",
        feedback="f",
        servers="s",
        agents="\n".join(f"workspace {i}" for i in range(40)),
        pulls="p",
        triggered=triggered_runs_block([run(i) for i in range(30)], now=NOW),
        schedules=home_schedules_blocks(many(60), everyone=True, may_change=lambda i: True),
        notice="Paused *x*.",
    )
    check_view(view)
    text = json.dumps(view, ensure_ascii=False)
    assert "… and 45 more" in text and "Paused *x*." in text
    assert "⏰ schedule deps-report" in text


def test_home_has_no_schedules_section_for_someone_who_owns_none() -> None:
    assert home_schedules_blocks([], everyone=False, may_change=lambda i: True) == []
    assert "No schedules yet" in json.dumps(
        home_schedules_blocks([], everyone=True, may_change=lambda i: True)
    )


def test_the_modal_is_within_slacks_limits() -> None:
    view = schedule_modal(channel_id="C1")
    assert len(view["title"]["text"]) <= 24
    assert all(len(view[key]["text"]) <= 24 for key in ("submit", "close"))
    ids = [block["block_id"] for block in view["blocks"] if "block_id" in block]
    assert len(ids) == len(set(ids)) and len(view["blocks"]) <= 100
    for block in view["blocks"]:
        if block["type"] == "input":
            assert len(block["label"]["text"]) <= 2_000
            assert len(block.get("hint", {}).get("text", "")) <= 2_000
    # A DM is no channel a schedule runs in: nothing is chosen at first.
    dm = schedule_modal(channel_id="D1")
    assert "initial_conversation" not in json.dumps(dm)


@pytest.mark.parametrize(
    ("trigger", "words"),
    [
        ("schedule:deps-report", "⏰ schedule deps-report"),
        ("webhook:new-issue", "🪝 webhook new-issue"),
        ("watch:C0ALERTS", "👀 watched channel"),
        ("webhook:<!here>", "🪝 webhook &lt;!here&gt;"),
    ],
)
def test_a_trigger_in_words(trigger: str, words: str) -> None:
    assert trigger_in_words(trigger) == words


def test_triggered_runs_in_the_tasks_panel() -> None:
    tasks = [replace(running_task(), id=f"task-explore-{i}") for i in range(20)]
    runs = [run(1, state=RUNNING), run(2, "webhook:new-issue"), run(3, "watch:C1")]
    block = triggered_runs_block(runs, now=NOW, team_domain="acme")
    assert block is not None
    blocks = tasks_panel(
        tasks, now=NOW, running=20, done=0, viewer_may_cancel=lambda t: True, triggered=block
    )
    check_blocks(blocks, "message")
    text = block["text"]["text"]
    assert text.splitlines() == [
        "*Started by triggers*",
        "⏰ schedule deps-report · running · 5 min ago · "
        "<https://acme.slack.com/archives/C1/p1700000000000001|thread>",
        "🪝 webhook new-issue · finished · 5 min ago · "
        "<https://acme.slack.com/archives/C1/p1700000000000002|thread>",
        "👀 watched channel · finished · 5 min ago · "
        "<https://acme.slack.com/archives/C1/p1700000000000003|thread>",
    ]
    # Without the workspace's domain, the channel and the thread's timestamp.
    plain = triggered_runs_block(runs[:1], now=NOW)
    assert plain is not None and "<#C1> thread 1700000000.000001" in plain["text"]["text"]
    assert triggered_runs_block([], now=NOW) is None
