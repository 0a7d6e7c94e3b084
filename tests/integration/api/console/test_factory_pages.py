"""The console's factory and webhook pages against the real app (docs/console.md, "Pages"), on SQLite and
PostgreSQL: what they show, admin actions through POST forms (CSRF, role), secrets shown once, escaping."""

from __future__ import annotations

import datetime as dt
import html as htmllib
import json
import re
from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.clock import SystemClock
from store.models import ApplyRecord

from .support import csrf, sign_in, token

SECRET = re.compile(r'id="new-secret">([^<]+)<')


async def api_factory(sessions: async_sessionmaker[AsyncSession], team_id: str, name: str = "shop") -> str:
    async with sessions() as s, s.begin():
        return (await builders.factory(s, SystemClock(), team_id, name, description="Ships the shop")).uid


async def create_hook(client: TestClient[Any, Any], uid: str, name: str = "issues") -> tuple[str, str]:
    """Create a token webhook through the console form: its UID and the secret shown once."""
    page = f"/console/factories/{uid}"
    resp = await client.post(
        f"{page}/webhooks",
        data={"csrf_token": await csrf(client, page), "name": name, "auth_mode": "token"},
        allow_redirects=False,
    )
    body = await resp.text()
    assert resp.status == 200, body
    match = SECRET.search(body)
    assert match is not None
    wid = re.search(r'/webhooks/(wh_[A-Za-z0-9]+)/enabled"', body)
    assert wid is not None
    return wid.group(1), htmllib.unescape(match.group(1))


async def deliver(client: TestClient[Any, Any], wid: str, secret: str, payload: object, did: str) -> int:
    resp = await client.post(
        f"/webhooks/w/{wid}",
        data=json.dumps(payload),
        headers={"Authorization": f"Bearer {secret}", "X-Factory-Delivery-Id": did},
    )
    return resp.status


