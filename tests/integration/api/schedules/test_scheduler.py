"""The scheduler across replicas and as an app lifecycle (docs/schedules.md, "How schedules fire").

Two replicas are two apps, each with its own engine and session factory, on one database (an SQLite
file, or a PostgreSQL database where the fire-row insert is a real race between connections); they tick
concurrently, round after round, and every due fire must start exactly one run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import builders
import pytest
from aiohttp import web
from sqlalchemy import select

from api.app import ROUTE_MODULES, create_app
from api.context import CLOCK, SESSIONS, ServerSettings
from api.runs.claim_signal import claim_signal, wake_claimers
from api.runs.prepare import SKILLS
from api.schedules.firing import Fired
from api.schedules.scheduler import fire_due, schedule_scheduler
from store.clock import ManualClock
from store.crypto import SecretBox
from store.db import create_engine
from store.models import Run, ScheduleFire
from store.rules import cron

UTC = dt.UTC
START = dt.datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
EXPRESSIONS = ("* * * * *", "*/2 * * * *", "*/3 * * * *", "0,1,2 * * * *", "*/5 * * * *")


@pytest.fixture
async def replicas(
    db_url: str, api_settings: ServerSettings, box: SecretBox
) -> AsyncIterator[list[web.Application]]:
    """Two apps on the same database, each with its own engine and its own (manual) clock."""
    engines = [create_engine(db_url) for _ in range(2)]
    apps = [
        create_app(api_settings, e, box, clock=ManualClock(START), route_modules=ROUTE_MODULES)
        for e in engines
    ]
    yield apps
    for engine in engines:
        await engine.dispose()


def advance(apps: list[web.Application], seconds: float) -> None:
    for app in apps:
        clock = app[CLOCK]
        assert isinstance(clock, ManualClock)
        clock.advance(seconds)


async def tick(app: web.Application) -> list[Fired]:
    """What the app's scheduler does on each tick."""
    return await fire_due(app[SESSIONS], app[CLOCK], app[SKILLS], queued=lambda: wake_claimers(app))


async def make_schedules(app: web.Application, team_id: str, count: int) -> dict[str, str]:
    """``count`` schedules cycling through :data:`EXPRESSIONS`; uid -> expression."""
    made: dict[str, str] = {}
    async with app[SESSIONS]() as s, s.begin():
        for i in range(count):
            expression = EXPRESSIONS[i % len(EXPRESSIONS)]
            row = await builders.schedule(s, app[CLOCK], team_id, f"s{i}", expression)
            made[row.uid] = expression
    return made


def fire_times(expression: str, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
    """Every fire time of ``expression`` (UTC) in ``(after, until]``."""
    parsed, tz, out = cron.parse(expression), cron.zone("UTC"), []
    at = cron.next_fire(parsed, tz, after)
    while at is not None and at <= until:
        out.append(at)
        at = cron.next_fire(parsed, tz, at)
    return out


async def stored(app: web.Application) -> tuple[list[Run], list[ScheduleFire]]:
    async with app[SESSIONS]() as s:
        runs = list((await s.execute(select(Run))).scalars())
        fires = list((await s.execute(select(ScheduleFire))).scalars())
    return runs, fires


async def test_two_replicas_ticking_together_start_each_fire_exactly_once(
    replicas: list[web.Application], team_id: str
) -> None:
    schedules = await make_schedules(replicas[0], team_id, 15)
    rounds = 12
    won: list[list[Fired]] = [[], []]
    for _ in range(rounds):
        advance(replicas, 60)
        results = await asyncio.gather(*(tick(app) for app in replicas))
        for mine, result in zip(won, results, strict=True):
            mine.extend(result)

    end = START + dt.timedelta(minutes=rounds)
    expected = {(uid, t) for uid, expression in schedules.items() for t in fire_times(expression, START, end)}
    keys = [[(f.schedule_uid, f.fire_time) for f in fired] for fired in won]
    assert set(keys[0]).isdisjoint(keys[1])  # no fire was started by both replicas
    assert Counter(keys[0] + keys[1]) == Counter(expected)  # and none by neither, or twice by one
    runs, fires = await stored(replicas[1])
    assert len(runs) == len(expected)
    assert {(f.schedule_uid, f.fire_time) for f in fires} == expected
    assert {f.run_id for f in fires} == {r.run_id for r in runs}
    assert Counter(r.schedule_id for r in runs) == Counter(uid for uid, _ in expected)


async def test_two_replicas_catching_up_after_downtime_start_one_run_per_schedule(
    replicas: list[web.Application], team_id: str
) -> None:
    schedules = await make_schedules(replicas[0], team_id, 10)
    advance(replicas, 3 * 86_400 + 90)  # every replica was down for three days

    results = await asyncio.gather(*(tick(app) for app in replicas), *(tick(app) for app in replicas))
    again = await asyncio.gather(*(tick(app) for app in replicas))

    now = START + dt.timedelta(days=3, seconds=90)
    latest = {
        uid: fire_times(expression, now - dt.timedelta(hours=1), now)[-1]
        for uid, expression in schedules.items()
    }
    fired = [(f.schedule_uid, f.fire_time) for result in results for f in result]
    assert sorted(fired) == sorted(latest.items())  # once each, for the most recent missed time
    assert again == [[], []]
    runs, fires = await stored(replicas[0])
    assert Counter(r.schedule_id for r in runs) == Counter(list(schedules))
    assert len(fires) == len(schedules)


async def test_the_scheduler_runs_inside_a_started_app_and_wakes_claimers(
    aiohttp_client: Any, engine: Any, api_settings: ServerSettings, box: SecretBox, team_id: str
) -> None:
    clock = ManualClock(START)
    app = create_app(api_settings, engine, box, clock=clock, lifecycles=[schedule_scheduler(0.05)])
    async with app[SESSIONS]() as s, s.begin():
        sched = await builders.schedule(s, clock, team_id, "soon", "*/5 * * * *")
    clock.advance(300)  # due now; the first tick runs as the app starts
    woken = claim_signal(app).current()  # what a waiting claimer holds

    await aiohttp_client(app)
    await asyncio.wait_for(woken.wait(), timeout=30)

    async with app[SESSIONS]() as s:
        runs = list((await s.execute(select(Run).where(Run.schedule_id == sched.uid))).scalars())
    assert [(r.source, r.state) for r in runs] == [("SCHEDULED_AGENT", "QUEUED")]
