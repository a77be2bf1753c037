"""Schedules: each fire time fires once across every replica.

The schedules are baton.yaml's (as the trigger book holds them now: a reload adds,
changes and removes them at once) and those made from Slack (rows in `schedules`). A
Slack-made schedule whose name baton.yaml uses is shadowed: baton.yaml's wins, and the
Slack one is listed but does not fire. Where each schedule stands (paused, its failures
in a row, the fire times it counts from) is kept by name in the database, whichever
made it, and shared by the replicas.

A fire time is claimed by inserting its row (a schedule and fire time are unique), so
whichever replica claims it fires it, once. Every fire time is computed with one clock
(`Clock`), which tests drive. After downtime the fire times that passed run once, the
announcement saying how many were missed, never as a burst; a schedule seen for the
first time (or whose cron or time zone changed, or that was resumed) counts from then,
never running fire times of the past.

A run that fails (or is refused, or could not even be posted) counts toward three
failures in a row, which pause the schedule and tell its owner in a direct message; a
run that succeeds resets the count, and one cancelled or interrupted does not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError

from bot.describe import describe_end, outcome_words, plural
from bot.outcomes import RunOutcome
from bot.sessions.turns import TriggerEnd
from bot.store.schedules import ScheduleFire, ScheduleState, ScheduleStore, SlackSchedule
from bot.triggers.book import TriggerBook
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from bot.triggers.cron import CronSpec, Due
from bot.triggers.definitions import ScheduleConfig, TriggersConfig
from bot.triggers.launch import Launch, Launcher, trigger_key

logger = logging.getLogger(__name__)

# Tell a person something in a direct message from Baton (its owner, of a paused schedule).
TellOwner = Callable[[str, str], Awaitable[None]]

# The longest `run` sleeps between two looks: reloads and Slack-made schedules are seen
# within it even when no fire time is near.
POLL_S = 5.0
# Failed runs in a row that pause a schedule.
FAILURES_TO_PAUSE = 3
# A single fire time run later than this after its time was missed while Baton was
# down (a tick is normally late by a fraction of a second).
LATE_S = 60.0
# How much of a failed run's error its owner's message quotes.
WHY_CHARS = 200
# What a fire's outcome says when its announcement could not be posted (nothing ran).
NOT_POSTED = "not_posted"

_FAILED = frozenset({RunOutcome.FAILED, RunOutcome.REFUSED, RunOutcome.BUDGET, RunOutcome.FILTERED})
_SUCCEEDED = frozenset({RunOutcome.DONE, RunOutcome.TURN_LIMIT, RunOutcome.CUT})
# What a Slack-made schedule's fields are called in a refusal.
_FIELD_RULES = {
    "name": (
        "a name is 1 to 48 lowercase letters, digits, '.', '_' or '-', starting with a "
        "letter or digit (such as deps-report)"
    ),
    "channel": "the channel must be a channel ID such as C0123ABCDEF",
    "owner": "the owner must be a user ID such as U012ABCDEF",
    "agent": "the agent must be an agent's name such as reviewer, or empty for Baton itself",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleInfo:
    """A schedule as people see it listed."""

    name: str
    cron: str
    timezone: str
    channel_id: str
    prompt: str
    agent: str
    owner: str
    source: Literal["baton.yaml", "slack"]
    created_by: str | None
    paused: bool
    paused_by: str | None  # a user id, or "failures"
    failures: int
    next_fire: datetime | None  # None while paused or shadowed: it does not fire
    last_fire: datetime | None
    shadowed: bool = False  # a Slack-made schedule whose name baton.yaml now uses


@dataclass(frozen=True, slots=True, kw_only=True)
class _Schedule:
    """One schedule, whichever made it."""

    name: str
    spec: CronSpec
    channel_id: str
    prompt: str
    agent: str
    owner: str
    source: Literal["baton.yaml", "slack"]
    created_by: str | None

    @classmethod
    def of_file(cls, config: ScheduleConfig) -> _Schedule:
        return cls(
            name=config.name,
            spec=CronSpec(config.cron, config.timezone),
            channel_id=config.channel,
            prompt=config.prompt,
            agent=config.agent,
            owner=config.owner,
            source="baton.yaml",
            created_by=None,
        )

    @classmethod
    def of_slack(cls, row: SlackSchedule) -> _Schedule:
        return cls(
            name=row.name,
            spec=CronSpec(row.cron, row.timezone),
            channel_id=row.channel_id,
            prompt=row.prompt,
            agent=row.agent,
            owner=row.owner,
            source="slack",
            created_by=row.created_by,
        )


@dataclass(frozen=True, slots=True)
class _Schedules:
    """The schedules now: those that fire (baton.yaml's first), and the shadowed ones."""

    live: list[_Schedule]
    shadowed: list[_Schedule]

    def named(self, name: str) -> _Schedule | None:
        return next((s for s in self.live if s.name == name), None)


class Scheduler:
    """Fires the schedules of baton.yaml and Slack."""

    def __init__(
        self,
        *,
        book: TriggerBook,
        store: ScheduleStore,
        launcher: Launcher,
        instance_id: str,
        tell_owner: TellOwner,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.book = book
        self.store = store
        self.launcher = launcher
        self.instance_id = instance_id
        self.tell_owner = tell_owner
        self.clock = clock
        # Set when the schedules changed (a reload, a schedule made here): `run` looks
        # at once, so a schedule added just before its fire time counts from before it.
        self._changed = asyncio.Event()
        book.on_reload(self._reloaded)

    # ------------------------------------------------------------------ firing

    async def tick(self) -> None:
        """Fire every schedule that is due at the clock's now (each fire time once
        across the replicas); nothing while the turn machine takes no work."""
        await self._tick()

    async def run(self) -> None:
        """Tick, then sleep until the next fire time (at most `POLL_S`), for ever; an
        error is logged and the loop goes on."""
        while True:
            self._changed.clear()
            try:
                upcoming = await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("the scheduler could not fire its schedules")
                upcoming = None
            wait = POLL_S
            if upcoming is not None:
                wait = min(wait, max(0.0, (upcoming - self.clock.now()).total_seconds()))
            await self._rest(wait)

    async def _rest(self, seconds: float) -> None:
        """Sleep `seconds` of the clock's time, or until the schedules change."""
        sleeping = asyncio.ensure_future(self.clock.sleep(seconds))
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({sleeping, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (sleeping, changed):
                waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(sleeping, changed, return_exceptions=True)

    def _reloaded(self, _triggers: TriggersConfig) -> None:
        self._changed.set()

    async def _tick(self) -> datetime | None:
        """Fire what is due; the next fire time of the schedules that run (None: none)."""
        if not self.launcher.turns.accepting:
            return None
        now = self.clock.now()
        schedules = (await self._schedules()).live
        if not schedules:
            return None
        states = await self.store.states([s.name for s in schedules])
        upcoming: datetime | None = None
        for schedule in schedules:
            if not self.launcher.turns.accepting:
                return None
            try:
                at = await self._tick_one(schedule, states.get(schedule.name), now)
            except Exception:
                # One schedule's trouble (a row edited by hand) keeps no other from firing.
                logger.exception("schedule %s could not fire", schedule.name)
                continue
            if at is not None:
                upcoming = at if upcoming is None else min(upcoming, at)
        return upcoming

    async def _tick_one(
        self, schedule: _Schedule, state: ScheduleState | None, now: datetime
    ) -> datetime | None:
        """Fire one schedule if it is due; its next fire time (None while paused)."""
        if state is None or state.spec != schedule.spec.key:
            state = await self.store.ensure(schedule.name, schedule.spec.key, now=now)
        if state.paused:
            return None
        await self._fire_due(schedule, state, now)
        return schedule.spec.next_after(now)

    async def _fire_due(self, schedule: _Schedule, state: ScheduleState, now: datetime) -> None:
        """Claim and fire the latest fire time that came since the last one claimed."""
        since = max(state.since, state.last_fire_at or state.since)
        due = schedule.spec.due(since, now)
        if due is None:
            return
        fire = await self.store.claim(
            schedule.name, due.latest, missed=due.count - 1, instance=self.instance_id
        )
        # Whoever claimed it, the fire times up to it are spent.
        await self.store.advance(schedule.name, due.latest)
        if fire is None:
            return  # another replica fires it
        await self._launch(schedule, fire, due, now)

    async def _launch(
        self, schedule: _Schedule, fire: ScheduleFire, due: Due, now: datetime
    ) -> None:
        launch = Launch(
            trigger=trigger_key("schedule", schedule.name),
            channel_id=schedule.channel_id,
            owner=schedule.owner,
            prompt=schedule.prompt,
            agent=schedule.agent,
            announcement=announcement(schedule, due, now),
        )
        try:
            stored = await self.launcher.store(launch)
        except Exception as exc:
            logger.exception("schedule %s could not start its run", schedule.name)
            await self.store.fired(fire.id, outcome=NOT_POSTED)
            why = f"I could not post its run in <#{schedule.channel_id}> ({_reason(exc)})"
            await self._count(schedule.name, failed=True, why=why)
            return
        try:
            # Before the run starts: a refusal's end finds its fire by this message.
            await self.store.fired(fire.id, message_ts=stored.ts)
        finally:
            if stored.message is not None:
                self.launcher.start(stored.message)
            else:
                logger.warning("schedule %s posted, but the run was not taken", schedule.name)

    # -------------------------------------------------------------- run endings

    async def ended(self, end: TriggerEnd) -> None:
        """A run a schedule started ended (or was refused): recorded on its fire; a
        failure counts toward the pause, a success resets the count."""
        kind, _, name = end.trigger.partition(":")
        if kind != "schedule" or not name:
            return
        outcome = end.end.outcome
        fire = await self.store.fire_of(name, end.where.thread_ts)
        if fire is not None:
            await self.store.fired(fire.id, run_id=end.run_id, outcome=outcome.value)
        if outcome in _FAILED:
            await self._count(name, failed=True, why=f"the last one: {_ended(end)}")
        elif outcome in _SUCCEEDED:
            await self._count(name, failed=False, why="")

    async def _count(self, name: str, *, failed: bool, why: str) -> None:
        """Count a run's end; the failure that makes `FAILURES_TO_PAUSE` in a row pauses
        the schedule and tells its owner (once: one replica's pause is the one)."""
        schedule = (await self._schedules()).named(name)
        if schedule is None:
            return  # removed meanwhile: nothing to pause
        state = (await self.store.states([name])).get(name)
        if state is not None and state.paused:
            return  # a run that ended after the pause: the count stays what paused it
        failures = await self.store.record_outcome(name, failed=failed)
        if not failed or failures < FAILURES_TO_PAUSE:
            return
        if not await self.store.pause(name, by="failures", now=self.clock.now()):
            return  # paused already (by a person, or another replica counted first)
        logger.warning("schedule %s paused after %d failures in a row", name, failures)
        text = (
            f"⏸ I paused your schedule *{name}*: its last {plural(failures, 'run')} in "
            f"<#{schedule.channel_id}> failed ({why}). Once that is fixed, resume it "
            "with `/tasks schedules`."
        )
        try:
            await self.tell_owner(schedule.owner, text)
        except Exception:
            logger.exception("could not tell %s that schedule %s paused", schedule.owner, name)

    # -------------------------------------------------------------- management

    async def listing(
        self, *, channel_id: str | None = None, owner: str | None = None
    ) -> list[ScheduleInfo]:
        """Every schedule (shadowed ones too), by name: of one channel, of one owner."""
        schedules = await self._schedules()

        def wanted(schedule: _Schedule) -> bool:
            return (channel_id is None or schedule.channel_id == channel_id) and (
                owner is None or schedule.owner == owner
            )

        live = [s for s in schedules.live if wanted(s)]
        shadowed = [s for s in schedules.shadowed if wanted(s)]
        names = [s.name for s in live]
        states = await self.store.states(names) if names else {}
        latest = await self.store.latest_fires(names) if names else {}
        now = self.clock.now()
        infos = [self._info(s, states.get(s.name), latest.get(s.name), now) for s in live]
        infos += [self._info(s, None, None, now, shadowed=True) for s in shadowed]
        return sorted(infos, key=lambda info: (info.name, info.source != "baton.yaml"))

    @staticmethod
    def _info(
        schedule: _Schedule,
        state: ScheduleState | None,
        last_fire: datetime | None,
        now: datetime,
        *,
        shadowed: bool = False,
    ) -> ScheduleInfo:
        paused = state is not None and state.paused
        next_fire = None
        if not (paused or shadowed):
            try:
                next_fire = schedule.spec.next_after(now)
            except Exception:
                logger.exception("schedule %s has no fire times", schedule.name)
        return ScheduleInfo(
            name=schedule.name,
            cron=schedule.spec.cron,
            timezone=schedule.spec.timezone,
            channel_id=schedule.channel_id,
            prompt=schedule.prompt,
            agent=schedule.agent,
            owner=schedule.owner,
            source=schedule.source,
            created_by=schedule.created_by,
            paused=paused,
            paused_by=state.paused_by if state is not None and paused else None,
            failures=state.failures if state is not None else 0,
            next_fire=next_fire,
            last_fire=last_fire,
            shadowed=shadowed,
        )

    async def create(
        self,
        *,
        name: str,
        cron: str,
        timezone: str,
        channel_id: str,
        prompt: str,
        agent: str,
        owner: str,
        by: str,
    ) -> str | None:
        """Make a schedule from Slack; None when made, else why not, in one sentence
        (checked as baton.yaml's are; a name baton.yaml uses is refused). It counts its
        fire times from now."""
        try:
            config = ScheduleConfig(
                name=name.strip(),
                cron=cron,
                timezone=timezone.strip(),
                channel=channel_id,
                prompt=prompt.strip(),
                agent=agent.strip(),
                owner=owner,
            )
        except ValidationError as exc:
            return f"The schedule was not made: {_first_error(exc)}."
        if self.book.triggers.schedule(config.name) is not None:
            return (
                f"The schedule was not made: baton.yaml has a schedule named *{config.name}*; "
                "choose another name."
            )
        made = await self.store.create(
            name=config.name,
            cron=config.cron,
            timezone=config.timezone,
            channel_id=config.channel,
            prompt=config.prompt,
            agent=config.agent,
            owner=config.owner,
            created_by=by,
        )
        if made is None:
            return f"The schedule was not made: a schedule named *{config.name}* exists already."
        # What a schedule of this name left behind (one removed from baton.yaml, paused
        # or failing) is not this one's: it starts afresh, counting from now.
        await self.store.forget(config.name)
        spec = CronSpec(config.cron, config.timezone)
        await self.store.ensure(config.name, spec.key, now=self.clock.now())
        self._changed.set()
        logger.info("schedule %s made in Slack by %s", config.name, by)
        return None

    async def pause(self, name: str, *, by: str) -> str:
        """Pause a schedule (baton.yaml's too: where it stands is in the database)."""
        schedule = (await self._schedules()).named(name)
        if schedule is None:
            return _no_such(name)
        await self.store.ensure(name, schedule.spec.key, now=self.clock.now())
        if not await self.store.pause(name, by=by, now=self.clock.now()):
            return f"*{name}* is paused already."
        logger.info("schedule %s paused by %s", name, by)
        return f"Paused *{name}*."

    async def resume(self, name: str, *, by: str) -> str:
        """Resume a paused schedule: the fire times that passed while it was paused do
        not run, and its failures are forgotten."""
        schedule = (await self._schedules()).named(name)
        if schedule is None:
            return _no_such(name)
        now = self.clock.now()
        await self.store.ensure(name, schedule.spec.key, now=now)
        if not await self.store.resume(name, now=now):
            return f"*{name}* is not paused."
        self._changed.set()
        logger.info("schedule %s resumed by %s", name, by)
        return f"Resumed *{name}*; it next runs {slack_date(schedule.spec.next_after(now))}."

    async def delete(self, name: str, *, by: str) -> str:
        """Delete a Slack-made schedule; baton.yaml's are changed in the file."""
        in_file = self.book.triggers.schedule(name) is not None
        made = await self.store.get(name)
        if made is None:
            if in_file:
                return f"*{name}* is set in baton.yaml; change it there."
            return _no_such(name)
        if in_file:
            # Shadowed: where the name stands is baton.yaml's schedule's now.
            await self.store.delete_made_in_slack(name)
            logger.info("shadowed schedule %s deleted by %s", name, by)
            return f"Deleted *{name}* made in Slack; the one in baton.yaml goes on."
        if not await self.store.delete(name):
            return _no_such(name)
        logger.info("schedule %s deleted by %s", name, by)
        return f"Deleted *{name}*."

    async def _schedules(self) -> _Schedules:
        in_file = [_Schedule.of_file(config) for config in self.book.triggers.schedules]
        names = {s.name for s in in_file}
        live, shadowed = list(in_file), []
        for row in await self.store.made_in_slack():
            (shadowed if row.name in names else live).append(_Schedule.of_slack(row))
        return _Schedules(live, shadowed)


def announcement(schedule: _Schedule, due: Due, now: datetime) -> str:
    """The top-level message a fire posts (mrkdwn): what runs, for whom, and the fire
    times missed while Baton was down. Only checked fields go in (a name, a cron
    expression and a time zone Baton read, IDs): never the prompt."""
    text = (
        f"⏰ Scheduled run *{schedule.name}* (`{schedule.spec.cron}`, {schedule.spec.timezone}) "
        f"for <@{schedule.owner}>"
    )
    if schedule.agent:
        text += f" by agent *{schedule.agent}*"
    if note := missed_note(due, now):
        text += f" · {note}"
    return text


def missed_note(due: Due, now: datetime) -> str | None:
    """ "missed 3 runs while down; ran once", when the fire times were missed (several,
    or one that is long past); None for a fire on time."""
    late = (now - due.latest).total_seconds() > LATE_S
    if due.count <= 1 and not late:
        return None
    count = f"{due.count:,}+ runs" if due.more else plural(due.count, "run")
    return f"missed {count} while down; ran once"


def _first_error(exc: ValidationError) -> str:
    """The first thing wrong with a schedule's fields, in words people read."""
    error = exc.errors()[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    kind = error["type"]
    if kind == "value_error":
        ctx = error.get("ctx") or {}
        detail = str(ctx.get("error") or error["msg"].removeprefix("Value error, "))
    elif kind == "string_pattern_mismatch" and field in _FIELD_RULES:
        detail = _FIELD_RULES[field]
    elif kind == "string_too_short" and field == "prompt":
        detail = "the prompt is empty"
    elif kind == "string_too_long":
        limit = (error.get("ctx") or {}).get("max_length")
        detail = f"the {field} is longer than {limit:,} characters" if limit else error["msg"]
    elif kind == "missing":
        detail = f"the {field} is missing"
    else:
        detail = f"the {field}: {error['msg']}"
    return _escape(detail.rstrip("."))


def _ended(end: TriggerEnd) -> str:
    """How a failed run ended, in a few words ("Not started: the daily token budget is
    spent"); its error is the provider's or a tool's text, shortened and escaped."""
    words = outcome_words(end.end.outcome)
    if end.end.cause is not None:
        words = describe_end(end.end).removeprefix("✗").strip() or words
    if len(words) > WHY_CHARS:
        words = words[: WHY_CHARS - 1] + "…"
    return _escape(words)


def _no_such(name: str) -> str:
    return f"There is no schedule *{_escape(name)}*."


def _reason(exc: Exception) -> str:
    """A short reason for an error: Slack's error code when Slack refused."""
    response = getattr(exc, "response", None)
    if response is not None:
        with contextlib.suppress(Exception):
            if code := response.get("error"):
                return _escape(str(code))
    return type(exc).__name__


def slack_date(when: datetime) -> str:
    """A time as Slack shows it in the reader's own zone, with UTC as the fallback."""
    moment = when.astimezone(UTC)
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _escape(text: str) -> str:
    """Text shown in mrkdwn as written: no mention, link or channel ping."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
