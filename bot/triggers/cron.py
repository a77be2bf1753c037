"""Fire times of a cron expression in a time zone, computed by cronsim.

cronsim follows Debian cron across daylight-saving changes: a job at a time the spring
change skips runs when the clock jumps (02:30 runs at 03:00), a job at a fixed time the
autumn change repeats runs once, and a job on every hour runs in both repeated hours.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

# Fire times counted at most, after downtime (a schedule every minute, down for a year).
COUNT_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A 5-field cron expression read in `timezone` (an IANA name)."""

    cron: str
    timezone: str

    @property
    def key(self) -> str:
        """What a schedule's state remembers: fire times counted with another spec are
        not this one's."""
        return f"{self.cron} @ {self.timezone}"

    def after(self, moment: datetime) -> Iterator[datetime]:
        """The fire times strictly after `moment` (aware), in order, as aware UTC times."""
        zone = ZoneInfo(self.timezone)
        local = moment.astimezone(zone).replace(microsecond=0)
        for fire in CronSim(self.cron, local):
            # cronsim's times are aware in the schedule's zone: compare them as UTC.
            at = fire.astimezone(UTC)
            if at > moment:
                yield at

    def next_after(self, moment: datetime) -> datetime:
        return next(self.after(moment))

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last fire time at or before `moment`, as aware UTC."""
        zone = ZoneInfo(self.timezone)
        # cronsim's reverse iteration gives times strictly before its start.
        local = (moment + timedelta(seconds=1)).astimezone(zone).replace(microsecond=0)
        latest: datetime | None = None
        for fire in CronSim(self.cron, local, reverse=True):
            at = fire.astimezone(UTC)
            if at <= moment:
                latest = at
                break
        if latest is None:
            return None
        # Reverse iteration walks back in wall-clock time: in the hour an autumn change
        # repeats, a fire of the first pass (02:30 CEST) reads as later than a moment of
        # the second (02:05 CET), and is passed over. Forward iteration counts right.
        for at in self.after(latest):
            if at > moment:
                break
            latest = at
        return latest

    def due(self, since: datetime, now: datetime) -> Due | None:
        """The fire times in (`since`, `now`]: the newest, and how many there are
        (counted up to `COUNT_LIMIT`); None when there is none."""
        latest = self.latest_at_or_before(now)
        if latest is None or latest <= since:
            return None
        count = 0
        for at in self.after(since):
            if at > latest or count >= COUNT_LIMIT:
                break
            count += 1
        return Due(latest=latest, count=count, more=count >= COUNT_LIMIT)


@dataclass(frozen=True, slots=True)
class Due:
    """Fire times that came: the newest, and how many (`more`: at least `count`)."""

    latest: datetime
    count: int
    more: bool = False
