"""Ingress authentication per mode: bearer token, URL token, provider signatures, rotation."""

from __future__ import annotations

import datetime as dt
import json

import builders
import pytest

from api.ingress.signatures import generate_standard_webhooks_secret, sign
from store import secrets as secret_store


async def _rejected(ingress, hook, resp, n: int) -> None:
    assert resp.status == 401
    assert resp.content_type == "application/problem+json"
    assert (await resp.json())["error_code"] == "authentication_required"
    entries = await ingress.deliveries(hook)
    assert [e.status for e in entries] == ["Rejected (auth)"] * n
    assert all(e.payload is None for e in entries)
    assert all(hook.secret not in (e.detail or "") for e in entries)


async def test_token_mode(ingress) -> None:
    hook = await ingress.webhook()
    resp = await ingress.post(hook, {"a": 1}, auth=False)
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    await _rejected(ingress, hook, resp, 1)
    await _rejected(
        ingress, hook, await ingress.post(hook, auth=False, headers={"Authorization": "Bearer nope"}), 2
    )
    basic = {"Authorization": f"Basic {hook.secret}"}
    await _rejected(ingress, hook, await ingress.post(hook, auth=False, headers=basic), 3)
    prefix = {"Authorization": f"Bearer {hook.secret[:-1]}"}
    await _rejected(ingress, hook, await ingress.post(hook, auth=False, headers=prefix), 4)
    assert (await ingress.post(hook, {"a": 1})).status == 202
    lower = {"Authorization": f"bearer {hook.secret}"}
    assert (await ingress.post(hook, {"a": 2}, auth=False, headers=lower)).status == 202


async def test_rejected_entries_record_header_identity_and_declared_size(ingress) -> None:
    hook = await ingress.webhook()
    raw = b'{"a": 1}'
    await ingress.post(hook, raw=raw, auth=False, delivery_id="evt-9")
    await ingress.post(hook, raw=raw, auth=False)
    first, second = await ingress.deliveries(hook)
    assert (first.delivery_id, first.size, first.detail) == ("evt-9", len(raw), "missing bearer token")
    assert second.delivery_id == "unknown"  # the body of an unauthenticated request is never read


async def test_url_token_mode(ingress) -> None:
    hook = await ingress.webhook(auth_mode="url_token")
    await _rejected(ingress, hook, await ingress.post(hook, auth=False), 1)  # no token segment
    await _rejected(ingress, hook, await ingress.post(hook, path=f"{hook.path}/wrong-token"), 2)
    bearer = {"Authorization": f"Bearer {hook.secret}"}  # a header is not the URL credential
    await _rejected(ingress, hook, await ingress.post(hook, auth=False, headers=bearer), 3)
    resp = await ingress.post(hook, {"ok": True})
    assert resp.status == 202


@pytest.mark.parametrize("scheme", ["standard_webhooks", "stripe", "github", "slack"])
async def test_signature_modes_reject_unsigned_bad_and_stale(ingress, scheme: str) -> None:
    hook = await ingress.webhook(auth_mode="signature", scheme=scheme)
    raw = json.dumps({"type": "invoice.paid", "id": 7}).encode()
    now = ingress.clock.now()
    await _rejected(ingress, hook, await ingress.post(hook, raw=raw, auth=False), 1)
    other = generate_standard_webhooks_secret() if scheme == "standard_webhooks" else "another-secret"
    forged = sign(scheme, other, raw, now, "msg-1")
    await _rejected(ingress, hook, await ingress.post(hook, raw=raw, auth=False, headers=forged), 2)
    tampered = sign(scheme, hook.secret, raw, now, "msg-1")
    await _rejected(ingress, hook, await ingress.post(hook, raw=raw + b" ", auth=False, headers=tampered), 3)
    expected = 3
    if scheme in ("standard_webhooks", "stripe", "slack"):  # schemes with a 5-minute window
        stale = sign(scheme, hook.secret, raw, now - dt.timedelta(seconds=301), "msg-1")
        await _rejected(ingress, hook, await ingress.post(hook, raw=raw, auth=False, headers=stale), 4)
        expected = 4
        ok_old = sign(scheme, hook.secret, raw, now - dt.timedelta(seconds=290), "msg-2")
        assert (await ingress.post(hook, raw=raw, auth=False, headers=ok_old)).status == 202
    resp = await ingress.post(hook, raw=raw.replace(b"7", b"8"), delivery_id="msg-3")
    assert resp.status == 202
    entries = await ingress.deliveries(hook)
    assert [e.status for e in entries][:expected] == ["Rejected (auth)"] * expected
    assert entries[-1].status == "Accepted"


