"""Schedules end to end: the real app on the fake Slack and model, its scheduler on a
clock the test drives.

Each test starts the bot with `start_harness(trigger_clock=clock)`: the scheduler's own
loop runs on that clock, and the test moves it and ticks (`Bot.at`), then waits until
the loop is asleep again and every run has ended, so nothing is left in flight when it
looks. Fire times are Mondays 09:00 in Berlin (08:00 UTC in winter).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.access.budgets import utc_day, utc_now
from bot.config import AccessConfig
from bot.outcomes import RunEnd, RunOutcome
from bot.sessions.surface import Where
from bot.sessions.turns import TriggerEnd
from bot.store.models import ScheduleRow
from bot.store.runs import RunStore
from bot.triggers.definitions import ScheduleConfig, TriggersConfig
from bot.triggers.scheduler import Scheduler
from tests.conftest import harness_database_kind
from tests.databases import fresh_database
from tests.fakes.openai_api import ErrorReply, Reply
from tests.slack.harness import ALICE, BOB, BOT, SlackHarness, start_harness, until
from tests.triggers.clock import ManualClock

CHANNEL = "C0DEPS"
MONDAY = datetime(2027, 1, 4, 8, 0, tzinfo=UTC)  # 09:00 in Berlin
WEEK = timedelta(days=7)
ANNOUNCED = "⏰ Scheduled run"


def deps_report(**overrides: Any) -> ScheduleConfig:
    values: dict[str, Any] = {
        "name": "deps-report",
        "cron": "0 9 * * 1",
        "timezone": "Europe/Berlin",
        "channel": CHANNEL,
        "prompt": "List outdated dependencies and open a PR for the safe ones",
        "owner": ALICE,
    }
    values.update(overrides)
    return ScheduleConfig(**values)


@dataclass
class Bot:
    """The bot, and the clock its scheduler reads."""

    harness: SlackHarness
    clock: ManualClock

    @property
    def scheduler(self) -> Scheduler:
        return self.harness.surface.triggers.scheduler

    async def at(self, moment: datetime) -> None:
        """Move the clock to `moment` and fire what is due; return once the scheduler's
        loop is asleep again and every run it started has ended."""
        self.clock.set(moment)
        await self.scheduler.tick()
        await self.clock.sleeping()
        await self.harness.settle()

    def announcements(self, channel: str = CHANNEL) -> list[dict[str, Any]]:
        return [
            m
            for m in self.harness.slack.channel_messages(channel)
            if m.get("user") == BOT and m.get("thread_ts") in (None, m["ts"])
            and m.get("text", "").startswith(ANNOUNCED)
        ]  # fmt: skip

    def direct_messages(self, user: str) -> list[str]:
        return [m.get("text", "") for m in self.harness.slack.channel_messages(user)]


@contextlib.asynccontextmanager
async def scheduled(
    tmp_path: Path,
    *schedules: ScheduleConfig,
    start: datetime = MONDAY - timedelta(hours=1),
    clock: ManualClock | None = None,
    **overrides: Any,
) -> AsyncIterator[Bot]:
    """The bot with `schedules` in its baton.yaml, its scheduler on a driven clock that
    reads `start` (its loop has looked once: the schedules count from then)."""
    clock = clock or ManualClock(start)
    tmp_path.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (a test's own directory)
    overrides.setdefault("triggers", TriggersConfig(schedules=schedules))
    harnesses = start_harness(tmp_path, trigger_clock=clock, **overrides)
    async with contextlib.aclosing(harnesses):
        async for harness in harnesses:
            await clock.sleeping()
            yield Bot(harness, clock)


async def answered(bot: Bot, ts: str, text: str) -> None:
    await until(lambda: any(text in said for said in bot.harness.bot_texts(CHANNEL, ts)))


# ------------------------------------------------------------------------ firing


async def test_a_schedule_fires_once_at_its_time_and_its_owner_runs_it(tmp_path: Path) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        # Not yet: nothing is due before 09:00.
        await bot.at(MONDAY - timedelta(seconds=1))
        assert bot.announcements() == []
        bot.harness.llm.script(Reply(text="Three packages are outdated."))
        await bot.at(MONDAY)
        (announcement,) = bot.announcements()
        assert announcement["text"] == (
            "⏰ Scheduled run *deps-report* (`0 9 * * 1`, Europe/Berlin) for <@UALICE>"
        )
        # The run answered in the announcement's thread.
        await answered(bot, announcement["ts"], "Three packages are outdated.")
        (request,) = bot.harness.main_requests()
        assert "List outdated dependencies and open a PR" in str(request.messages[-1]["content"])
        # Its record names the schedule, and it ran for the owner: their tokens.
        (run,) = await RunStore(bot.harness.baton.database).triggered()
        assert (run.trigger, run.user_id, run.channel_id, run.thread_ts) == (
            "schedule:deps-report",
            ALICE,
            CHANNEL,
            announcement["ts"],
        )
        spent = await bot.harness.baton.usage.user_day(ALICE, utc_day(utc_now()))
        assert spent.total_tokens > 0
        today = await bot.harness.baton.budgets.today(user_id=ALICE, channel_id=None)
        assert today.user is not None and today.user.tokens == spent.total_tokens
        # The fire remembers its thread, its run and its end.
        (fire,) = await bot.scheduler.store.recent_fires("deps-report")
        assert (fire.fire_at, fire.missed, fire.claimed_by) == (
            MONDAY,
            0,
            bot.harness.baton.instances.id,
        )
        assert (fire.message_ts, fire.run_id, fire.outcome) == (
            announcement["ts"],
            run.id,
            "done",
        )
        # Later looks the same Monday fire nothing more; the next Monday fires again.
        await bot.at(MONDAY + timedelta(minutes=30))
        await bot.at(MONDAY + WEEK - timedelta(seconds=1))
        assert len(bot.announcements()) == 1
        bot.harness.llm.script(Reply(text="All up to date."))
        await bot.at(MONDAY + WEEK)
        assert len(bot.announcements()) == 2
        assert not bot.harness.llm.unexpected


async def test_the_schedulers_own_loop_fires_on_time(tmp_path: Path) -> None:
    """No tick from the test: the loop sleeps until the fire time and fires then."""
    async with scheduled(tmp_path, deps_report(), start=MONDAY - timedelta(seconds=3)) as bot:
        bot.harness.llm.script(Reply(text="Done looking."))
        # The loop sleeps until 09:00 (under its 5 s cap): moving there wakes it.
        bot.clock.set(MONDAY)
        await until(lambda: len(bot.announcements()) == 1)
        await bot.clock.sleeping()
        await bot.harness.settle()
        (announcement,) = bot.announcements()
        await answered(bot, announcement["ts"], "Done looking.")


async def test_a_schedule_seen_for_the_first_time_runs_no_past_fire_times(
    tmp_path: Path,
) -> None:
    # First seen on a Wednesday: Monday's fire time is past and does not run.
    async with scheduled(tmp_path, deps_report(), start=MONDAY + timedelta(days=2)) as bot:
        await bot.at(MONDAY + timedelta(days=2, hours=1))
        assert bot.announcements() == []
        assert await bot.scheduler.store.recent_fires("deps-report") == []


async def test_a_changed_cron_counts_afresh_from_the_change(tmp_path: Path) -> None:
    path = tmp_path / "baton.yaml"
    path.write_text(yaml_of(deps_report()))
    async with scheduled(tmp_path, deps_report(), config_path=path) as bot:
        # Changed on Sunday to 10:00: Monday 09:00 no longer fires, 10:00 does, once.
        bot.clock.set(MONDAY - timedelta(days=1))
        path.write_text(yaml_of(deps_report(cron="0 10 * * 1")))
        assert bot.harness.surface.triggers.reload().changed == ("schedule deps-report",)
        await bot.scheduler.tick()
        bot.harness.llm.script(Reply(text="ok"))
        await bot.at(MONDAY)
        assert bot.announcements() == []
        await bot.at(MONDAY + timedelta(hours=1))
        (announcement,) = bot.announcements()
        assert "`0 10 * * 1`" in announcement["text"]
        assert "missed" not in announcement["text"]


# ---------------------------------------------------------------------- downtime


async def test_downtime_that_missed_three_fires_runs_once_with_a_note(tmp_path: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database(harness_database_kind(), tmp_path))
        clock = ManualClock(MONDAY - timedelta(hours=1))
        # The first process fires on Monday, then stops.
        async with scheduled(tmp_path, deps_report(), clock=clock, database_url=url) as bot:
            bot.harness.llm.script(Reply(text="first"))
            await bot.at(MONDAY)
            (first,) = bot.announcements()
        # Three Mondays pass while no process runs; the next one looks on the Tuesday.
        async with scheduled(
            tmp_path / "again", deps_report(), clock=clock, database_url=url
        ) as bot:
            # (The channel is Slack's: its messages go on after the first process's.)
            bot.harness.slack.add_message(CHANNEL, first["text"], BOT, ts=first["ts"])
            bot.harness.llm.script(Reply(text="caught up"))
            await bot.at(MONDAY + 3 * WEEK + timedelta(days=1))
            (_, announcement) = bot.announcements()
            assert announcement["text"].endswith(" · missed 3 runs while down; ran once")
            await answered(bot, announcement["ts"], "caught up")
            assert len(bot.harness.main_requests()) == 1  # once, not a burst
            fires = await bot.scheduler.store.recent_fires("deps-report")
            assert [(f.fire_at, f.missed) for f in fires] == [
                (MONDAY + 3 * WEEK, 2),  # stands for two more than its own
                (MONDAY, 0),
            ]
            # And the week after, on time again: no note.
            bot.harness.llm.script(Reply(text="weekly"))
            await bot.at(MONDAY + 4 * WEEK)
            latest = bot.announcements()[-1]
            assert "missed" not in latest["text"]


async def test_one_fire_time_missed_by_hours_says_so(tmp_path: Path) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        bot.harness.llm.script(Reply(text="late"))
        # Nothing looked at 09:00 (Baton was down); at 11:00 it runs once, saying so.
        await bot.at(MONDAY + timedelta(hours=2))
        (announcement,) = bot.announcements()
        assert announcement["text"].endswith(" · missed 1 run while down; ran once")


# ---------------------------------------------------------------------- replicas


async def test_two_replicas_fire_each_fire_time_once(tmp_path: Path) -> None:
    """Two processes on one PostgreSQL database, on the same clock, both looking at
    every fire time (their loops and the test's ticks at once): one fires each."""
    every_quarter = deps_report(cron="*/15 * * * *")
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database("postgresql", tmp_path))
        clock = ManualClock(MONDAY - timedelta(minutes=1))
        bots = [
            await stack.enter_async_context(
                scheduled(tmp_path / name, every_quarter, clock=clock, database_url=url)
            )
            for name in ("a", "b")
        ]
        assert bots[0].harness.baton.instances.id != bots[1].harness.baton.instances.id
        # One Slack: the second fake's messages come after the first's, never with its ts.
        bots[1].harness.slack.add_message("C0ELSE", "later", ALICE, ts="1900000000.000000")
        for bot in bots:
            bot.harness.llm.responder = lambda _request: Reply(text="checked")
        await clock.sleeping(2)
        times = [MONDAY + timedelta(minutes=15 * n) for n in range(3)]
        for at in times:
            clock.set(at)
            await asyncio.gather(*(bot.scheduler.tick() for bot in bots for _ in range(3)))
            await clock.sleeping(2)
            for bot in bots:
                await bot.harness.settle()
        posted = [a for bot in bots for a in bot.announcements()]
        assert len(posted) == len(times)
        fires = await bots[0].scheduler.store.recent_fires("deps-report", limit=10)
        assert sorted(f.fire_at for f in fires) == times
        assert {f.message_ts for f in fires} == {a["ts"] for a in posted}
        runs = [r for bot in bots for r in await RunStore(bot.harness.baton.database).triggered()]
        # One database: each replica sees every run, three in all.
        assert len({r.id for r in runs}) == len(times)


