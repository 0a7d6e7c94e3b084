"""Firing schedules (docs/schedules.md, "How schedules fire" and "Runs started by a schedule"): one tick of
the scheduler against a real database (SQLite and PostgreSQL), with a manual clock, and the runs it
starts as the Run API shows them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import builders
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.runs.skills import SkillResolver
from api.schedules.firing import Fired
from api.schedules.scheduler import fire_due
from store.clock import ManualClock
from store.models import Automation, Run, RunEvent, Schedule, ScheduleFire

UTC = dt.UTC
START = dt.datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # a Monday
RUNS = "/api/v1/agent/runs"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def resolver(tmp_path: Path) -> SkillResolver:
    return SkillResolver(None, tmp_path / "skills-cache")


def at(clock: ManualClock, when: dt.datetime) -> None:
    """Move the manual clock to ``when`` (forward only)."""
    clock.advance((when - clock.now()).total_seconds())


async def tick(
    sessions: async_sessionmaker[AsyncSession], clock: ManualClock, resolver: SkillResolver
) -> list[Fired]:
    return await fire_due(sessions, clock, resolver)


async def add_schedule(
    sessions: async_sessionmaker[AsyncSession],
    clock: ManualClock,
    team_id: str,
    name: str,
    cron: str,
    **kw: Any,
) -> Schedule:
    async with sessions() as s, s.begin():
        return await builders.schedule(s, clock, team_id, name, cron, **kw)


async def reload(sessions: async_sessionmaker[AsyncSession], uid: str) -> Schedule:
    async with sessions() as s:
        return (await s.execute(select(Schedule).where(Schedule.uid == uid))).scalar_one()


async def runs_of(sessions: async_sessionmaker[AsyncSession], uid: str) -> list[Run]:
    async with sessions() as s:
        stmt = select(Run).where(Run.schedule_id == uid).order_by(Run.created_at, Run.run_id)
        return list((await s.execute(stmt)).scalars())


async def fires_of(sessions: async_sessionmaker[AsyncSession], uid: str) -> list[ScheduleFire]:
    async with sessions() as s:
        stmt = select(ScheduleFire).where(ScheduleFire.schedule_uid == uid).order_by(ScheduleFire.fire_time)
        return list((await s.execute(stmt)).scalars())


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# --- one fire ----------------------------------------------------------------------------------------


async def test_a_due_schedule_fires_once_and_the_run_carries_the_schedule(
    client: Any, member_key: str, team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    sched = await add_schedule(
        sessions,
        clock,
        team_id,
        "morning-digest",
        "0 9 * * *",
        prompt="Summarise yesterday's incidents",
        agent_config={"name": "digest", "model_id": "m-1", "worker_host": "host-a"},
        metadata={"team": "ops"},
    )
    assert sched.next_fire_at == dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    at(clock, dt.datetime(2026, 3, 2, 8, 59, 59, tzinfo=UTC))
    assert await tick(sessions, clock, resolver) == []  # not due yet

    at(clock, dt.datetime(2026, 3, 2, 9, 0, 3, tzinfo=UTC))
    fired = await tick(sessions, clock, resolver)
    again = await tick(sessions, clock, resolver)  # the same moment: nothing is due any more

    assert [(f.schedule_uid, f.fire_time, f.error) for f in fired] == [
        (sched.uid, dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC), None)
    ]
    assert again == []
    [run] = await runs_of(sessions, sched.uid)
    assert run.run_id == fired[0].run_id
    assert (run.state, run.source, run.prompt, run.title) == (
        "QUEUED",
        "SCHEDULED_AGENT",
        "Summarise yesterday's incidents",
        "morning-digest",
    )
    assert (run.creator_type, run.creator_uid, run.creator_display_name) == (
        "service_account",
        sched.uid,
        "schedule morning-digest",
    )
    assert run.worker_host == "host-a"
    assert run.factory_uid is None and run.automation_id is None
    row = await reload(sessions, sched.uid)
    assert row.last_fired_at == dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert row.next_fire_at == dt.datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    assert row.last_spawn_error is None
    [fire] = await fires_of(sessions, sched.uid)
    assert (fire.fire_time, fire.run_id, fire.error) == (row.last_fired_at, run.run_id, None)

    resp = await client.get(f"{RUNS}/{run.run_id}", headers=h(member_key))
    item = await resp.json()
    assert resp.status == 200, item
    assert item["source"] == "SCHEDULED_AGENT"
    assert item["schedule"] == {
        "cron_schedule": "0 9 * * *",
        "schedule_id": sched.uid,
        "schedule_name": "morning-digest",
    }
    assert item["metadata"] == {"team": "ops"}
    assert item["agent_config"] == {"name": "digest", "model_id": "m-1", "worker_host": "host-a"}


async def test_a_fired_run_starts_its_event_log_with_queued_like_every_created_run(
    team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    """docs/events.md, "What is recorded": run creation writes its ``state`` QUEUED event, fires too."""
    await add_schedule(sessions, clock, team_id, "evented", "0 9 * * *", prompt="Go")
    at(clock, dt.datetime(2026, 3, 2, 9, 0, 1, tzinfo=UTC))
    [fired] = await tick(sessions, clock, resolver)
    async with sessions() as s:
        stmt = select(RunEvent.kind, RunEvent.data).where(RunEvent.run_id == fired.run_id)
        events = [tuple(row) for row in (await s.execute(stmt)).all()]
    assert events == [
        (
            "state",
            {
                "state": "QUEUED",
                "previous_state": None,
                "status_message": None,
                "error_code": None,
                "cancel_requested": False,
            },
        )
    ]


async def test_an_automation_schedule_runs_the_automation_as_a_webhook_delivery_would(
    team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    async with sessions() as s, s.begin():
        factory = await builders.factory(
            s,
            clock,
            team_id,
            "ops",
            agents={
                "foreman": {"name": "foreman-default", "model_id": "m-default", "base_prompt": "Be brief."}
            },
            worker_host="build-box",
        )
        auto = await builders.automation(
            s,
            clock,
            team_id,
            factory.uid,
            "nightly-report",
            [],
            prompt="Write the nightly report",
            title="Nightly report",
            config={"model_id": "m-report"},
        )
        sched = await builders.schedule(
            s, clock, team_id, "nightly", "0 2 * * *", factory_uid=factory.uid, automation="nightly-report"
        )
    at(clock, dt.datetime(2026, 3, 3, 2, 0, tzinfo=UTC))

    [fired] = await tick(sessions, clock, resolver)

    [run] = await runs_of(sessions, sched.uid)
    assert fired.run_id == run.run_id
    assert (run.prompt, run.title, run.source) == (
        "Write the nightly report",
        "Nightly report",
        "SCHEDULED_AGENT",
    )
    # The automation's config over its factory agent's defaults, the factory's workerHost last.
    assert run.agent_config == {
        "name": "foreman-default",
        "model_id": "m-report",
        "base_prompt": "Be brief.",
        "worker_host": "build-box",
    }
    assert run.worker_host == "build-box"
    assert (run.factory_uid, run.automation_id, run.schedule_id) == (factory.uid, auto.uid, sched.uid)
    assert run.schedule is not None and run.schedule["schedule_name"] == "nightly"


async def test_a_missing_or_disabled_automation_records_the_error_and_moves_on(
    team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    async with sessions() as s, s.begin():
        factory = await builders.factory(s, clock, team_id, "ops")
        auto = await builders.automation(s, clock, team_id, factory.uid, "report", [], enabled=False)
        gone = await builders.schedule(
            s, clock, team_id, "gone", "0 * * * *", factory_uid=factory.uid, automation="deleted-one"
        )
        disabled = await builders.schedule(
            s, clock, team_id, "off", "0 * * * *", factory_uid=factory.uid, automation="report"
        )
    at(clock, dt.datetime(2026, 3, 2, 9, 0, 1, tzinfo=UTC))

    fired = await tick(sessions, clock, resolver)
    again = await tick(sessions, clock, resolver)  # a broken schedule does not retry every tick

    assert {f.schedule_uid: f.run_id for f in fired} == {gone.uid: None, disabled.uid: None}
    assert again == []
    for sched, why in ((gone, "'deleted-one' does not exist"), (disabled, "'report' is disabled")):
        row = await reload(sessions, sched.uid)
        assert row.last_spawn_error is not None and why in row.last_spawn_error
        assert row.last_fired_at == dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        assert row.next_fire_at == dt.datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
        [fire] = await fires_of(sessions, sched.uid)
        assert fire.run_id is None and fire.error == row.last_spawn_error
        assert await runs_of(sessions, sched.uid) == []

    # Enabling the automation makes the next fire work again, and clears the error.
    async with sessions() as s, s.begin():
        await s.execute(update(Automation).where(Automation.uid == auto.uid).values(enabled=True))
    at(clock, dt.datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    await tick(sessions, clock, resolver)
    row = await reload(sessions, disabled.uid)
    assert row.last_spawn_error is None
    assert len(await runs_of(sessions, disabled.uid)) == 1


async def test_an_invalid_prompt_config_is_a_spawn_error_and_other_schedules_still_fire(
    team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    bad_env = await add_schedule(
        sessions, clock, team_id, "bad-env", "*/30 * * * *", agent_config={"environment_id": "nope"}
    )
    bad_cron = await add_schedule(sessions, clock, team_id, "bad-cron", "*/30 * * * *")
    good = await add_schedule(sessions, clock, team_id, "good", "*/30 * * * *")
    async with sessions() as s, s.begin():  # a row no writer would leave: its expression cannot be read
        await s.execute(update(Schedule).where(Schedule.uid == bad_cron.uid).values(cron="61 * * * *"))
    at(clock, dt.datetime(2026, 3, 2, 8, 30, tzinfo=UTC))

    fired = await tick(sessions, clock, resolver)

    assert {f.schedule_uid for f in fired} == {bad_env.uid, good.uid}
    assert len(await runs_of(sessions, good.uid)) == 1
    env_row = await reload(sessions, bad_env.uid)
    assert env_row.last_spawn_error is not None and "unknown environment 'nope'" in env_row.last_spawn_error
    assert env_row.next_fire_at == dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    cron_row = await reload(sessions, bad_cron.uid)
    assert cron_row.next_fire_at is None  # stopped, not retried on every tick
    assert cron_row.last_spawn_error is not None and "invalid schedule" in cron_row.last_spawn_error
    assert await fires_of(sessions, bad_cron.uid) == []


# --- catch-up and pausing ----------------------------------------------------------------------------


async def test_after_downtime_a_schedule_fires_once_for_its_most_recent_missed_time(
    team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    hourly = await add_schedule(sessions, clock, team_id, "hourly", "0 * * * *")
    daily = await add_schedule(sessions, clock, team_id, "daily", "15 6 * * *", timezone="Europe/Berlin")
    at(clock, START + dt.timedelta(days=3, minutes=30))  # no replica ran for three days

    fired = await tick(sessions, clock, resolver)
    again = await tick(sessions, clock, resolver)

    assert {f.schedule_uid: f.fire_time for f in fired} == {
        hourly.uid: dt.datetime(2026, 3, 5, 8, 0, tzinfo=UTC),
        daily.uid: dt.datetime(2026, 3, 5, 5, 15, tzinfo=UTC),  # 06:15 CET
    }
    assert again == []
    assert len(await runs_of(sessions, hourly.uid)) == 1
    assert len(await runs_of(sessions, daily.uid)) == 1
    assert (await reload(sessions, hourly.uid)).next_fire_at == dt.datetime(2026, 3, 5, 9, 0, tzinfo=UTC)
    assert (await reload(sessions, daily.uid)).next_fire_at == dt.datetime(2026, 3, 6, 5, 15, tzinfo=UTC)


async def test_a_paused_schedule_does_not_fire_and_resuming_skips_the_missed_times(
    team_id: str, sessions: Any, clock: ManualClock, resolver: SkillResolver
) -> None:
    sched = await add_schedule(sessions, clock, team_id, "paused", "0 * * * *", enabled=False)
    at(clock, START + dt.timedelta(hours=5, minutes=10))
    assert await tick(sessions, clock, resolver) == []

    # Resuming sets next_fire_at to the next time after now, as the API and an apply do.
    async with sessions() as s, s.begin():
        await s.execute(
            update(Schedule)
            .where(Schedule.uid == sched.uid)
            .values(enabled=True, next_fire_at=dt.datetime(2026, 3, 2, 14, 0, tzinfo=UTC))
        )
    assert await tick(sessions, clock, resolver) == []
    at(clock, dt.datetime(2026, 3, 2, 14, 0, tzinfo=UTC))
    [fired] = await tick(sessions, clock, resolver)
    assert fired.fire_time == dt.datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
    assert len(await runs_of(sessions, sched.uid)) == 1


# --- the runs list -----------------------------------------------------------------------------------


async def test_runs_filter_by_schedule_id_and_by_the_scheduled_agent_source(
    client: Any,
    member_key: str,
    team_id: str,
    sessions: Any,
    clock: ManualClock,
    resolver: SkillResolver,
    seed_run: Any,
) -> None:
    mine = await add_schedule(sessions, clock, team_id, "mine", "*/10 * * * *")
    other = await add_schedule(sessions, clock, team_id, "other", "*/10 * * * *")
    api_run = await seed_run(prompt="not scheduled")
    for minutes in (10, 20, 30):
        at(clock, START + dt.timedelta(minutes=minutes))
        await tick(sessions, clock, resolver)
    mine_runs = {r.run_id for r in await runs_of(sessions, mine.uid)}
    other_runs = {r.run_id for r in await runs_of(sessions, other.uid)}
    assert len(mine_runs) == len(other_runs) == 3

    async def ids(query: str) -> set[str]:
        found: set[str] = set()
        cursor = None
        while True:
            page = f"{RUNS}?{query}&limit=2" + (f"&cursor={cursor}" if cursor else "")
            resp = await client.get(page, headers=h(member_key))
            body = await resp.json()
            assert resp.status == 200, body
            found |= {r["run_id"] for r in body["runs"]}
            cursor = body["page_info"]["next_cursor"]
            if not cursor:
                return found

    assert await ids(f"schedule_id={mine.uid}") == mine_runs  # paged: the cursor keeps the filter
    assert await ids("source=SCHEDULED_AGENT") == mine_runs | other_runs
    assert await ids(f"source=scheduled_agent&schedule_id={other.uid}") == other_runs
    assert await ids("schedule_id=sch_unknown") == set()
    assert api_run in await ids("source=API")

    first = await client.get(f"{RUNS}?limit=1", headers=h(member_key))
    cursor = (await first.json())["page_info"]["next_cursor"]
    reused = await client.get(f"{RUNS}?limit=1&schedule_id={mine.uid}&cursor={cursor}", headers=h(member_key))
    assert reused.status == 400  # a cursor belongs to the filters it was issued for

    resp = await client.get(f"{RUNS}/{api_run}", headers=h(member_key))
    assert (await resp.json())["schedule"] is None
