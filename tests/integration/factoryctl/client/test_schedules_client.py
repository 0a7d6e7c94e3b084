"""``client.schedules`` (sync and async) against the real server: the whole life of an API-created
schedule, "run now" and the runs it starts, and the 409s of a definition-managed one.

Schedules are made through the API's POST (the client), except definition-managed ones, which only an
apply writes: those come from ``builders.schedule`` on the server's database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from live_servers import LiveServer, definition_schedule, unique

from factoryctl.client import (
    AsyncFactoryClient,
    ConflictError,
    FactoryClient,
    NotFoundError,
    RunCreated,
    ScheduledAgent,
    UnprocessableEntityError,
)


@pytest.fixture
def admin(live: LiveServer) -> Iterator[FactoryClient]:
    with FactoryClient(live.url, live.admin_key) as client:
        yield client


def test_create_get_list_update_pause_resume_delete(admin: FactoryClient) -> None:
    name = unique("nightly")
    created = admin.schedules.create(
        name,
        "30 9 * * MON",
        prompt="Check the dependencies.",
        agent_config={"model_id": "m-1"},
        metadata={"team": "ops"},
        timezone="Europe/Berlin",
    )
    assert isinstance(created, ScheduledAgent)
    assert (created.name, created.cron_schedule, created.timezone, created.enabled) == (
        name,
        "30 9 * * MON",
        "Europe/Berlin",
        True,
    )
    assert created.managed_by == "api" and created.definition_path is None and created.factory_uid is None
    assert created.agent_config["model_id"] == "m-1" and created.metadata == {"team": "ops"}
    next_run = created.history.next_run
    assert next_run is not None and next_run > dt.datetime.now(dt.UTC) and created.history.last_ran is None
    assert created.scope is not None and created.scope.type == "Team"
    assert created.created_by is not None and created.created_by.type == "service_account"

    assert admin.schedules.get(created.id) == created
    assert created.id in {s.id for s in admin.schedules.list()}

    updated = admin.schedules.update(created.id, name=name, cron_schedule="0 7 * * *", enabled=True)
    assert updated.cron_schedule == "0 7 * * *"
    assert updated.prompt == "Check the dependencies." and updated.timezone == "Europe/Berlin"  # kept

    paused = admin.schedules.pause(created.id)
    assert (paused.enabled, paused.history.next_run) == (False, None)
    assert admin.schedules.pause(created.id).enabled is False  # idempotent
    resumed = admin.schedules.resume(created.id)
    assert resumed.enabled and resumed.history.next_run is not None

    assert admin.schedules.delete(created.id) is None
    with pytest.raises(NotFoundError):
        admin.schedules.get(created.id)
    with pytest.raises(NotFoundError):
        admin.schedules.delete(created.id)


def test_run_now_starts_a_scheduled_run_that_the_runs_list_finds_by_schedule(admin: FactoryClient) -> None:
    schedule = admin.schedules.create(unique("now"), "0 6 * * *", prompt="Run me now.", enabled=False)
    other = admin.schedules.create(unique("other"), "0 6 * * *", prompt="Not me.")
    started = admin.schedules.run_now(schedule.id)
    assert isinstance(started, RunCreated) and started.run_id and started.state
    admin.schedules.run_now(other.id)

    [run] = admin.runs.list(schedule_id=schedule.id)
    assert run.run_id == started.run_id and run.source == "SCHEDULED_AGENT"
    assert run.prompt == "Run me now."
    assert run.schedule is not None
    assert (run.schedule.schedule_id, run.schedule.schedule_name, run.schedule.cron_schedule) == (
        schedule.id,
        schedule.name,
        "0 6 * * *",
    )
    assert admin.runs.get(started.run_id).schedule == run.schedule
    assert admin.schedules.get(schedule.id).enabled is False  # running now does not resume it


def test_a_definition_managed_schedule_is_changed_in_its_file_not_through_the_api(
    live: LiveServer, admin: FactoryClient
) -> None:
    name = unique("from-file")
    schedule_id = definition_schedule(
        live, name, timezone="Europe/Berlin", prompt="Write the nightly report.", managed_by="definitions"
    )
    item = admin.schedules.get(schedule_id)
    assert (item.managed_by, item.definition_path) == ("definitions", f"schedules/{name}.yaml")
    assert item.factory_uid is not None and item.timezone == "Europe/Berlin"

    refusals: dict[str, Callable[[], object]] = {
        "pause": lambda: admin.schedules.pause(schedule_id),
        "resume": lambda: admin.schedules.resume(schedule_id),
        "update": lambda: admin.schedules.update(
            schedule_id, name=name, cron_schedule="* * * * *", enabled=True
        ),
        "delete": lambda: admin.schedules.delete(schedule_id),
    }
    for verb, call in refusals.items():
        with pytest.raises(ConflictError) as err:
            call()
        assert err.value.status_code == 409, verb
        assert f"schedules/{name}.yaml" in err.value.detail, f"{verb}: {err.value.detail}"
    assert admin.schedules.get(schedule_id) == item  # nothing changed

    started = admin.schedules.run_now(schedule_id)  # allowed: it changes nothing in the definition
    assert admin.runs.get(started.run_id).source == "SCHEDULED_AGENT"


def test_refusals_map_to_the_client_errors(admin: FactoryClient) -> None:
    with pytest.raises(NotFoundError) as missing:
        admin.schedules.get("sch_doesnotexist")
    assert missing.value.error_code == "resource_not_found"
    with pytest.raises(NotFoundError):
        admin.schedules.run_now("sch_doesnotexist")
    with pytest.raises(UnprocessableEntityError) as bad:
        admin.schedules.create(unique("bad"), "61 * * * *", prompt="p")
    assert bad.value.errors and any("cron" in e.field for e in bad.value.errors), bad.value.errors


async def test_the_async_client_has_the_same_surface(live: LiveServer) -> None:
    async with AsyncFactoryClient(live.url, live.admin_key) as client:
        created = await client.schedules.create(unique("async"), "0 6 * * *", prompt="p")
        assert created.id in {s.id for s in await client.schedules.list()}
        assert (await client.schedules.pause(created.id)).enabled is False
        assert (await client.schedules.resume(created.id)).enabled is True
        started = await client.schedules.run_now(created.id)
        page = await client.runs.list(schedule_id=created.id)
        assert [r.run_id for r in page] == [started.run_id]
        raw = await client.with_raw_response.schedules.get(created.id)
        assert raw.status_code == 200 and raw.parse().id == created.id
        await client.schedules.delete(created.id)
        with pytest.raises(NotFoundError):
            await client.schedules.get(created.id)