# ----------------------------------------------------------------------- failures


async def test_three_failed_runs_in_a_row_pause_the_schedule_and_tell_its_owner_once(
    tmp_path: Path,
) -> None:
    async with scheduled(tmp_path, deps_report(owner=BOB)) as bot:
        failure = ErrorReply(status=400, message="bad request", error_type="invalid_request")
        # Two failures, then a success: the count starts again.
        for week, reply in enumerate((failure, failure, Reply(text="fine"))):
            bot.harness.llm.script(reply)
            await bot.at(MONDAY + week * WEEK)
        (info,) = await bot.scheduler.listing()
        assert (info.failures, info.paused) == (0, False)
        # Three failures in a row: paused, and Bob (its owner) is told once.
        for week in (3, 4, 5):
            bot.harness.llm.script(failure)
            await bot.at(MONDAY + week * WEEK)
        (info,) = await bot.scheduler.listing()
        assert (info.paused, info.paused_by, info.failures) == (True, "failures", 3)
        assert info.next_fire is None
        (told,) = bot.direct_messages(BOB)
        assert "paused your schedule *deps-report*" in told
        assert f"last 3 runs in <#{CHANNEL}> failed" in told
        assert "(the last one: Failed)" in told and "/tasks schedules" in told
        assert bot.direct_messages(ALICE) == []
        # Paused: the next Monday fires nothing.
        await bot.at(MONDAY + 6 * WEEK)
        assert len(bot.announcements()) == 6
        fires = await bot.scheduler.store.recent_fires("deps-report", limit=10)
        outcomes = [f.outcome for f in fires]
        assert outcomes == ["failed", "failed", "failed", "done", "failed", "failed"]
        assert bot.harness.llm.remaining == 0


