"""The scheduled-agents API (docs/api.md, "Schedules") against the real app and database (SQLite and
PostgreSQL), on a manual clock so next fire times are exact."""

from __future__ import annotations

import datetime as dt
from typing import Any

import builders
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator
from sql_support import statements
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import create_app
from api.context import ServerSettings
from api.runs.routes import load_openapi
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import ApiKey, ScheduleFire

SCHEDULES = "/api/v1/agent/schedules"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # a Thursday
DOC = load_openapi()
ITEM = Draft202012Validator(
    {"$ref": "#/components/schemas/ScheduledAgentItem", "components": DOC["components"]}
)


@pytest.fixture
def manual() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
async def client(
    aiohttp_client: Any,
    api_settings: ServerSettings,
    engine: AsyncEngine,
    box: SecretBox,
    manual: ManualClock,
) -> TestClient[Any, Any]:
    app: web.Application = create_app(api_settings, engine, box, clock=manual)
    result: TestClient[Any, Any] = await aiohttp_client(app)
    return result


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def item(resp: Any, status: int = 200) -> dict[str, Any]:
    """A ScheduledAgentItem answer, checked against the OpenAPI document."""
    body: dict[str, Any] = await ok(resp, status)
    errors = [f"{list(e.path)}: {e.message}" for e in ITEM.iter_errors(body)]
    assert not errors, errors
    return body


