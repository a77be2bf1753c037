"""Fire times of cron expressions in time zones, across daylight-saving changes.

2026's changes: Europe/Berlin springs forward on 29 March (02:00 CET → 03:00 CEST) and
falls back on 25 October (03:00 CEST → 02:00 CET); America/New_York on 8 March and 1
November. Expected times are written in UTC, with the local time beside them.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from bot.triggers.cron import COUNT_LIMIT, CronSpec, Due


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def fires(spec: CronSpec, start: datetime, count: int) -> list[datetime]:
    found = []
    for at in spec.after(start):
        found.append(at)
        if len(found) == count:
            return found
    return found


@pytest.mark.parametrize(
    ("cron", "timezone", "start", "expected"),
    [
        pytest.param(
            "30 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12),
            [
                utc(2026, 3, 28, 1, 30),  # 02:30 CET
                utc(2026, 3, 29, 1, 0),  # 02:30 does not exist: runs at 03:00 CEST
                utc(2026, 3, 30, 0, 30),  # 02:30 CEST
            ],
            id="daily-02:30-berlin-spring",
        ),
        pytest.param(
            "30 2 * * *", "Europe/Berlin", utc(2026, 10, 23, 12),
            [
                utc(2026, 10, 24, 0, 30),  # 02:30 CEST
                utc(2026, 10, 25, 0, 30),  # 02:30 comes twice: runs once, the first time
                utc(2026, 10, 26, 1, 30),  # 02:30 CET
            ],
            id="daily-02:30-berlin-autumn",
        ),
        pytest.param(
            "0 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 30),
            [
                utc(2026, 3, 29, 0, 0),  # 01:00 CET
                utc(2026, 3, 29, 1, 0),  # 03:00 CEST: no hour is lost in real time
                utc(2026, 3, 29, 2, 0),  # 04:00 CEST
            ],
            id="hourly-berlin-spring",
        ),
        pytest.param(
            "0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 30),
            [
                utc(2026, 10, 25, 0, 0),  # 02:00 CEST
                utc(2026, 10, 25, 1, 0),  # 02:00 CET: the repeated hour runs too
                utc(2026, 10, 25, 2, 0),  # 03:00 CET
            ],
            id="hourly-berlin-autumn",
        ),
        pytest.param(
            "0 9 * * 1", "Europe/Berlin", utc(2026, 10, 20),
            [
                utc(2026, 10, 26, 8, 0),  # Monday 09:00 CET
                utc(2026, 11, 2, 8, 0),
            ],
            id="weekly-monday-09:00-after-the-change",
        ),
        pytest.param(
            "30 2 * * *", "America/New_York", utc(2026, 3, 7, 12),
            [
                utc(2026, 3, 8, 7, 0),  # 02:30 does not exist: runs at 03:00 EDT
                utc(2026, 3, 9, 6, 30),  # 02:30 EDT
            ],
            id="daily-02:30-new-york-spring",
        ),
        pytest.param(
            "30 1 * * *", "America/New_York", utc(2026, 10, 31, 12),
            [
                utc(2026, 11, 1, 5, 30),  # 01:30 EDT; 01:30 EST the same night does not run
                utc(2026, 11, 2, 6, 30),  # 01:30 EST
            ],
            id="daily-01:30-new-york-autumn",
        ),
        pytest.param(
            "0 12 * * *", "UTC", utc(2026, 3, 28),
            [utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)],
            id="utc-has-no-changes",
        ),
    ],
)  # fmt: skip
def test_fire_times_across_daylight_saving_changes(
    cron: str, timezone: str, start: datetime, expected: list[datetime]
) -> None:
    spec = CronSpec(cron, timezone)
    assert fires(spec, start, len(expected)) == expected
    assert spec.next_after(start) == expected[0]
    # A fire time is not after itself: the next one follows it.
    for earlier, later in itertools.pairwise(expected):
        assert spec.next_after(earlier) == later
        assert spec.latest_at_or_before(later) == later
        assert spec.latest_at_or_before(later - timedelta(seconds=1)) == earlier


@pytest.mark.parametrize(
    ("cron", "timezone", "day"),
    [
        ("30 2 * * *", "Europe/Berlin", utc(2026, 3, 29)),
        ("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25)),
        ("15 2 * * *", "Europe/Berlin", utc(2026, 10, 25)),
        ("0 2 * * *", "Europe/Berlin", utc(2026, 10, 25)),
        ("0 * * * *", "Europe/Berlin", utc(2026, 3, 29)),
        ("0 * * * *", "Europe/Berlin", utc(2026, 10, 25)),
        ("*/20 * * * *", "Europe/Berlin", utc(2026, 10, 25)),
        ("30 2 * * *", "America/New_York", utc(2026, 3, 8)),
        ("30 1 * * *", "America/New_York", utc(2026, 11, 1)),
        ("0 * * * *", "America/New_York", utc(2026, 11, 1)),
    ],
)
def test_next_and_latest_agree_with_the_fire_times_at_every_moment_of_a_change_day(
    cron: str, timezone: str, day: datetime
) -> None:
    """From any moment of the change day (every five minutes, and a second either side
    of each fire time), the next fire time and the latest one at or before it are
    those of the day's fire times, counted from before the day. In the hour the autumn
    change repeats, a fire time of the first pass is the latest one from a moment of
    the second."""
    spec = CronSpec(cron, timezone)
    start, end = day - timedelta(days=1), day + timedelta(days=3)
    times = []
    for at in spec.after(start):
        if at > end:
            break
        times.append(at)
    moments = [day + timedelta(minutes=5 * step) for step in range(24 * 12)]
    moments += [at + timedelta(seconds=delta) for at in times for delta in (-1, 0, 1)]
    for moment in moments:
        if not times[0] <= moment <= day + timedelta(days=1):
            continue
        assert spec.next_after(moment) == next(at for at in times if at > moment), moment
        assert spec.latest_at_or_before(moment) == [at for at in times if at <= moment][-1], moment


def test_due_names_the_latest_fire_time_and_counts_those_since() -> None:
    spec = CronSpec("0 9 * * 1", "Europe/Berlin")  # Mondays 09:00
    monday = utc(2027, 1, 4, 8)  # 09:00 CET
    # Nothing since the last one.
    assert spec.due(monday, monday + timedelta(days=6)) is None
    # Three Mondays went by: the newest is due, standing for three.
    assert spec.due(monday, monday + timedelta(days=21, hours=3)) == Due(
        latest=monday + timedelta(days=21), count=3
    )
    # A fire time at the moment itself is due; one at `since` is not.
    assert spec.due(monday - timedelta(seconds=1), monday) == Due(latest=monday, count=1)
    assert spec.due(monday, monday) is None


def test_due_caps_its_count_after_a_very_long_downtime() -> None:
    spec = CronSpec("* * * * *", "UTC")
    since = utc(2026, 1, 1)
    due = spec.due(since, since + timedelta(days=30))
    assert due is not None
    assert due.latest == since + timedelta(days=30)
    assert (due.count, due.more) == (COUNT_LIMIT, True)


def test_due_across_the_autumn_change_counts_the_repeated_hour_once_for_a_daily_job() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin")
    due = spec.due(utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    assert due == Due(latest=utc(2026, 10, 26, 1, 30), count=2)
    hourly = CronSpec("0 * * * *", "Europe/Berlin")
    # 00:00 and 03:00 local on the 25th are 4 hours apart in real time: 02:00 twice.
    assert hourly.due(utc(2026, 10, 24, 22, 0), utc(2026, 10, 25, 2, 0)) == Due(
        latest=utc(2026, 10, 25, 2, 0), count=4
    )


def test_a_spec_key_names_its_cron_and_zone() -> None:
    assert CronSpec("0 9 * * 1", "Europe/Berlin").key == "0 9 * * 1 @ Europe/Berlin"
    assert CronSpec("0 9 * * 1", "UTC").key != CronSpec("0 9 * * 1", "Europe/Berlin").key
