"""The factory page's and the factory API's sync status (docs/console.md, "Factory page"; docs/reconcile.md,
"Sync status"), on SQLite and PostgreSQL: status, drift, commit links only to https forge URLs, escaping."""

from __future__ import annotations

from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.clock import SystemClock
from store.models import ApplyRecord

from .support import sign_in

SHA = "0123456789abcdef0123456789abcdef01234567"
COMMIT = {
    "sha": SHA,
    "subject": "Tighten <b>alerts</b>",
    "author": "Ada Lovelace",
    "author_email": "ada@example.com",
    "committed_at": "2026-11-26T12:00:00+00:00",
    "remote": "https://github.com/acme/defs.git",
    "url": f"https://github.com/acme/defs/commit/{SHA}",
}
DRIFT = [{"action": "update", "kind": "webhook", "name": "alerts", "uid": "wh_x", "fields": ["enabled"]}]


async def drifted_factory(
    sessions: async_sessionmaker[AsyncSession], team_id: str, commit: dict[str, Any]
) -> str:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        f = await builders.factory(s, clock, team_id, "defs", managed_by="definitions", applied_revision=SHA)
        f.applied_commit = commit
        f.sync = {
            "status": "OutOfSync",
            "revision": SHA,
            "drift": DRIFT,
            "checked_at": "2026-11-26T12:01:00.000Z",
            "message": "",
        }
        f.manager = {
            "kind": "git",
            "location": "https://github.com/acme/defs.git@main",
            "seen_at": "2026-11-26T12:01:00.000Z",
            "expires_at": "2999-01-01T00:00:00.000Z",
        }
        s.add(
            ApplyRecord(
                team_id=team_id,
                factory_uid=f.uid,
                factory_name="defs",
                revision=SHA,
                outcome="succeeded",
                started_at=clock.now(),
                duration_ms=5,
                summary={},
                errors=[],
                commit=commit,
            )
        )
        return f.uid


async def test_page_shows_sync_drift_commit_and_manager(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await drifted_factory(sessions, team_id, COMMIT)
    await sign_in(client, admin_key)
    resp = await client.get(f"/console/factories/{uid}")
    page = await resp.text()
    assert resp.status == 200
    assert '<span class="pill bad"' in page and ">OutOfSync</span>" in page
    link = f'<a href="https://github.com/acme/defs/commit/{SHA}" rel="noopener noreferrer">'
    assert f"{link}<code>{SHA[:12]}</code></a>" in page
    assert page.count(f"https://github.com/acme/defs/commit/{SHA}") == 2  # applied commit and the apply row
    assert "Tighten &lt;b&gt;alerts&lt;/b&gt;" in page and "<b>alerts</b>" not in page
    assert "by Ada Lovelace" in page
    assert "<td>update</td><td>webhook</td><td>alerts</td>" in page and ">enabled</td>" in page
    assert "serve following git <code>https://github.com/acme/defs.git@main</code>" in page


async def test_a_stored_link_that_is_not_https_is_not_rendered(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await drifted_factory(sessions, team_id, COMMIT | {"url": "javascript:alert(1)"})
    await sign_in(client, admin_key)
    page = await (await client.get(f"/console/factories/{uid}")).text()
    assert "javascript:" not in page and f"<code>{SHA[:12]}</code>" in page


async def test_factory_api_has_the_sync_object(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await drifted_factory(sessions, team_id, COMMIT)
    clock = SystemClock()
    async with sessions() as s, s.begin():
        api = await builders.factory(s, clock, team_id, "by-api")
        fresh = await builders.factory(
            s, clock, team_id, "fresh", managed_by="definitions", applied_revision="r1"
        )
    auth = {"Authorization": f"Bearer {admin_key}"}
    body = await (await client.get(f"/api/v1/factory/{uid}", headers=auth)).json()
    assert body["sync"] == {
        "status": "OutOfSync",
        "revision": SHA,
        "drift": DRIFT,
        "checked_at": "2026-11-26T12:01:00.000Z",
        "message": "",
        "last_heal": None,
    }
    assert body["applied_commit"] == COMMIT and body["manager"]["kind"] == "git"
    assert body["last_apply"]["commit"] == COMMIT
    assert (await (await client.get(f"/api/v1/factory/{api.uid}", headers=auth)).json())["sync"] is None
    never = (await (await client.get(f"/api/v1/factory/{fresh.uid}", headers=auth)).json())["sync"]
    assert never["status"] == "Unknown" and never["revision"] == "r1" and never["checked_at"] is None