async def test_runs_refused_for_their_owner_count_as_failures(tmp_path: Path) -> None:
    # Bob, the owner, may no longer start runs: each fire is refused in its thread.
    async with scheduled(
        tmp_path, deps_report(owner=BOB), access=AccessConfig(users=(ALICE,))
    ) as bot:
        for week in range(3):
            await bot.at(MONDAY + week * WEEK)
        assert len(bot.announcements()) == 3
        assert bot.harness.main_requests() == []
        (info,) = await bot.scheduler.listing()
        assert (info.paused, info.paused_by) == (True, "failures")
        (told,) = bot.direct_messages(BOB)
        assert "(the last one: Not started: whom it runs for may not start runs)" in told
        outcomes = {f.outcome for f in await bot.scheduler.store.recent_fires("deps-report")}
        assert outcomes == {"refused"}


async def test_a_fire_that_cannot_post_counts_as_a_failure(tmp_path: Path) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        bot.harness.slack.fail_next("chat.postMessage", error="not_in_channel", times=3)
        for week in range(3):
            await bot.at(MONDAY + week * WEEK)
        assert bot.announcements() == []
        (info,) = await bot.scheduler.listing()
        assert (info.paused, info.paused_by, info.failures) == (True, "failures", 3)
        (told,) = bot.direct_messages(ALICE)
        assert f"I could not post its run in <#{CHANNEL}> (not_in_channel)" in told
        fires = await bot.scheduler.store.recent_fires("deps-report")
        assert [(f.outcome, f.message_ts) for f in fires] == [("not_posted", None)] * 3