async def test_factory_page_shows_everything_and_failed_apply_errors(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        f = await builders.factory(
            s,
            clock,
            team_id,
            "defs",
            managed_by="definitions",
            applied_revision="abc123",
            conditions=[
                {"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": "bad webhook"},
                {"type": "Stalled", "status": "True", "reason": "ApplyFailed", "message": "bad webhook"},
            ],
        )
        hook = await builders.webhook(s, clock, team_id, f.uid, "alerts", managed_by="definitions")
        auto = await builders.automation(
            s, clock, team_id, f.uid, "triage", [builders.webhook_trigger([hook.uid])]
        )
        await builders.environment(s, clock, team_id, "py", {"repos": []}, factory_uid=f.uid)
        await builders.schedule(
            s, clock, team_id, "nightly", "0 3 * * *", factory_uid=f.uid, timezone="Europe/Paris"
        )
        await builders.notification(s, clock, team_id, f.uid, "ops", failing=True, consecutive_failures=3)
        s.add(
            ApplyRecord(
                team_id=team_id,
                factory_uid=f.uid,
                factory_name="defs",
                revision="def456",
                outcome="failed",
                started_at=clock.now(),
                duration_ms=42,
                summary={},
                errors=[
                    {"rule": "FC010", "message": "unknown key", "path": "webhooks/alerts.yaml", "line": 7}
                ],
            )
        )
    await sign_in(client, admin_key)
    resp = await client.get(f"/console/factories/{f.uid}")
    page = await resp.text()
    assert resp.status == 200
    for text in (
        "defs",
        "ApplyFailed",
        "bad webhook",
        "Stalled",
        "alerts",
        "triage",
        "py",
        "nightly",
        "Europe/Paris",
        "ops",
        "Failing",
        "def456",
        "webhooks/alerts.yaml:7",
        "unknown key",
    ):
        assert text in page, text
    assert f"/console/factories/{f.uid}/webhooks/{hook.uid}" in page
    assert f"/console/factories/{f.uid}/automations/{auto.uid}" in page
    assert "Reconcile now" in page
    # definition-managed: the file a change belongs in, not the create form
    assert "webhooks/&lt;name&gt;.yaml" in page and 'name="auth_mode"' not in page
    # no definitions source on this server: reconcile is refused with the API's message
    resp = await client.post(
        f"/console/factories/{f.uid}/reconcile", data={"csrf_token": token(page, "csrf_token")}
    )
    assert resp.status == 503 and "no definitions source" in await resp.text()
    # the webhook page of a definition-managed webhook shows the file instead of a delete button
    hook_page = await (await client.get(f"/console/factories/{f.uid}/webhooks/{hook.uid}")).text()
    assert "webhooks/alerts.yaml" in hook_page and "/delete" not in hook_page


async def test_admin_creates_toggles_rotates_and_replays(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await api_factory(sessions, team_id)
    await sign_in(client, admin_key)
    page = await (await client.get(f"/console/factories/{uid}")).text()
    assert 'name="auth_mode"' in page and "No webhooks yet" in page
    wid, secret = await create_hook(client, uid)
    hook_path = f"/console/factories/{uid}/webhooks/{wid}"
    assert secret not in await (await client.get(hook_path)).text()  # shown once, on the POST only
    assert await deliver(client, wid, secret, {"n": 1}, "d-1") == 202

    form = {"csrf_token": await csrf(client, hook_path), "enabled": "false"}
    resp = await client.post(f"{hook_path}/enabled", data=form, allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"].startswith(hook_path)
    assert "Disabled" in await (await client.get(resp.headers["Location"])).text()
    assert await deliver(client, wid, secret, {"n": 2}, "d-2") == 404
    resp = await client.post(f"{hook_path}/enabled", data=form | {"enabled": "true"}, allow_redirects=False)
    assert resp.status == 303
    assert await deliver(client, wid, secret, {"n": 3}, "d-3") == 202

    resp = await client.post(f"{hook_path}/rotate-secret", data={"csrf_token": form["csrf_token"]})
    shown = await resp.text()
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    match = SECRET.search(shown)
    assert match is not None
    new_secret = htmllib.unescape(match.group(1))
    assert new_secret != secret and new_secret not in resp.url.path_qs
    again = await (await client.get(hook_path)).text()
    assert new_secret not in again and secret not in again
    assert await deliver(client, wid, secret, {"n": 4}, "d-4") == 401
    assert await deliver(client, wid, new_secret, {"n": 5}, "d-5") == 202

    # deliveries newest first; an Accepted one can be replayed
    again = await (await client.get(hook_path)).text()
    assert again.index("d-5") < again.index("d-3") < again.index("d-1")
    resp = await client.post(
        f"{hook_path}/replay",
        data={"csrf_token": form["csrf_token"], "delivery_id": "d-1"},
        allow_redirects=False,
    )
    assert resp.status == 303
    after = await (await client.get(resp.headers["Location"])).text()
    assert "Replayed" in after and "d-1/replay/" in after

    resp = await client.post(
        f"{hook_path}/delete", data={"csrf_token": form["csrf_token"]}, allow_redirects=False
    )
    assert resp.status == 303 and resp.headers["Location"].startswith(f"/console/factories/{uid}")
    assert (await client.get(hook_path)).status == 404
    assert await deliver(client, wid, new_secret, {"n": 6}, "d-6") == 404


async def test_members_see_no_admin_actions_and_their_posts_are_refused(
    client: TestClient[Any, Any], member_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await api_factory(sessions, team_id)
    async with sessions() as s, s.begin():
        hook = await builders.webhook(s, SystemClock(), team_id, uid, "issues")
        await builders.delivery(
            s, team_id, hook.uid, "d-1", received_at=dt.datetime.now(dt.UTC), payload=b"{}"
        )
    await sign_in(client, member_key)
    page = await (await client.get(f"/console/factories/{uid}")).text()
    assert "issues" in page and 'name="auth_mode"' not in page and "/reconcile" not in page
    hook_path = f"/console/factories/{uid}/webhooks/{hook.uid}"
    hook_page = await (await client.get(hook_path)).text()
    assert "d-1" in hook_page
    for action in ("/enabled", "/rotate-secret", "/delete", "/replay"):
        assert action not in hook_page, action
    csrf_token = token(hook_page, "csrf_token")
    for path in (
        f"{hook_path}/enabled",
        f"{hook_path}/rotate-secret",
        f"{hook_path}/delete",
        f"{hook_path}/replay",
        f"/console/factories/{uid}/webhooks",
        f"/console/factories/{uid}/reconcile",
    ):
        resp = await client.post(path, data={"csrf_token": csrf_token, "enabled": "false", "name": "x"})
        assert resp.status == 403 and "admin" in await resp.text(), path
    assert "Enabled" in await (await client.get(hook_path)).text()


async def test_posts_without_the_csrf_token_are_refused(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await api_factory(sessions, team_id)
    async with sessions() as s, s.begin():
        hook = await builders.webhook(s, SystemClock(), team_id, uid, "issues")
    await sign_in(client, admin_key)
    hook_path = f"/console/factories/{uid}/webhooks/{hook.uid}"
    for path in (f"{hook_path}/enabled", f"{hook_path}/rotate-secret", f"{hook_path}/delete"):
        resp = await client.post(path, data={"enabled": "false"})
        assert resp.status == 403 and "CSRF" in await resp.text()
    assert "Enabled" in await (await client.get(hook_path)).text()


async def test_payloads_render_escaped(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await api_factory(sessions, team_id)
    async with sessions() as s, s.begin():
        hook = await builders.webhook(s, SystemClock(), team_id, uid, "issues")
        now = dt.datetime.now(dt.UTC)
        for i, payload in enumerate(
            ({"x": "<img src=x onerror=alert(1)>"}, {"y": "</script><script>alert(1)</script>"})
        ):
            await builders.delivery(
                s, team_id, hook.uid, f"d-{i}", received_at=now, payload=json.dumps(payload).encode()
            )
        await builders.delivery(s, team_id, hook.uid, "<b>id</b>", received_at=now, status="Rejected: auth")
    await sign_in(client, admin_key)
    page = await (await client.get(f"/console/factories/{uid}/webhooks/{hook.uid}")).text()
    assert "<img src=x" not in page and "<script>alert" not in page and "<b>id" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "<pre>" in page and "&lt;b&gt;id&lt;/b&gt;" in page


async def test_unknown_and_foreign_pages_are_404(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    uid = await api_factory(sessions, team_id)
    await sign_in(client, admin_key)
    assert (await client.get("/console/factories/fa_nope")).status == 404
    assert (await client.get(f"/console/factories/{uid}/webhooks/wh_nope")).status == 404
    assert (await client.get("/console/factories/x", allow_redirects=False)).status == 404