async def problem(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    body: dict[str, Any] = await resp.json()
    assert body["status"] == status
    return body


def fields(body: dict[str, Any]) -> dict[str, str]:
    return {e["field"]: e["message"] for e in body.get("errors", [])}


async def create(client: Any, key: str, **body: Any) -> dict[str, Any]:
    body = {"name": "nightly", "cron_schedule": "0 9 * * *", "prompt": "Triage.", **body}
    return await item(await client.post(SCHEDULES, json=body, headers=h(key)), 201)


# --- CRUD ------------------------------------------------------------------------------------------


async def test_create_get_list_and_delete(client: Any, member_key: str, team_id: str) -> None:
    created = await create(
        client,
        member_key,
        name="  morning triage ",
        timezone="Europe/Paris",
        agent_config={"name": "triage", "model_id": "m-1"},
        metadata={"team": "ops"},
    )
    assert created["id"].startswith("sch_")
    assert created["name"] == "morning triage"
    assert created["cron_schedule"] == "0 9 * * *"
    assert created["timezone"] == "Europe/Paris"
    assert created["prompt"] == "Triage."
    assert created["enabled"] is True
    assert created["agent_config"] == {"name": "triage", "model_id": "m-1"}
    assert created["metadata"] == {"team": "ops"}
    assert created["history"] == {"last_ran": None, "next_run": "2026-01-01T08:00:00.000Z"}  # 09:00 in Paris
    assert created["last_spawn_error"] is None
    assert created["scope"] == {"type": "Team", "uid": team_id}
    assert created["created_by"]["type"] == "service_account"
    assert created["created_by"]["display_name"] == "member key"
    assert created["created_at"] == created["updated_at"] == "2026-01-01T00:00:00.000Z"
    assert (created["managed_by"], created["factory_uid"], created["definition_path"]) == ("api", None, None)
    assert created["automation"] is None

    one = f"{SCHEDULES}/{created['id']}"
    assert await item(await client.get(one, headers=h(member_key))) == created
    second = await create(client, member_key, name="nightly", timezone=None)
    assert second["timezone"] == "UTC"
    listed = await ok(await client.get(SCHEDULES, headers=h(member_key)))
    assert [s["id"] for s in listed["schedules"]] == [created["id"], second["id"]]  # oldest first

    assert await ok(await client.delete(one, headers=h(member_key))) == {"success": True}
    await problem(await client.get(one, headers=h(member_key)), 404)
    await problem(await client.delete(one, headers=h(member_key)), 404)
    listed = await ok(await client.get(SCHEDULES, headers=h(member_key)))
    assert [s["id"] for s in listed["schedules"]] == [second["id"]]


async def test_delete_removes_the_fire_rows(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    created = await create(client, member_key)
    async with sessions() as s, s.begin():
        s.add(ScheduleFire(schedule_uid=created["id"], fire_time=T0, run_id=None, error=None, created_at=T0))
    assert await ok(await client.delete(f"{SCHEDULES}/{created['id']}", headers=h(member_key)))
    async with sessions() as s:
        assert (await s.execute(select(ScheduleFire))).first() is None


async def test_update_moves_the_next_fire_only_when_timing_changes(
    client: Any, member_key: str, manual: ManualClock
) -> None:
    created = await create(client, member_key, metadata={"a": "1"}, agent_config={"name": "n"})
    one = f"{SCHEDULES}/{created['id']}"
    manual.advance(86_400)  # 2026-01-02T00:00Z: the stored next fire (Jan 1, 09:00) stays as it was

    async def put(**body: Any) -> dict[str, Any]:
        base = {"name": "renamed", "cron_schedule": "0 9 * * *", "enabled": True}
        return await item(await client.put(one, json=base | body, headers=h(member_key)))

    renamed = await put(prompt="New prompt.")
    assert renamed["name"] == "renamed" and renamed["prompt"] == "New prompt."
    assert renamed["history"]["next_run"] == "2026-01-01T09:00:00.000Z"
    assert renamed["metadata"] == {"a": "1"} and renamed["agent_config"] == {"name": "n"}  # kept
    assert renamed["updated_at"] == "2026-01-02T00:00:00.000Z"
    assert (await put(cron_schedule="30 9 * * *"))["history"]["next_run"] == "2026-01-02T09:30:00.000Z"
    tokyo = await put(cron_schedule="30 9 * * *", timezone="Asia/Tokyo")  # now is 09:00 in Tokyo
    assert tokyo["timezone"] == "Asia/Tokyo"
    assert tokyo["history"]["next_run"] == "2026-01-02T00:30:00.000Z"
    off = await put(cron_schedule="30 9 * * *", enabled=False, metadata={"b": "2"}, agent_config={})
    assert off["enabled"] is False and off["history"]["next_run"] is None
    assert off["timezone"] == "Asia/Tokyo"  # kept when not given
    assert off["metadata"] == {"b": "2"} and off["agent_config"] == {}
    manual.advance(3600)
    on = await put(cron_schedule="30 9 * * *", enabled=True)
    assert on["history"]["next_run"] == "2026-01-03T00:30:00.000Z"


async def test_create_disabled_has_no_next_run(client: Any, member_key: str) -> None:
    created = await create(client, member_key, enabled=False)
    assert created["enabled"] is False
    assert created["history"]["next_run"] is None


# --- pause and resume ------------------------------------------------------------------------------


async def test_pause_and_resume_are_idempotent_and_skip_missed_times(
    client: Any, member_key: str, manual: ManualClock
) -> None:
    created = await create(client, member_key)
    one = f"{SCHEDULES}/{created['id']}"
    assert created["history"]["next_run"] == "2026-01-01T09:00:00.000Z"
    manual.advance(60)
    paused = await item(await client.post(f"{one}/pause", headers=h(member_key)))
    assert paused["enabled"] is False and paused["history"]["next_run"] is None
    assert paused["updated_at"] == "2026-01-01T00:01:00.000Z"
    manual.advance(3 * 86_400 + 10 * 3600)  # 2026-01-04T10:01Z: three 09:00 fires missed
    assert await item(await client.post(f"{one}/pause", headers=h(member_key))) == paused
    resumed = await item(await client.post(f"{one}/resume", headers=h(member_key)))
    assert resumed["enabled"] is True
    assert resumed["history"]["next_run"] == "2026-01-05T09:00:00.000Z"
    assert resumed["updated_at"] == "2026-01-04T10:01:00.000Z"
    manual.advance(60)
    assert await item(await client.post(f"{one}/resume", headers=h(member_key))) == resumed


# --- validation ------------------------------------------------------------------------------------


async def test_a_bad_cron_expression_names_the_cron_field(client: Any, member_key: str) -> None:
    for expression, start in (
        ("0 24 * * *", "hour: 24 is out of range 0-23"),
        ("*/5 * * JAN-XYZ *", "month: 'XYZ' is not a number"),
        ("0 9 * * 8", "day of week: 8 is out of range 0-7"),
        ("@daily", "@daily is not supported"),
        ("0 9 * *", "4 fields"),
    ):
        body = {"name": "n", "cron_schedule": expression, "prompt": "p"}
        errors = fields(await problem(await client.post(SCHEDULES, json=body, headers=h(member_key)), 422))
        assert list(errors) == ["cron_schedule"], errors
        assert errors["cron_schedule"].startswith(start), errors


async def test_unknown_time_zones_are_422(client: Any, member_key: str) -> None:
    for zone in ("Mars/Olympus", "../../etc/passwd", "europe/paris", "", "x" * 101):
        body = {"name": "n", "cron_schedule": "0 9 * * *", "prompt": "p", "timezone": zone}
        errors = fields(await problem(await client.post(SCHEDULES, json=body, headers=h(member_key)), 422))
        assert list(errors) == ["timezone"], (zone, errors)
    body = {"name": "n", "cron_schedule": "0 9 * * *", "prompt": "p", "timezone": "europe/paris"}
    resp = await client.post(SCHEDULES, json=body, headers=h(member_key))
    assert "did you mean 'Europe/Paris'" in fields(await problem(resp, 422))["timezone"]


async def test_every_field_error_at_once(client: Any, member_key: str) -> None:
    body = {
        "name": " ",
        "cron_schedule": 5,
        "enabled": "yes",
        "agent_config": {"model": "x", "harness": {"type": "command", "command": "rm"}},
        "metadata": {"bad key": "v", "ok": 1},
        "agent_uid": 3,
        "mode": ["plan"],
        "team": "yes",
    }
    errors = fields(await problem(await client.post(SCHEDULES, json=body, headers=h(member_key)), 422))
    assert set(errors) == {
        "name",
        "cron_schedule",
        "enabled",
        "prompt",
        "agent_config.model",
        "agent_config.harness.command",
        "metadata.bad key",
        "metadata.ok",
        "agent_uid",
        "mode",
        "team",
    }
    missing = fields(await problem(await client.post(SCHEDULES, json={}, headers=h(member_key)), 422))
    assert set(missing) == {"name", "cron_schedule", "prompt"}


async def test_prompt_is_optional_with_a_skill_whose_reference_is_checked(
    client: Any, member_key: str
) -> None:
    body = {"name": "n", "cron_schedule": "0 9 * * *", "agent_config": {"skill_spec": "acme/skills:triage"}}
    errors = fields(await problem(await client.post(SCHEDULES, json=body, headers=h(member_key)), 422))
    assert list(errors) == ["agent_config.skill_spec"]  # no prompt needed; the skill cannot be resolved


async def test_agent_config_references_are_checked_and_the_request_config_is_stored(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    body = {
        "name": "n",
        "cron_schedule": "0 9 * * *",
        "prompt": "p",
        "agent_config": {"environment_id": "nope"},
    }
    errors = fields(await problem(await client.post(SCHEDULES, json=body, headers=h(member_key)), 422))
    assert list(errors) == ["agent_config.environment_id"]
    async with sessions() as s, s.begin():
        await builders.environment(s, ManualClock(T0), team_id, "env-a", {"setup": ["true"]})
    created = await create(client, member_key, agent_config={"environment_id": "env-a"})
    assert created["agent_config"] == {"environment_id": "env-a"}  # as given, not resolved


async def test_unknown_fields_and_sdk_only_fields_are_ignored(client: Any, member_key: str) -> None:
    created = await create(client, member_key, agent_uid="ag_1", mode="plan", team=False, whatever={"x": 1})
    assert "whatever" not in created and "agent_uid" not in created


async def test_update_rules(client: Any, member_key: str) -> None:
    one = f"{SCHEDULES}/{(await create(client, member_key))['id']}"
    errors = fields(
        await problem(
            await client.put(one, json={"name": "n", "cron_schedule": "0 9 * * *"}, headers=h(member_key)),
            422,
        )
    )
    assert list(errors) == ["enabled"]
    blank = {"name": "n", "cron_schedule": "0 9 * * *", "enabled": True, "prompt": ""}
    errors = fields(await problem(await client.put(one, json=blank, headers=h(member_key)), 422))
    assert list(errors) == ["prompt"]
    await problem(await client.put(one, data=b"{nope", headers=h(member_key)), 400)
    body = {"name": "n", "cron_schedule": "0 9 * * *", "enabled": True}
    await problem(await client.put(f"{SCHEDULES}/sch_nope", json=body, headers=h(member_key)), 404)


# --- who may do what -------------------------------------------------------------------------------


ROUTES = (
    ("GET", ""),
    ("PUT", ""),
    ("DELETE", ""),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("POST", "/run"),
)
BODY = {"name": "n", "cron_schedule": "0 9 * * *", "enabled": True}


async def test_another_teams_schedule_is_a_404(client: Any, member_key: str, other_team_key: str) -> None:
    one = f"{SCHEDULES}/{(await create(client, member_key))['id']}"
    for method, suffix in ROUTES:
        resp = await client.request(method, one + suffix, json=BODY, headers=h(other_team_key))
        await problem(resp, 404)
    assert (await ok(await client.get(SCHEDULES, headers=h(other_team_key))))["schedules"] == []


async def test_worker_keys_get_403(client: Any, member_key: str, admin_key: str, worker_key: str) -> None:
    one = f"{SCHEDULES}/{(await create(client, admin_key))['id']}"
    await problem(await client.get(SCHEDULES, headers=h(worker_key)), 403)
    await problem(await client.post(SCHEDULES, json=BODY | {"prompt": "p"}, headers=h(worker_key)), 403)
    for method, suffix in ROUTES:
        await problem(await client.request(method, one + suffix, json=BODY, headers=h(worker_key)), 403)
    await problem(await client.get(SCHEDULES), 401)


# --- definitions-managed schedules ------------------------------------------------------------------


async def _definitions_schedule(
    sessions: async_sessionmaker[AsyncSession], team_id: str, **options: Any
) -> str:
    clock = ManualClock(T0)
    async with sessions() as s, s.begin():
        factory = await builders.factory(s, clock, team_id, "acme", managed_by="definitions")
        row = await builders.schedule(
            s,
            clock,
            team_id,
            "nightly",
            "0 3 * * *",
            factory_uid=factory.uid,
            managed_by="definitions",
            **options,
        )
    return str(row.uid)


async def test_definitions_managed_schedules_refuse_edits_with_409_naming_the_file(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await _definitions_schedule(sessions, team_id, prompt="Nightly.")
    one = f"{SCHEDULES}/{uid}"
    shown = await item(await client.get(one, headers=h(member_key)))
    assert shown["managed_by"] == "definitions"
    assert shown["definition_path"] == "schedules/nightly.yaml"
    assert shown["created_by"] is None
    for method, suffix, hint in (
        ("PUT", "", "change it there"),
        ("DELETE", "", "remove the file there"),
        ("POST", "/pause", "set enabled: false there"),
        ("POST", "/resume", "set enabled: true there"),
    ):
        body = await problem(
            await client.request(method, one + suffix, json=BODY, headers=h(member_key)), 409
        )
        assert body["error_code"] == "conflict"
        assert "schedule 'nightly' is defined in schedules/nightly.yaml of factory 'acme'" in body["detail"]
        assert hint in body["detail"]
    assert await item(await client.get(one, headers=h(member_key))) == shown  # unchanged
    run = await ok(await client.post(f"{one}/run", headers=h(member_key)))  # an action, not an edit
    assert run["state"] == "QUEUED"


async def test_automation_schedules_show_the_automations_prompt_and_resolved_config(
    client: Any,
    member_key: str,
    sessions: async_sessionmaker[AsyncSession],
    team_id: str,
    engine: AsyncEngine,
) -> None:
    clock = ManualClock(T0)
    async with sessions() as s, s.begin():
        factory = await builders.factory(
            s, clock, team_id, "acme", managed_by="definitions", worker_host="box",
            agents={"foreman": {"model_id": "m-def", "name": "fore"}},
        )  # fmt: skip
        await builders.automation(
            s, clock, team_id, factory.uid, "report", [], prompt="Report.", config={"name": "auto"}
        )
        for name, automation in (("uses-report", "report"), ("uses-gone", "gone")):
            await builders.schedule(
                s, clock, team_id, name, "0 3 * * *", factory_uid=factory.uid, managed_by="definitions",
                automation=automation,
            )  # fmt: skip
    listed = (await ok(await client.get(SCHEDULES, headers=h(member_key))))["schedules"]
    by_name = {s["name"]: s for s in listed}
    report = by_name["uses-report"]
    assert report["automation"] == "report" and report["factory_uid"] == factory.uid
    assert report["prompt"] == "Report."
    assert report["agent_config"] == {"name": "auto", "model_id": "m-def", "worker_host": "box"}
    assert (by_name["uses-gone"]["prompt"], by_name["uses-gone"]["agent_config"]) == ("", {})
    for entry in listed:
        assert not list(ITEM.iter_errors(entry))

    # The list costs the same number of statements with more automation schedules in more factories.
    async def selects() -> int:
        with statements(engine) as seen:
            await ok(await client.get(SCHEDULES, headers=h(member_key)))
        return sum(statement.lstrip().upper().startswith("SELECT") for statement in seen)

    before = await selects()
    async with sessions() as s, s.begin():
        other = await builders.factory(s, clock, team_id, "beta", managed_by="definitions")
        await builders.automation(s, clock, team_id, other.uid, "report", [], prompt="Beta.")
        for i in range(3):
            await builders.schedule(
                s, clock, team_id, f"beta-{i}", "0 3 * * *", factory_uid=other.uid, managed_by="definitions",
                automation="report",
            )  # fmt: skip
    assert await selects() == before


# --- run now ---------------------------------------------------------------------------------------


async def test_run_now_starts_a_scheduled_run_and_leaves_the_timing_alone(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    created = await create(client, member_key, metadata={"team": "ops"}, agent_config={"model_id": "m-1"})
    one = f"{SCHEDULES}/{created['id']}"
    started = await ok(await client.post(f"{one}/run", headers=h(member_key)))
    assert started["state"] == "QUEUED" and started["at_capacity"] is False
    assert started["task_id"] == started["run_id"]
    run = await ok(await client.get(f"/api/v1/agent/runs/{started['run_id']}", headers=h(member_key)))
    assert run["source"] == "SCHEDULED_AGENT"
    assert run["prompt"] == "Triage."
    assert run["metadata"] == {"team": "ops"}
    assert run["agent_config"]["model_id"] == "m-1"
    async with sessions() as s:
        member = (await s.execute(select(ApiKey).where(ApiKey.name == "member key"))).scalar_one()
    assert run["creator"] == {"type": "service_account", "uid": member.id, "display_name": "member key"}
    after = await item(await client.get(one, headers=h(member_key)))
    assert after["history"] == created["history"]  # run now is no fire
    listed = await ok(
        await client.get(f"/api/v1/agent/runs?schedule_id={created['id']}", headers=h(member_key))
    )
    assert [r["run_id"] for r in listed["runs"]] == [started["run_id"]]


async def test_run_now_of_a_schedule_that_cannot_start_a_run_is_a_409(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await _definitions_schedule(sessions, team_id, automation="gone")
    body = await problem(await client.post(f"{SCHEDULES}/{uid}/run", headers=h(member_key)), 409)
    assert "gone" in body["detail"]