async def test_a_cancelled_run_neither_fails_nor_succeeds(tmp_path: Path) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        failure = ErrorReply(status=400, message="bad request", error_type="invalid_request")
        for week in range(2):
            bot.harness.llm.script(failure)
            await bot.at(MONDAY + week * WEEK)
        # A cancelled run's end (the turn machine reports it so) leaves the count be.
        last = bot.announcements()[-1]["ts"]
        await bot.scheduler.ended(
            TriggerEnd(
                trigger="schedule:deps-report",
                run_id=None,
                where=Where(CHANNEL, last),
                end=RunEnd(outcome=RunOutcome.CANCELLED),
            )
        )
        (info,) = await bot.scheduler.listing()
        assert (info.failures, info.paused) == (2, False)


# ------------------------------------------------------------------- management


async def test_pause_resume_and_delete(tmp_path: Path) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        scheduler = bot.scheduler
        made = await scheduler.create(
            name="standup-notes",
            cron="30 8 * * 1-5",
            timezone="UTC",
            channel_id="C0TEAM",
            prompt="Summarise yesterday's merged pull requests",
            agent="",
            owner=BOB,
            by=BOB,
        )
        assert made is None
        listed = {(i.name, i.source): i for i in await scheduler.listing()}
        assert set(listed) == {("deps-report", "baton.yaml"), ("standup-notes", "slack")}
        standup = listed["standup-notes", "slack"]
        assert (standup.created_by, standup.owner, standup.channel_id) == (BOB, BOB, "C0TEAM")
        assert standup.next_fire == MONDAY + timedelta(minutes=30)
        assert [i.name for i in await scheduler.listing(channel_id="C0TEAM")] == ["standup-notes"]
        assert [i.name for i in await scheduler.listing(owner=ALICE)] == ["deps-report"]

        # Paused (baton.yaml's too: where it stands is in the database).
        assert await scheduler.pause("deps-report", by=ALICE) == "Paused *deps-report*."
        assert await scheduler.pause("deps-report", by=ALICE) == "*deps-report* is paused already."
        assert await scheduler.pause("standup-notes", by=BOB) == "Paused *standup-notes*."
        paused = {i.name: i for i in await scheduler.listing()}
        assert paused["deps-report"].paused_by == ALICE
        # Both fire times pass while paused: nothing runs.
        await bot.at(MONDAY + timedelta(hours=1))
        assert bot.announcements() == [] and bot.announcements("C0TEAM") == []
        # Resumed: the fire times that passed while paused do not run afterwards.
        said = await scheduler.resume("deps-report", by=ALICE)
        assert said.startswith("Resumed *deps-report*; it next runs <!date^")
        assert "2027-01-11 08:00 UTC" in said
        assert await scheduler.resume("deps-report", by=ALICE) == "*deps-report* is not paused."
        await scheduler.resume("standup-notes", by=BOB)
        await bot.at(MONDAY + timedelta(hours=2))
        assert bot.announcements() == [] and bot.announcements("C0TEAM") == []
        # The next fire time after the resume runs.
        bot.harness.llm.script(Reply(text="standup"))
        await bot.at(MONDAY + timedelta(days=1, minutes=30))
        assert len(bot.announcements("C0TEAM")) == 1

        # Deleted: a Slack-made one goes; baton.yaml's is changed in the file.
        assert await scheduler.delete("deps-report", by=ALICE) == (
            "*deps-report* is set in baton.yaml; change it there."
        )
        assert await scheduler.delete("standup-notes", by=BOB) == "Deleted *standup-notes*."
        assert await scheduler.delete("standup-notes", by=BOB) == (
            "There is no schedule *standup-notes*."
        )
        assert [i.name for i in await scheduler.listing()] == ["deps-report"]
        await bot.at(MONDAY + timedelta(days=2, minutes=30))
        assert len(bot.announcements("C0TEAM")) == 1
        # Names people typed are shown as text.
        assert await scheduler.pause("<!channel>", by=ALICE) == (
            "There is no schedule *&lt;!channel&gt;*."
        )