async def test_svix_headers_are_accepted(ingress) -> None:
    hook = await ingress.webhook(auth_mode="signature", scheme="svix")
    raw = b'{"svix": true}'
    headers = sign("standard_webhooks", hook.secret, raw, ingress.clock.now(), "msg_svix_1")
    svix = {k.replace("webhook-", "svix-"): v for k, v in headers.items()}
    resp = await ingress.post(hook, raw=raw, auth=False, headers=svix)
    assert resp.status == 202
    assert await resp.json() == {"delivery_id": "msg_svix_1"}  # provider id of a signed webhook


async def test_signature_webhook_without_a_supplied_secret_rejects_everything(ingress) -> None:
    hook = await ingress.webhook(auth_mode="signature", scheme="stripe", secret=None)
    raw = b'{"a": 1}'
    signed = sign("stripe", "whatever-the-sender-uses", raw, ingress.clock.now())
    resp = await ingress.post(hook, raw=raw, auth=False, headers=signed)
    assert resp.status == 401
    [entry] = await ingress.deliveries(hook)
    assert entry.detail == "signing secret not supplied yet"


async def test_rotation_kills_the_old_token_at_once(ingress) -> None:
    hook = await ingress.webhook()
    old = hook.secret
    assert (await ingress.post(hook, {"n": 1})).status == 202  # caches the old version's value
    await ingress.rotate(hook, "brand-new-token-value")
    resp = await ingress.post(hook, {"n": 2}, auth=False, headers={"Authorization": f"Bearer {old}"})
    assert resp.status == 401
    assert (await ingress.post(hook, {"n": 3})).status == 202


async def test_rotation_of_a_provider_signing_secret(ingress) -> None:
    hook = await ingress.webhook(auth_mode="signature", scheme="github")
    old = hook.secret
    raw = b'{"action": "opened"}'
    assert (await ingress.post(hook, raw=raw, delivery_id="d-1")).status == 202
    await ingress.rotate(hook, "new-github-secret")
    stale = sign("github", old, raw, ingress.clock.now(), "d-2")
    assert (await ingress.post(hook, raw=raw, auth=False, headers=stale)).status == 401
    assert (await ingress.post(hook, raw=raw, delivery_id="d-3")).status == 202


async def test_secret_value_never_reaches_the_delivery_log(ingress) -> None:
    hook = await ingress.webhook()
    await ingress.post(hook, auth=False, headers={"Authorization": f"Bearer {hook.secret}x"})
    await ingress.post(hook, {"n": 1})
    for entry in await ingress.deliveries(hook):
        assert hook.secret not in (entry.detail or "")
        assert hook.secret.encode() not in (entry.payload or b"")


async def test_a_secret_deleted_and_recreated_under_its_name_uses_the_new_value(ingress) -> None:
    hook = await ingress.webhook()
    old = hook.secret
    assert (await ingress.post(hook, {"n": 1})).status == 202  # caches version 1 of the old secret
    async with ingress.sessions() as s, s.begin():
        await secret_store.delete_secret(s, ingress.team_id, f"{hook.name}-secret")
    assert (await ingress.post(hook, {"n": 2})).status == 401  # no secret: nothing authenticates
    async with ingress.sessions() as s, s.begin():
        info = await builders.secret(
            s, ingress.box, ingress.clock, ingress.team_id, f"{hook.name}-secret", "v2"
        )
    assert info.version == 1  # the same (name, version) as before, with another value
    hook.secret = "v2"
    assert (
        await ingress.post(hook, {"n": 3}, auth=False, headers={"Authorization": f"Bearer {old}"})
    ).status == 401
    assert (await ingress.post(hook, {"n": 4})).status == 202
