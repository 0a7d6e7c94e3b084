"""The claim answer carries the sandbox's network policy (docs/security.md, "Network policy"), computed
from the run's environment as it is at claim time, the same default for every run source: an allowlist
of the environment's repository hosts; ``none`` and ``open`` only when the environment says so; a run
without an environment gets an empty allowlist. Real app, real store (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import builders
import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.clock import SystemClock
from store.models import Environment

if TYPE_CHECKING:
    from conftest import MakeKey, NewRun

CLAIM = "/api/v1/workers/claim"
REPOS = [{"url": "https://github.com/acme/app.git"}, {"url": "git@gitlab.example.com:acme/lib.git"}]


async def claimed_network(client: Any, key: str) -> dict[str, Any]:
    resp = await client.post(
        CLAIM,
        json={"worker_host": "myhost", "wait_seconds": 0, "worker_id": "wk-1"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert resp.status == 200, await resp.text()
    network: dict[str, Any] = (await resp.json())["run"]["network"]
    return network


@pytest.mark.parametrize("source", ["API", "WEBHOOK", "SCHEDULE"])
async def test_every_source_gets_the_environment_s_policy_or_the_default(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
    source: str,
) -> None:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        await builders.environment(s, clock, team.id, "plain", {"repos": REPOS})
        await builders.environment(s, clock, team.id, "locked", {"repos": REPOS, "network": {"mode": "none"}})
        await builders.environment(s, clock, team.id, "wide", {"network": {"mode": "open"}})
        listed = {"repos": REPOS[:1], "network": {"mode": "allowlist", "allow": ["*.NPMJS.org:443"]}}
        await builders.environment(s, clock, team.id, "listed", listed)
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=["myhost"])
    expected: list[tuple[str | None, dict[str, Any]]] = [
        ("plain", {"mode": "allowlist", "allow": ["github.com:443", "gitlab.example.com:22"]}),
        ("locked", {"mode": "none", "allow": []}),
        ("wide", {"mode": "open", "allow": []}),
        ("listed", {"mode": "allowlist", "allow": ["github.com:443", "*.npmjs.org:443"]}),
        (None, {"mode": "allowlist", "allow": []}),
        ("deleted-since", {"mode": "allowlist", "allow": []}),
    ]
    for environment, network in expected:
        config = {"environment_id": environment} if environment else {}
        await new_run(worker_host="myhost", agent_config=config, source=source)
        assert await claimed_network(client, key) == network, environment


async def test_the_policy_is_read_when_the_run_is_claimed(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        row = await builders.environment(s, clock, team.id, "web", {"repos": REPOS[:1]})
    await new_run(worker_host="myhost", agent_config={"environment_id": row.uid})  # by uid, too
    async with sessions() as s, s.begin():
        stored = await s.get(Environment, row.uid)
        assert stored is not None
        stored.spec = {"repos": REPOS[:1], "network": {"mode": "none"}}
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=["myhost"])
    assert await claimed_network(client, key) == {"mode": "none", "allow": []}
