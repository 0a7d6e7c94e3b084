"""Fixtures for API tests: the real app on a real database, API keys per role, an HTTP client.

``api_app`` is :func:`api.app.create_app` with every route module of ``ROUTE_MODULES`` and
``public_url=http://factory.test`` (so ingress URLs are predictable). ``make_key(role, team=...)``
creates keys in any team; ``admin_key``/``member_key``/``worker_key`` are keys of the default team,
``other_team_key`` a member key of a second team (for "another team's resource is a 404" tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import builders
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.runs.new_run import Creator
from store.clock import Clock, SystemClock
from store.crypto import SecretBox
from store.db import create_engine

PUBLIC_URL = "http://factory.test"
MakeKey = Callable[..., Awaitable[str]]


@pytest.fixture
def api_settings(tmp_path: Path) -> ServerSettings:
    return ServerSettings(data_dir=tmp_path, public_url=PUBLIC_URL, max_attachment_bytes=4096)


@pytest.fixture
def api_app(api_settings: ServerSettings, engine: AsyncEngine, box: SecretBox) -> web.Application:
    return create_app(api_settings, engine, box, route_modules=ROUTE_MODULES)


@pytest.fixture
async def client(aiohttp_client: Any, api_app: web.Application) -> TestClient[Any, Any]:
    result: TestClient[Any, Any] = await aiohttp_client(api_app)
    return result


@pytest.fixture
def make_key(sessions: async_sessionmaker[AsyncSession]) -> MakeKey:
    """``await make_key("member", team="default", worker_hosts=None, name=None)`` -> plaintext key."""

    async def make(
        role: str, *, team: str = "default", worker_hosts: list[str] | None = None, name: str | None = None
    ) -> str:
        async with sessions() as s, s.begin():
            row = await builders.team(s, team)
            return await builders.api_key(
                s, SystemClock(), row.id, role, name=name, worker_hosts=worker_hosts
            )

    return make


@pytest.fixture
async def team_id(sessions: async_sessionmaker[AsyncSession]) -> str:
    """Id of the default team (created if needed)."""
    async with sessions() as s, s.begin():
        return (await builders.team(s)).id


@pytest.fixture
async def admin_key(make_key: MakeKey) -> str:
    return await make_key("admin")


@pytest.fixture
async def member_key(make_key: MakeKey) -> str:
    return await make_key("member")


@pytest.fixture
async def worker_key(make_key: MakeKey) -> str:
    return await make_key("worker", worker_hosts=["host-a"])


@pytest.fixture
async def other_team_key(make_key: MakeKey) -> str:
    return await make_key("member", team="other-team")


SeedRun = Callable[..., Awaitable[str]]


@pytest.fixture
def seed_run(sessions: async_sessionmaker[AsyncSession]) -> SeedRun:
    """``await seed_run(team="default", clock=None, prompt=..., **columns)`` -> run id.

    Inserts a run through :func:`api.runs.records.create_run` (optionally at a ManualClock's time),
    then overwrites any given Run columns (``state``, ``factory_uid``...) directly, as a worker would.
    """

    async def seed(
        *,
        team: str = "default",
        clock: Clock | None = None,
        prompt: str = "seeded prompt",
        title: str | None = None,
        agent_config: dict[str, Any] | None = None,
        source: str = "API",
        creator_uid: str = "key_seed",
        **columns: Any,
    ) -> str:
        async with sessions() as s, s.begin():
            row = await builders.team(s, team)
            run = await builders.run(
                s,
                clock or SystemClock(),
                row.id,
                prompt=prompt,
                title=title,
                agent_config=agent_config,
                source=source,
                creator=Creator("service_account", creator_uid, "seed"),
                **columns,
            )
            return run.run_id

    return seed


@pytest.fixture
async def replicas(
    db_url: str, engine: AsyncEngine, box: SecretBox, tmp_path: Path
) -> AsyncIterator[tuple[TestClient[Any, Any], TestClient[Any, Any]]]:
    """Two apps serving the same database through engines of their own (two replicas), started; closed
    with their second engine afterwards."""
    second = create_engine(db_url)
    apps = [
        create_app(ServerSettings(data_dir=tmp_path), eng, box, route_modules=ROUTE_MODULES)
        for eng in (engine, second)
    ]
    a, b = [TestClient(TestServer(app)) for app in apps]
    await a.start_server()
    await b.start_server()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
        await second.dispose()