async def test_a_schedule_made_in_slack_fires_and_counts_from_its_making(
    tmp_path: Path,
) -> None:
    async with scheduled(tmp_path, start=MONDAY - timedelta(seconds=30)) as bot:
        made = await bot.scheduler.create(
            name="deps-report",
            cron=" 0  9 * * 1 ",
            timezone="Europe/Berlin",
            channel_id=CHANNEL,
            prompt="  Look for outdated packages <!channel>  ",
            agent="",
            owner=ALICE,
            by=BOB,
        )
        assert made is None
        bot.harness.llm.script(Reply(text="looked"))
        await bot.at(MONDAY)
        (announcement,) = bot.announcements()
        # The cron as read, and never the prompt, in the announcement.
        assert announcement["text"] == (
            "⏰ Scheduled run *deps-report* (`0 9 * * 1`, Europe/Berlin) for <@UALICE>"
        )
        assert "<!channel>" not in announcement["text"]
        (row,) = await bot.scheduler.store.made_in_slack()
        assert row.prompt == "Look for outdated packages <!channel>"


# ------------------------------------------------------------------- hostile, edge


async def test_a_slack_schedule_cannot_take_a_name_baton_yaml_uses(tmp_path: Path) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        said = await bot.scheduler.create(
            name="deps-report",
            cron="* * * * *",
            timezone="UTC",
            channel_id="C0EVIL",
            prompt="post every minute",
            agent="",
            owner=BOB,
            by=BOB,
        )
        assert said == (
            "The schedule was not made: baton.yaml has a schedule named *deps-report*; "
            "choose another name."
        )
        assert await bot.scheduler.store.made_in_slack() == []
        made = dict(
            cron="0 8 * * *", timezone="UTC", channel_id=CHANNEL, prompt="p", agent="", owner=BOB
        )
        assert await bot.scheduler.create(name="mine", by=BOB, **made) is None
        assert await bot.scheduler.create(name="mine", by=ALICE, **made) == (
            "The schedule was not made: a schedule named *mine* exists already."
        )


