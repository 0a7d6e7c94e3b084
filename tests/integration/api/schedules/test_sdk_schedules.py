"""The official Python SDK (``oz_agent_sdk``), unchanged, drives the schedules API on a real TCP port.

The SDK clients validate answers strictly (``_strict_response_validation``), so every field it knows must
have the type it declares; our extensions ride along as extra fields. The synchronous client runs in a
thread, since the server shares this test's event loop. SQLite is enough: the wire is what is tested.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import builders
import oz_agent_sdk
import pytest
from oz_agent_sdk.types.agent import ScheduledAgentItem, ScheduleListResponse

from api.app import create_app
from api.context import ServerSettings
from store.clock import ManualClock, SystemClock
from store.crypto import SecretBox
from store.db import create_engine, session_factory

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Served:
    base_url: str
    key: str
    other_key: str


@pytest.fixture
async def served(
    aiohttp_server: Any, sqlite_url: str, api_settings: ServerSettings, box: SecretBox
) -> AsyncIterator[Served]:
    engine = create_engine(sqlite_url)
    async with session_factory(engine)() as s, s.begin():
        home = await builders.team(s)
        other = await builders.team(s, builders.OTHER_TEAM)
        key = await builders.api_key(s, SystemClock(), home.id, "member", name="sdk")
        other_key = await builders.api_key(s, SystemClock(), other.id, "member")
    server = await aiohttp_server(create_app(api_settings, engine, box, clock=ManualClock(T0)))
    yield Served(f"http://127.0.0.1:{server.port}/api/v1", key, other_key)
    await engine.dispose()


def sync_client(base_url: str, key: str) -> oz_agent_sdk.OzAPI:
    return oz_agent_sdk.OzAPI(api_key=key, base_url=base_url, max_retries=0, _strict_response_validation=True)


def drive_sync(served: Served) -> None:
    with sync_client(served.base_url, served.key) as client:
        schedules = client.agent.schedules
        created = schedules.create(
            name="morning triage",
            cron_schedule="0 9 * * 1-5",
            prompt="Triage.",
            agent_config={"name": "triage", "model_id": "m-1"},
            metadata={"team": "ops"},
            enabled=True,
            mode="normal",
            team=True,
            agent_uid="ag_ignored",
            extra_body={"timezone": "Europe/Berlin"},
        )
        assert isinstance(created, ScheduledAgentItem)
        assert created.id.startswith("sch_")
        assert created.cron_schedule == "0 9 * * 1-5" and created.enabled is True
        assert created.history is not None and created.history.last_ran is None
        assert created.history.next_run == dt.datetime(2026, 1, 1, 8, tzinfo=dt.UTC)  # 09:00 in Berlin
        assert created.agent_config is not None and created.agent_config.api_model_id == "m-1"
        assert created.metadata == {"team": "ops"}
        assert created.scope is not None and created.scope.type == "Team"
        assert created.created_by is not None and created.created_by.type == "service_account"
        assert created.created_by.display_name == "sdk"
        assert created.created_at == created.updated_at == T0
        assert created.to_dict()["timezone"] == "Europe/Berlin"  # an extension, kept as an extra field

        listed = schedules.list()
        assert isinstance(listed, ScheduleListResponse)
        assert [s.id for s in listed.schedules] == [created.id]
        assert schedules.retrieve(created.id) == created

        updated = schedules.update(
            created.id, name="renamed", cron_schedule="30 9 * * *", enabled=True, prompt="New."
        )
        assert (updated.name, updated.prompt) == ("renamed", "New.")
        assert updated.history is not None
        assert updated.history.next_run == dt.datetime(2026, 1, 1, 8, 30, tzinfo=dt.UTC)

        paused = schedules.pause(created.id)
        assert paused.enabled is False and paused.history is not None and paused.history.next_run is None
        resumed = schedules.resume(created.id)
        assert resumed.enabled is True and resumed.history is not None and resumed.history.next_run

        with pytest.raises(oz_agent_sdk.UnprocessableEntityError) as bad:
            schedules.create(name="bad", cron_schedule="0 24 * * *", prompt="p")
        assert "hour: 24 is out of range" in str(bad.value)
        with pytest.raises(oz_agent_sdk.NotFoundError):
            schedules.retrieve("sch_nope")

        assert schedules.delete(created.id).success is True
        with pytest.raises(oz_agent_sdk.NotFoundError):
            schedules.retrieve(created.id)

    with sync_client(served.base_url, served.other_key) as other:
        assert other.agent.schedules.list().schedules == []


async def test_the_sync_sdk_drives_every_schedule_operation(served: Served) -> None:
    await asyncio.to_thread(drive_sync, served)


async def test_the_async_sdk_parses_the_answers(served: Served) -> None:
    async with oz_agent_sdk.AsyncOzAPI(
        api_key=served.key, base_url=served.base_url, max_retries=0, _strict_response_validation=True
    ) as client:
        schedules = client.agent.schedules
        created = await schedules.create(name="nightly", cron_schedule="0 3 * * *", prompt="Nightly.")
        assert created.history is not None
        assert created.history.next_run == dt.datetime(2026, 1, 1, 3, tzinfo=dt.UTC)
        assert (await schedules.list()).schedules == [created]
        assert (await schedules.retrieve(created.id)).name == "nightly"
        updated = await schedules.update(created.id, name="nightly", cron_schedule="0 3 * * *", enabled=False)
        assert updated.enabled is False and updated.prompt == "Nightly."  # kept when not sent
        assert (await schedules.resume(created.id)).enabled is True
        assert (await schedules.pause(created.id)).enabled is False
        assert (await schedules.delete(created.id)).success is True
        assert (await schedules.list()).schedules == []
