"""The console's secrets and API-keys pages against the real app (docs/console.md, "Pages"), on SQLite and
PostgreSQL: values and keys shown once in the POST's own response (never in a URL, never again), admin-only
changes refused to members with 403, untrusted names rendered as text."""

from __future__ import annotations

import re
from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import apikeys
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import ApiKey

from .support import signed_in_csrf

SHOWN = re.compile(r'<code id="shown-(?:value|key)">([^<]+)</code>')


async def test_generated_secret_value_is_shown_once_in_the_post_response(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> None:
    csrf = await signed_in_csrf(client, admin_key)
    resp = await client.post(
        "/console/secrets",
        data={"csrf_token": csrf, "name": "hook-secret", "value": "", "generate": "on", "scope": "webhook"},
        allow_redirects=False,
    )
    html = await resp.text()
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    [value] = SHOWN.findall(html)
    async with sessions() as s:
        team = await builders.team(s)
        assert await secret_store.reveal(s, box, team.id, "hook-secret") == (value, 1)
    again = await (await client.get("/console/secrets")).text()
    assert "hook-secret" in again and value not in again and "shown-value" not in again
    # a given value adds a version and is never echoed
    resp = await client.post(
        "/console/secrets",
        data={"csrf_token": csrf, "name": "hook-secret", "value": "typed-by-hand", "scope": "webhook"},
    )
    html = await resp.text()
    assert resp.status == 200 and "version 2" in html and "typed-by-hand" not in html
    assert "shown-value" not in html


async def test_secret_form_errors_keep_the_page(client: TestClient[Any, Any], admin_key: str) -> None:
    csrf = await signed_in_csrf(client, admin_key)
    resp = await client.post("/console/secrets", data={"csrf_token": csrf, "name": "bad name!", "value": "x"})
    assert resp.status == 400 and "invalid secret name" in await resp.text()
    resp = await client.post(
        "/console/secrets", data={"csrf_token": csrf, "name": "<img src=x>", "value": "x"}
    )
    html = await resp.text()
    assert resp.status == 400 and "<img src=x>" not in html and "&lt;img src=x&gt;" in html
    resp = await client.post(
        "/console/secrets", data={"csrf_token": csrf, "name": "n", "value": "x", "generate": "on"}
    )
    assert resp.status == 400


async def test_members_read_secrets_and_keys_but_cannot_change_them(
    client: TestClient[Any, Any],
    member_key: str,
    make_key: Any,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    team_id: str,
) -> None:
    await make_key("member", name="<img src=x onerror=alert(1)>")
    async with sessions() as s, s.begin():
        await builders.secret(s, box, SystemClock(), team_id, "deploy-token", "v", scope="run")
    csrf = await signed_in_csrf(client, member_key)
    html = await (await client.get("/console/secrets")).text()
    assert "deploy-token" in html and 'action="/console/secrets"' not in html
    keys = await (await client.get("/console/keys")).text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in keys and "<img src=x" not in keys
    assert 'action="/console/keys"' not in keys and "/revoke" not in keys and "read-only" in keys
    resp = await client.post("/console/secrets", data={"csrf_token": csrf, "name": "x", "generate": "on"})
    assert resp.status == 403 and "admin" in await resp.text()
    resp = await client.post("/console/keys", data={"csrf_token": csrf, "name": "x", "role": "admin"})
    assert resp.status == 403
    async with sessions() as s:
        key_id = (await s.scalars(select(ApiKey.id).where(ApiKey.role == "member"))).first()
    resp = await client.post(f"/console/keys/{key_id}/revoke", data={"csrf_token": csrf})
    assert resp.status == 403
    async with sessions() as s:
        assert (await s.get(ApiKey, key_id)).revoked_at is None  # type: ignore[union-attr]


async def test_admin_creates_a_key_shown_once_and_revokes_it(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    csrf = await signed_in_csrf(client, admin_key)
    resp = await client.post(
        "/console/keys",
        data={"csrf_token": csrf, "name": "builder", "role": "worker", "worker_hosts": "b-01, b-02"},
        allow_redirects=False,
    )
    html = await resp.text()
    assert resp.status == 200 and "Location" not in resp.headers
    [plaintext] = SHOWN.findall(html)
    async with sessions() as s, s.begin():
        who = await apikeys.authenticate(s, SystemClock(), plaintext)
    assert who is not None and who.role == "worker" and who.worker_hosts == ("b-01", "b-02")
    page = await (await client.get("/console/keys")).text()
    assert plaintext not in page and plaintext[:10] in page and "b-01, b-02" in page
    # a worker key needs hosts; only worker keys take them
    resp = await client.post("/console/keys", data={"csrf_token": csrf, "name": "w", "role": "worker"})
    assert resp.status == 400 and "worker" in await resp.text()
    resp = await client.post(
        "/console/keys", data={"csrf_token": csrf, "name": "m", "role": "member", "worker_hosts": "h"}
    )
    assert resp.status == 400
    # revoke (CSRF-checked POST, confirmed in the page)
    assert 'data-confirm="Revoke key builder?' in page
    resp = await client.post(f"/console/keys/{who.key_id}/revoke", data={}, allow_redirects=False)
    assert resp.status == 403
    resp = await client.post(
        f"/console/keys/{who.key_id}/revoke", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert resp.status == 303 and resp.headers["Location"] == "/console/keys"
    async with sessions() as s, s.begin():
        assert await apikeys.authenticate(s, SystemClock(), plaintext) is None
    resp = await client.post("/console/keys/key_nope/revoke", data={"csrf_token": csrf})
    assert resp.status == 404
