"""A definition's prompt-only schedule belongs to its factory: its runs carry ``factory_uid`` (issue 28,
part 6; docs/schedules.md, "Runs started by a schedule"), so ``runs list --factory`` and the console's
factory filter find them. An API-made schedule has no factory, and neither have its runs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import builders
import pytest
from sqlalchemy import select

from api.runs.skills import SkillResolver
from api.schedules.scheduler import fire_due
from store.clock import ManualClock
from store.models import Run

UTC = dt.UTC
START = dt.datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def resolver(tmp_path: Path) -> SkillResolver:
    return SkillResolver(None, tmp_path / "skills-cache")


async def test_a_factory_prompt_schedule_fires_runs_of_its_factory(
    client: Any, member_key: str, team_id: str, sessions: Any, resolver: SkillResolver
) -> None:
    clock = ManualClock(START)
    async with sessions() as s, s.begin():
        factory = await builders.factory(s, clock, team_id, "ops", managed_by="definitions")
        owned = await builders.schedule(
            s, clock, team_id, "digest", "0 9 * * *", prompt="Summarise", factory_uid=factory.uid
        )
        loose = await builders.schedule(s, clock, team_id, "loose", "0 9 * * *", prompt="Summarise too")
    clock.advance(3600)

    fired = await fire_due(sessions, clock, resolver)

    assert len(fired) == 2
    async with sessions() as s:
        rows = (await s.execute(select(Run.schedule_id, Run.factory_uid, Run.automation_id))).all()
    assert sorted(rows) == sorted([(owned.uid, factory.uid, None), (loose.uid, None, None)])
    resp = await client.get(f"/api/v1/agent/runs?factory_uid={factory.uid}", headers=h(member_key))
    body = await resp.json()
    assert resp.status == 200, body
    found = [(r["schedule"]["schedule_id"], r["factory_uid"]) for r in body["runs"]]
    assert found == [(owned.uid, factory.uid)]


async def test_run_now_of_a_factory_prompt_schedule_is_a_run_of_its_factory(
    client: Any, member_key: str, team_id: str, sessions: Any
) -> None:
    clock = ManualClock(START)
    async with sessions() as s, s.begin():
        factory = await builders.factory(s, clock, team_id, "ops", managed_by="definitions")
        owned = await builders.schedule(
            s, clock, team_id, "digest", "0 9 * * *", prompt="Summarise", factory_uid=factory.uid
        )
    resp = await client.post(f"/api/v1/agent/schedules/{owned.uid}/run", headers=h(member_key))
    started = await resp.json()
    assert resp.status in (200, 201, 202), started
    resp = await client.get(f"/api/v1/agent/runs/{started['run_id']}", headers=h(member_key))
    run = await resp.json()
    assert (run["factory_uid"], run["schedule"]["schedule_id"]) == (factory.uid, owned.uid)
