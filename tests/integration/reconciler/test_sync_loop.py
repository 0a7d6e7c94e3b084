"""The sync check of ``serve``'s reconciler lifecycle in the real app, on SQLite and PostgreSQL: drift made
through the API turns the factory OutOfSync; without self-heal it stays so (and is listed) until a reconcile
is forced; the claim is dropped on shutdown (docs/reconcile.md, "Sync status", "Self-heal")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import builders
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from test_apply import add_secret, hook, write_tree

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from factoryctl.serve.reconcile import manager_of, reconciler_lifecycle
from reconciler.sources.git import GitSource
from reconciler.sources.local import DirectorySource
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import Factory

T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T | None]], what: str, seconds: float = 30.0) -> T:
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {seconds}s (last: {value!r})")
        await asyncio.sleep(0.05)


async def test_without_self_heal_drift_is_reported_until_a_forced_reconcile(
    tmp_path: Path,
    aiohttp_client: Any,
    engine: AsyncEngine,
    box: SecretBox,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, clock, team.id, "admin")
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "defs", webhooks={"alerts": hook()})
    lifecycle = reconciler_lifecycle(
        DirectorySource(root), str(root), "default", self_heal=False, sync_interval=0.1
    )
    app = create_app(
        ServerSettings(data_dir=tmp_path / "data"),
        engine,
        box,
        lifecycles=[lifecycle],
        route_modules=ROUTE_MODULES,
    )
    client = await aiohttp_client(app)
    auth = {"Authorization": f"Bearer {key}"}

    async def factory() -> dict[str, Any] | None:
        listed = (await (await client.get("/api/v1/factory", headers=auth)).json())["factories"]
        if not listed:
            return None
        body: dict[str, Any] = await (
            await client.get(f"/api/v1/factory/{listed[0]['uid']}", headers=auth)
        ).json()
        return body

    async def status(wanted: str) -> dict[str, Any] | None:
        found = await factory()
        return found if found and found["sync"]["checked_at"] and found["sync"]["status"] == wanted else None

    synced = await until(lambda: status("Synced"), "the first apply")
    assert synced["manager"] == synced["manager"] | {"kind": "directory", "location": str(root)}
    uid, alerts = synced["uid"], synced["webhooks"][0]
    resp = await client.patch(
        f"/api/v1/factory/{uid}/webhooks/{alerts['uid']}", json={"enabled": False}, headers=auth
    )
    assert resp.status == 200

    drifted = await until(lambda: status("OutOfSync"), "the drift seen")
    assert drifted["sync"]["drift"] == [
        {"action": "update", "kind": "webhook", "name": "alerts", "uid": alerts["uid"], "fields": ["enabled"]}
    ]
    # Later checks still see it, and nothing reverted it.
    first_seen = drifted["sync"]["checked_at"]
    later = await until(lambda: _later(status, first_seen), "another check")
    assert later["webhooks"][0]["enabled"] is False and later["sync"]["last_heal"] is None

    resp = await client.post(f"/api/v1/factory/{uid}/reconcile", headers=auth)
    assert resp.status == 202
    healed = await until(lambda: status("Synced"), "the forced reconcile")
    assert healed["webhooks"][0]["enabled"] is True

    await client.close()  # shutdown: the serve's claim is dropped
    async with sessions() as s:
        assert (await s.execute(select(Factory.manager).where(Factory.uid == uid))).scalar_one() is None


async def _later(
    status: Callable[[str], Awaitable[dict[str, Any] | None]], after: str
) -> dict[str, Any] | None:
    found = await status("OutOfSync")
    return found if found and found["sync"]["checked_at"] > after else None


async def test_a_git_sources_credentials_are_never_answered_or_stored(
    tmp_path: Path,
    aiohttp_client: Any,
    engine: AsyncEngine,
    box: SecretBox,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The reconcile answer's ``source`` and the manager's location hide an https URL's credentials."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, clock, team.id, "admin")
        f = await builders.factory(s, clock, team.id, "defs", managed_by="definitions", applied_revision="r1")
    url = "https://robot:s3cret-token@127.0.0.1:9/acme/defs.git"  # nothing listens: fetches fail
    source = GitSource(url, "main", tmp_path / "data", poll_interval=0.1)
    lifecycle = reconciler_lifecycle(source, f"{url}@main", "default")
    settings = ServerSettings(data_dir=tmp_path / "data")
    app = create_app(settings, engine, box, lifecycles=[lifecycle], route_modules=ROUTE_MODULES)
    client = await aiohttp_client(app)
    resp = await client.post(f"/api/v1/factory/{f.uid}/reconcile", headers={"Authorization": f"Bearer {key}"})
    body = await resp.json()
    assert resp.status == 202 and body["source"] == "https://***@127.0.0.1:9/acme/defs.git@main"
    assert manager_of(source, f"{url}@main", 1.0).location == body["source"]
    await client.close()
