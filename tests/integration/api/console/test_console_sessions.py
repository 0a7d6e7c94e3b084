"""Console sign-in, sessions and request rules against the real app (docs/console.md, "Security"), on SQLite
and PostgreSQL: cookies, CSP and framing headers, CSRF and cross-site refusal, roles, revocation, expiry."""

from __future__ import annotations

import datetime as dt
from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.console.sessions import COOKIE, SESSION_SETTINGS, SessionSettings
from api.context import ServerSettings
from store import apikeys
from store.clock import ManualClock, SystemClock
from store.crypto import SecretBox
from store.models import ConsoleSession

from .support import sign_in, token


async def test_sign_in_opens_a_server_side_session_and_never_keeps_the_key(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    resp = await sign_in(client, admin_key)
    assert resp.status == 303 and resp.headers["Location"] == "/console/factories"
    cookie = resp.cookies[COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/console"
    assert not cookie["secure"]  # the public URL is http here
    assert admin_key not in str(resp.headers) and admin_key not in cookie.value
    page = await client.get("/console/factories")
    assert page.status == 200 and admin_key not in await page.text()
    async with sessions() as s:
        [row] = (await s.scalars(select(ConsoleSession))).all()
    assert row.id != cookie.value and len(row.id) == 64  # only a digest of the cookie is stored


async def test_every_console_page_has_a_strict_policy_and_no_framing(client: TestClient[Any, Any]) -> None:
    for path in ("/console/login", "/console/factories"):
        resp = await client.get(path, allow_redirects=False)
        csp = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert resp.headers["X-Frame-Options"] == "DENY" and resp.headers["Cache-Control"] == "no-store"
    root = await client.get("/", allow_redirects=False)
    assert root.status == 302 and root.headers["Location"] == "/console/"
    away = await client.get("/console/factories", allow_redirects=False)
    assert away.status == 303 and away.headers["Location"].startswith("/console/login?next=")


async def test_state_changes_need_the_csrf_token_and_the_same_site(
    client: TestClient[Any, Any], member_key: str
) -> None:
    await sign_in(client, member_key)
    html = await (await client.get("/console/factories")).text()
    csrf = token(html, "csrf_token")
    resp = await client.post("/console/logout", data={}, allow_redirects=False)
    assert resp.status == 403 and "CSRF" in await resp.text()
    resp = await client.post(
        "/console/logout",
        data={"csrf_token": csrf},
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        allow_redirects=False,
    )
    assert resp.status == 403 and "cross-site" in await resp.text()
    assert (await client.get("/console/factories", allow_redirects=False)).status == 200  # still signed in
    resp = await client.post("/console/logout", data={"csrf_token": csrf}, allow_redirects=False)
    assert resp.status == 303
    assert (await client.get("/console/factories", allow_redirects=False)).status == 303  # signed out


async def test_worker_keys_and_bad_keys_cannot_sign_in(client: TestClient[Any, Any], worker_key: str) -> None:
    resp = await sign_in(client, worker_key)
    assert resp.status == 401 and "Worker keys cannot sign in" in await resp.text()
    resp = await sign_in(client, "fk_not_a_key")
    assert resp.status == 401 and COOKIE not in resp.cookies
    page = await client.get("/console/login")
    resp = await client.post(
        "/console/login", data={"api_key": "x", "login_token": "forged"}, allow_redirects=False
    )
    assert resp.status == 403 and page.status == 200


async def test_revoking_the_key_ends_its_sessions(
    client: TestClient[Any, Any], sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    async with sessions() as s, s.begin():
        key = await builders.api_key(s, SystemClock(), team_id, "member", name="laptop")
    await sign_in(client, key)
    assert (await client.get("/console/factories", allow_redirects=False)).status == 200
    async with sessions() as s, s.begin():
        who = await apikeys.authenticate(s, SystemClock(), key)
        assert who is not None
        await apikeys.revoke_key(s, SystemClock(), team_id, who.key_id)
    assert (await client.get("/console/factories", allow_redirects=False)).status == 303


async def test_sessions_expire_when_idle_and_at_their_absolute_end(
    aiohttp_client: Any, api_settings: ServerSettings, engine: AsyncEngine, box: SecretBox, admin_key: str
) -> None:
    clock = ManualClock(dt.datetime.now(dt.UTC))
    app = create_app(api_settings, engine, box, clock=clock, route_modules=ROUTE_MODULES)
    app[SESSION_SETTINGS] = SessionSettings(idle=dt.timedelta(minutes=30), absolute=dt.timedelta(hours=2))
    client = await aiohttp_client(app)
    await sign_in(client, admin_key)
    for _ in range(3):
        clock.advance(29 * 60)  # active: never idle for 30 minutes
        assert (await client.get("/console/factories", allow_redirects=False)).status == 200
    clock.advance(40 * 60)  # past the absolute end (2 h), and idle too
    assert (await client.get("/console/factories", allow_redirects=False)).status == 303
    await sign_in(client, admin_key)
    clock.advance(31 * 60)
    assert (await client.get("/console/factories", allow_redirects=False)).status == 303


async def test_after_sign_in_only_console_paths_are_followed(
    client: TestClient[Any, Any], admin_key: str
) -> None:
    assert (await sign_in(client, admin_key, "/console/runs")).headers["Location"] == "/console/runs"
    for evil in ("https://evil.example/", "//evil.example/x", "/console/\\evil"):
        client.session.cookie_jar.clear()
        resp = await sign_in(client, admin_key, evil)
        assert resp.headers["Location"] == "/console/factories"


async def test_untrusted_text_renders_as_text(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    async with sessions() as s, s.begin():
        await builders.factory(
            s,
            SystemClock(),
            team_id,
            "xss",
            description="<img src=x onerror=alert(1)></script><script>alert(2)</script>",
        )
    await sign_in(client, admin_key)
    html = await (await client.get("/console/factories")).text()
    assert "<img src=x" not in html and "<script>alert" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
