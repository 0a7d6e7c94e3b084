"""Daylight saving time in a schedule's zone neither skips nor doubles a nightly run (docs/schedules.md,
"How schedules fire"): Europe/Berlin across the March and October 2026 changes, ticked by a manual clock
every few minutes (every minute on the night of the change, and at each ``next_fire_at``)."""

from __future__ import annotations

import collections
import datetime as dt
import zoneinfo
from pathlib import Path
from typing import Any

import builders
import pytest
from sqlalchemy import select

from api.runs.skills import SkillResolver
from api.schedules.scheduler import fire_due
from store.clock import ManualClock
from store.models import Run, Schedule

UTC = dt.UTC
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


async def tick_through(
    sessions: Any, clock: ManualClock, resolver: SkillResolver, until: dt.datetime, night: dt.date
) -> None:
    """Tick from the clock's now to ``until``: every 10 minutes, every minute on ``night`` (its local
    hours 00:00-04:00), and at each schedule's next_fire_at."""
    while clock.now() < until:
        now = clock.now()
        local = now.astimezone(BERLIN)
        step = dt.timedelta(minutes=1 if local.date() == night and local.hour < 4 else 10)
        async with sessions() as s:
            upcoming = (await s.execute(select(Schedule.next_fire_at))).scalars()
            target = min([now + step, *(t for t in upcoming if t is not None and t > now)])
        clock.advance((target - now).total_seconds())
        await fire_due(sessions, clock, resolver)


@pytest.mark.parametrize(
    ("night", "nightly_utc", "hours_that_day"),
    [
        # 02:00 CET jumps to 03:00 CEST: 02:30 does not exist and fires once, at the jump (01:00 UTC).
        (dt.date(2026, 3, 29), dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC), 23),
        # 03:00 CEST falls back to 02:00 CET: 02:30 happens twice and fires at the first (00:30 UTC).
        (dt.date(2026, 10, 25), dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC), 25),
    ],
    ids=["spring-forward", "fall-back"],
)
async def test_a_nightly_schedule_fires_once_a_day_across_a_dst_change(
    tmp_path: Path,
    team_id: str,
    sessions: Any,
    night: dt.date,
    nightly_utc: dt.datetime,
    hours_that_day: int,
) -> None:
    start = dt.datetime.combine(night - dt.timedelta(days=2), dt.time(12, 0), BERLIN).astimezone(UTC)
    until = dt.datetime.combine(night + dt.timedelta(days=3), dt.time(0, 0), BERLIN).astimezone(UTC)
    clock = ManualClock(start)
    resolver = SkillResolver(None, tmp_path / "skills-cache")
    async with sessions() as s, s.begin():
        nightly = await builders.schedule(
            s, clock, team_id, "nightly", "30 2 * * *", timezone="Europe/Berlin"
        )
        hourly = await builders.schedule(s, clock, team_id, "hourly", "0 * * * *", timezone="Europe/Berlin")

    await tick_through(sessions, clock, resolver, until, night)

    async with sessions() as s:
        runs = list((await s.execute(select(Run))).scalars())
    fire_times: dict[str, list[dt.datetime]] = collections.defaultdict(list)
    for run in runs:
        assert run.schedule is not None and run.schedule["fire_time"]
        fire_times[run.schedule_id or ""].append(dt.datetime.fromisoformat(run.schedule["fire_time"]))
    nightly_days = collections.Counter(t.astimezone(BERLIN).date() for t in fire_times[nightly.uid])
    # Fixed-hour: exactly one run on each local day, the change day included.
    assert nightly_days == {night + dt.timedelta(days=d): 1 for d in (-1, 0, 1, 2)}
    assert nightly_utc in fire_times[nightly.uid]
    others = [
        t.astimezone(BERLIN).time() for t in fire_times[nightly.uid] if t.astimezone(BERLIN).date() != night
    ]
    assert set(others) == {dt.time(2, 30)}
    # Wildcard hour follows elapsed time: one run per real hour (23 or 25 on the change day).
    hourly_days = collections.Counter(t.astimezone(BERLIN).date() for t in fire_times[hourly.uid])
    assert hourly_days[night] == hours_that_day
    assert len(set(fire_times[hourly.uid])) == len(fire_times[hourly.uid])