async def test_bad_fields_are_refused_in_one_sentence(tmp_path: Path) -> None:
    async with scheduled(tmp_path) as bot:
        good: dict[str, str] = {
            "name": "nightly",
            "cron": "0 3 * * *",
            "timezone": "Europe/Berlin",
            "channel_id": CHANNEL,
            "prompt": "Run the nightly checks",
            "agent": "",
            "owner": ALICE,
        }
        cases = {
            "cron": (
                "0 3 * *",
                "The schedule was not made: a cron expression has 5 fields (minute hour "
                "day-of-month month day-of-week), not 4.",
            ),
            "timezone": (
                "Mars/Olympus <!here>",
                "The schedule was not made: 'Mars/Olympus &lt;!here&gt;' is not a time zone "
                "name such as Europe/Berlin or UTC.",
            ),
            "name": ("Nightly Checks", "The schedule was not made: a name is 1 to 48"),
            "channel_id": ("#general", "The schedule was not made: the channel must be"),
            "prompt": ("   ", "The schedule was not made: the prompt is empty."),
            "agent": ("../../etc", "The schedule was not made: the agent must be"),
        }
        for field, (value, expected) in cases.items():
            said = await bot.scheduler.create(**{**good, field: value}, by=ALICE)
            assert said is not None and said.startswith(expected), (field, said)
        minute = await bot.scheduler.create(**{**good, "cron": "61 3 * * *"}, by=ALICE)
        assert minute is not None and minute.startswith(
            "The schedule was not made: not a cron expression cron reads"
        )
        assert await bot.scheduler.store.made_in_slack() == []
        assert await bot.scheduler.listing() == []


async def test_baton_yaml_taking_a_slack_schedules_name_shadows_it(tmp_path: Path) -> None:
    path = tmp_path / "baton.yaml"
    path.write_text("schedules: []\n")
    async with scheduled(tmp_path, config_path=path) as bot:
        made = await bot.scheduler.create(
            name="deps-report", cron="0 9 * * *", timezone="UTC", channel_id="C0MINE",
            prompt="my own report", agent="", owner=BOB, by=BOB,
        )  # fmt: skip
        assert made is None
        # The operator adds a schedule of that name to baton.yaml.
        path.write_text(yaml_of(deps_report()))
        assert bot.harness.surface.triggers.reload().added == ("schedule deps-report",)
        await bot.scheduler.tick()  # it counts from now (the loop looks too, at once)
        listed = await bot.scheduler.listing()
        assert [(i.name, i.source, i.shadowed) for i in listed] == [
            ("deps-report", "baton.yaml", False),
            ("deps-report", "slack", True),
        ]
        assert listed[1].next_fire is None
        bot.harness.llm.script(Reply(text="from the file"))
        await bot.at(MONDAY)
        await bot.at(MONDAY + timedelta(hours=1, minutes=1))  # the Slack one's 09:00 UTC
        # baton.yaml's fired; the shadowed one did not.
        assert len(bot.announcements()) == 1
        assert bot.announcements("C0MINE") == []
        # Deleting the shadowed one leaves baton.yaml's alone.
        assert await bot.scheduler.delete("deps-report", by=BOB) == (
            "Deleted *deps-report* made in Slack; the one in baton.yaml goes on."
        )
        assert [(i.source, i.last_fire) for i in await bot.scheduler.listing()] == [
            ("baton.yaml", MONDAY)
        ]


async def test_a_schedule_removed_by_a_reload_stops_at_once(tmp_path: Path) -> None:
    path = tmp_path / "baton.yaml"
    other = deps_report(name="weekly-digest", channel="C0DIGEST")
    path.write_text(yaml_of(deps_report(), other))
    async with scheduled(tmp_path, deps_report(), other, config_path=path) as bot:
        path.write_text(yaml_of(other))
        assert bot.harness.surface.triggers.reload().removed == ("schedule deps-report",)
        bot.harness.llm.script(Reply(text="digest"))
        await bot.at(MONDAY)
        assert bot.announcements() == []
        assert len(bot.announcements("C0DIGEST")) == 1
        assert [i.name for i in await bot.scheduler.listing()] == ["weekly-digest"]


async def test_nothing_fires_or_is_claimed_while_the_turn_machine_takes_no_work(
    tmp_path: Path,
) -> None:
    async with scheduled(tmp_path, deps_report()) as bot:
        await bot.harness.surface.turns.drain(0)
        await bot.at(MONDAY)
        assert bot.announcements() == []
        assert await bot.scheduler.store.recent_fires("deps-report") == []


async def test_a_broken_row_keeps_no_other_schedule_from_firing(tmp_path: Path) -> None:
    """A Slack-made row edited by hand into nonsense: logged, and the rest fire."""
    async with scheduled(tmp_path, deps_report()) as bot:
        async with bot.harness.baton.database.sessions() as session:
            session.add(
                ScheduleRow(
                    name="broken", cron="not a cron", timezone="UTC", channel_id=CHANNEL,
                    prompt="x", agent="", owner=ALICE, created_by=ALICE,
                )
            )  # fmt: skip
            await session.commit()
        bot.harness.llm.script(Reply(text="still here"))
        await bot.at(MONDAY)
        assert len(bot.announcements()) == 1
        names = [i.name for i in await bot.scheduler.listing()]
        assert names == ["broken", "deps-report"]


def yaml_of(*schedules: ScheduleConfig) -> str:
    """baton.yaml with `schedules` (JSON is YAML)."""
    return json.dumps({"schedules": [s.model_dump() for s in schedules]})
