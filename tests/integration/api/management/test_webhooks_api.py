"""Webhook management over HTTP: create, list, get, enable/disable, rename, rotate, supply, delete."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from api.ingress import signatures
from store import secrets as secret_store
from store.models import Webhook

if TYPE_CHECKING:
    from conftest import Mgmt

BASE = "/api/v1/factory"


async def stored(mgmt: Mgmt, uid: str) -> Webhook:
    async with mgmt.sessions() as s:
        row = await s.get(Webhook, uid)
        assert row is not None
        return row


async def reveal(mgmt: Mgmt, name: str, version: int | None = None) -> tuple[str, int]:
    async with mgmt.sessions() as s:
        return await secret_store.reveal(s, mgmt.box, mgmt.team_id, name, version)


# --- create ---------------------------------------------------------------------------------------


async def test_create_token_webhook_shows_url_and_secret_once(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    created = await mgmt.webhook(fa, name="orders", delivery_id_header="X-Order-Event")
    uid = created["uid"]
    assert uid.startswith("wh_")
    assert created["ingress_url"] == f"http://factory.test/webhooks/w/{uid}"
    assert created["auth_mode"] == "token"
    assert created["secret_name"] == "webhook-orders-secret"
    assert created["delivery_id_header"] == "X-Order-Event"
    assert (
        created["enabled"] is True and created["managed_by"] == "api" and created["secret_configured"] is True
    )
    assert (await reveal(mgmt, "webhook-orders-secret"))[0] == created["secret"]

    status, got = await mgmt.call("GET", f"{BASE}/{fa}/webhooks/{uid}", mgmt.member)
    assert status == 200 and "secret" not in got
    assert got == {k: v for k, v in created.items() if k != "secret"}
    status, listed = await mgmt.call("GET", f"{BASE}/{fa}/webhooks", mgmt.member)
    assert status == 200 and [w["uid"] for w in listed["webhooks"]] == [uid]
    assert created["secret"] not in json.dumps(listed)


async def test_url_token_webhook_url_shows_placeholder_and_full_url_once(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    created = await mgmt.webhook(fa, name="alerts", auth_mode="url_token")
    assert created["ingress_url"] == f"http://factory.test/webhooks/w/{created['uid']}/{{token}}"
    assert created["ingress_url_with_token"] == created["ingress_url"].replace("{token}", created["secret"])
    assert secret_store.URL_SAFE_RE.match(created["secret"])
    _, got = await mgmt.call("GET", f"{BASE}/{fa}/webhooks/{created['uid']}")
    assert got["ingress_url"].endswith("/{token}") and "ingress_url_with_token" not in got


async def test_standard_webhooks_blank_secret_is_generated(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    for i, scheme in enumerate(("standard_webhooks", "svix", "standard-webhooks")):
        created = await mgmt.webhook(fa, name=f"sw-{i}", auth_mode="signature", signature_scheme=scheme)
        assert created["signature_scheme"] == "standard_webhooks"
        assert signatures.standard_webhooks_secret_ok(created["secret"])


async def test_provider_secret_is_stored_and_blank_one_is_supplied_later(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    stripe = await mgmt.webhook(
        fa, name="stripe", auth_mode="signature", signature_scheme="stripe", secret="whsec_from_stripe"
    )
    assert stripe["secret_configured"] is True
    assert (await reveal(mgmt, "webhook-stripe-secret"))[0] == "whsec_from_stripe"

    # A provider that issues its secret only once it knows the URL: blank now, supplied in a second step.
    github = await mgmt.webhook(fa, name="github", auth_mode="signature", signature_scheme="github")
    assert "secret" not in github and github["secret_configured"] is False
    assert (await stored(mgmt, github["uid"])).secret_version is None
    path = f"{BASE}/{fa}/webhooks/{github['uid']}/secret"
    status, body = await mgmt.call("POST", path, json={})
    assert status == 422 and body["errors"][0]["field"] == "secret"
    status, body = await mgmt.call("POST", path, mgmt.member, json={"secret": "gh-secret"})
    assert status == 403
    status, body = await mgmt.call("POST", path, json={"secret": "gh-secret"})
    assert status == 200 and body["secret_configured"] is True and "secret" not in body
    assert (await reveal(mgmt, "webhook-github-secret"))[0] == "gh-secret"
    assert (await stored(mgmt, github["uid"])).secret_version == 1
    status, body = await mgmt.call("POST", path, json={"secret": "again"})
    assert status == 409 and "rotate-secret" in body["detail"]
    token = await mgmt.webhook(fa, name="plain")
    status, body = await mgmt.call(
        "POST", f"{BASE}/{fa}/webhooks/{token['uid']}/secret", json={"secret": "x"}
    )
    assert status == 409


async def test_existing_team_secret_is_reused_and_never_shown(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    await mgmt.secret("shared-token", "Shared-Value_1")
    created = await mgmt.webhook(fa, name="a", secret_name="shared-token")
    assert "secret" not in created and created["secret_name"] == "shared-token"
    assert created["secret_configured"] is True
    url_token = await mgmt.webhook(fa, name="b", auth_mode="url_token", secret_name="shared-token")
    assert "secret" not in url_token and "ingress_url_with_token" not in url_token
    status, listed = await mgmt.call("GET", "/api/v1/secrets")
    assert status == 200
    assert {s["name"]: s["used_by"] for s in listed["secrets"]}["shared-token"] == ["shop/a", "shop/b"]


async def test_reused_secret_must_fit_the_auth_mode(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    await mgmt.secret("not-url-safe", "has space/and slash")
    status, body = await mgmt.call(
        "POST",
        f"{BASE}/{fa}/webhooks",
        json={"name": "u", "auth_mode": "url_token", "secret_name": "not-url-safe"},
    )
    assert status == 422 and body["errors"][0]["field"] == "secret_name" and "URL-safe" in body["detail"]
    status, body = await mgmt.call(
        "POST",
        f"{BASE}/{fa}/webhooks",
        json={
            "name": "s",
            "auth_mode": "signature",
            "signature_scheme": "svix",
            "secret_name": "not-url-safe",
        },
    )
    assert status == 422 and "Standard Webhooks" in body["detail"]
    status, body = await mgmt.call(
        "POST",
        f"{BASE}/{fa}/webhooks",
        json={
            "name": "p",
            "auth_mode": "signature",
            "signature_scheme": "stripe",
            "secret_name": "not-url-safe",
            "secret": "whsec_new",
        },
    )
    assert status == 422 and body["errors"][0]["field"] == "secret"
    assert (await mgmt.call("GET", f"{BASE}/{fa}/webhooks"))[1]["webhooks"] == []


INVALID_CREATES: list[tuple[dict[str, Any], str]] = [
    ({"name": "x", "auth_mode": "signature"}, "signature_scheme"),
    ({"name": "x", "auth_mode": "token", "signature_scheme": "github"}, "signature_scheme"),
    ({"name": "x", "auth_mode": "signature", "signature_scheme": "carrier-pigeon"}, "signature_scheme"),
    ({"name": "x", "auth_mode": "basic"}, "auth_mode"),
    ({"name": "x", "secret": "mine"}, "secret"),
    ({"name": "x", "auth_mode": "url_token", "secret": "mine"}, "secret"),
    ({"name": "x", "auth_mode": "signature", "signature_scheme": "svix", "secret": "whsec_%%%"}, "secret"),
    ({"name": "Bad Name"}, "name"),
    ({}, "name"),
    ({"name": "x", "secret_name": "../etc"}, "secret_name"),
    ({"name": "x", "delivery_id_header": "X Bad: header"}, "delivery_id_header"),
    ({"name": "x", "authmode": "token"}, "authmode"),
    ({"name": "x", "signature_scheme": 7, "auth_mode": "signature"}, "signature_scheme"),
]


async def test_invalid_create_requests_are_422_with_field_errors(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    for body, field in INVALID_CREATES:
        resp = await mgmt.client.post(f"{BASE}/{fa}/webhooks", json=body, headers=mgmt.admin)
        assert resp.status == 422, body
        assert resp.content_type == "application/problem+json"
        problem = await resp.json(content_type=None)
        assert problem["error_code"] == "invalid_request"
        assert field in [e["field"] for e in problem["errors"]], (body, problem)
    assert (await mgmt.call("GET", f"{BASE}/{fa}/webhooks"))[1]["webhooks"] == []


async def test_bad_json_is_a_400_problem(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    resp = await mgmt.client.post(f"{BASE}/{fa}/webhooks", data=b"{nope", headers=mgmt.admin)
    assert resp.status == 400 and resp.content_type == "application/problem+json"


async def test_names_are_unique_and_a_factory_holds_at_most_20(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    first = await mgmt.webhook(fa, name="hook-0")
    status, body = await mgmt.call("POST", f"{BASE}/{fa}/webhooks", json={"name": "hook-0"})
    assert status == 409 and "hook-0" in body["detail"]
    for i in range(1, 20):
        await mgmt.webhook(fa, name=f"hook-{i}")
    status, body = await mgmt.call("POST", f"{BASE}/{fa}/webhooks", json={"name": "hook-20"})
    assert status == 409 and "20" in body["detail"]
    # A deleted webhook frees its slot and its name.
    assert (await mgmt.call("DELETE", f"{BASE}/{fa}/webhooks/{first['uid']}"))[0] == 204
    again = await mgmt.webhook(fa, name="hook-0")
    assert again["uid"] != first["uid"]
    # Pagination walks all 20 by name.
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": "7"} | ({"cursor": cursor} if cursor else {})
        status, page = await mgmt.call("GET", f"{BASE}/{fa}/webhooks", params=query)
        assert status == 200
        seen += [w["name"] for w in page["webhooks"]]
        cursor = page["page_info"]["next_cursor"]
        if not page["page_info"]["has_next_page"]:
            break
    assert seen == sorted(f"hook-{i}" for i in range(20))


async def test_limit_and_names_hold_under_concurrent_creates(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    for i in range(17):
        await mgmt.webhook(fa, name=f"hook-{i}")
    path = f"{BASE}/{fa}/webhooks"
    racing = [mgmt.call("POST", path, json={"name": f"race-{i}"}) for i in range(6)]
    racing += [mgmt.call("POST", path, json={"name": "same"}) for _ in range(2)]
    statuses = sorted(status for status, _ in await asyncio.gather(*racing))
    assert statuses == [201, 201, 201, 409, 409, 409, 409, 409]
    _, listed = await mgmt.call("GET", path, params={"limit": "100"})
    assert len(listed["webhooks"]) == 20


# --- roles and scoping ----------------------------------------------------------------------------


async def test_roles_teams_and_unknown_ids(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    one = f"{BASE}/{fa}/webhooks/{hook['uid']}"
    assert (await mgmt.call("POST", f"{BASE}/{fa}/webhooks", mgmt.member, json={"name": "m"}))[0] == 403
    for method, path, kw in (
        ("PATCH", one, {"json": {"enabled": False}}),
        ("DELETE", one, {}),
        ("POST", one + "/rotate-secret", {}),
    ):
        assert (await mgmt.call(method, path, mgmt.member, **kw))[0] == 403
        assert (await mgmt.call(method, path, mgmt.worker, **kw))[0] == 403
        assert (await mgmt.call(method, path, mgmt.other_admin, **kw))[0] == 404
    assert (await mgmt.call("GET", one, mgmt.worker))[0] == 403
    assert (await mgmt.call("GET", one, mgmt.other_admin))[0] == 404
    assert (await mgmt.call("GET", f"{BASE}/{fa}/webhooks", mgmt.other_admin))[0] == 404
    assert (await mgmt.call("POST", f"{BASE}/{fa}/webhooks", mgmt.other_admin, json={"name": "z"}))[0] == 404
    assert (await mgmt.call("GET", f"{BASE}/fa_unknown/webhooks"))[0] == 404
    assert (await mgmt.call("GET", f"{BASE}/{fa}/webhooks/wh_unknown"))[0] == 404
    other_factory = await mgmt.factory("other")
    assert (await mgmt.call("GET", f"{BASE}/{other_factory}/webhooks/{hook['uid']}"))[0] == 404
    resp = await mgmt.client.get(one)
    assert resp.status == 401


# --- patch, rotate, delete ------------------------------------------------------------------------


async def test_patch_enables_disables_and_renames(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa, name="orders")
    await mgmt.webhook(fa, name="taken")
    one = f"{BASE}/{fa}/webhooks/{hook['uid']}"
    status, body = await mgmt.call("PATCH", one, json={"enabled": False})
    assert status == 200 and body["enabled"] is False
    status, body = await mgmt.call("PATCH", one, json={"name": "orders-v2", "enabled": True})
    assert status == 200 and body["name"] == "orders-v2" and body["enabled"] is True
    assert body["uid"] == hook["uid"] and body["ingress_url"] == hook["ingress_url"]
    status, body = await mgmt.call("PATCH", one, json={"name": "taken"})
    assert status == 409
    for bad, field in (
        ({}, "enabled"),
        ({"enabled": "yes"}, "enabled"),
        ({"name": "No!"}, "name"),
        ({"auth_mode": "url_token"}, "auth_mode"),
    ):
        status, body = await mgmt.call("PATCH", one, json=bad)
        assert status == 422 and field in [e["field"] for e in body["errors"]]


async def test_rotate_generates_a_new_secret_and_moves_the_webhook_to_it(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa, name="orders", auth_mode="url_token")
    status, body = await mgmt.call("POST", f"{BASE}/{fa}/webhooks/{hook['uid']}/rotate-secret")
    assert status == 200 and body["applies_on_next_apply"] is False
    assert body["secret"] != hook["secret"] and secret_store.URL_SAFE_RE.match(body["secret"])
    assert body["ingress_url_with_token"].endswith("/" + body["secret"])
    assert (await stored(mgmt, hook["uid"])).secret_version == 2
    assert (await reveal(mgmt, "webhook-orders-secret"))[0] == body["secret"]
    status, body = await mgmt.call(
        "POST", f"{BASE}/{fa}/webhooks/{hook['uid']}/rotate-secret", json={"secret": "mine"}
    )
    assert status == 422 and body["errors"][0]["field"] == "secret"


async def test_rotate_signature_webhooks(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    sw = await mgmt.webhook(fa, name="svix", auth_mode="signature", signature_scheme="standard_webhooks")
    status, body = await mgmt.call("POST", f"{BASE}/{fa}/webhooks/{sw['uid']}/rotate-secret", json={})
    assert status == 200 and signatures.standard_webhooks_secret_ok(body["secret"])
    assert body["secret"] != sw["secret"]
    gh = await mgmt.webhook(fa, name="gh", auth_mode="signature", signature_scheme="github", secret="one")
    rotate = f"{BASE}/{fa}/webhooks/{gh['uid']}/rotate-secret"
    status, body = await mgmt.call("POST", rotate)
    assert status == 422 and "provider" in body["detail"]
    status, body = await mgmt.call("POST", rotate, json={"secret": "two"})
    assert status == 200 and body["secret"] == "two"
    assert (await reveal(mgmt, "webhook-gh-secret")) == ("two", 2)
    assert (await stored(mgmt, gh["uid"])).secret_version == 2
    status, body = await mgmt.call(
        "POST", f"{BASE}/{fa}/webhooks/{sw['uid']}/rotate-secret", json={"secret": "whsec_bad"}
    )
    assert status == 422


async def test_delete_hides_the_webhook_and_keeps_its_secret(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    one = f"{BASE}/{fa}/webhooks/{hook['uid']}"
    assert (await mgmt.call("DELETE", one))[0] == 204
    assert (await mgmt.call("GET", one))[0] == 404
    assert (await mgmt.call("DELETE", one))[0] == 404
    assert (await mgmt.call("PATCH", one, json={"enabled": True}))[0] == 404
    assert (await mgmt.call("GET", f"{BASE}/{fa}/webhooks"))[1]["webhooks"] == []
    row = await stored(mgmt, hook["uid"])
    assert row.deleted_at is not None
    _, secrets = await mgmt.call("GET", "/api/v1/secrets")
    assert {s["name"]: s["used_by"] for s in secrets["secrets"]} == {"webhook-orders-secret": []}


# --- definitions-managed factories ----------------------------------------------------------------


async def test_definitions_managed_factory_refuses_structural_changes(mgmt: Mgmt) -> None:
    fa = await mgmt.definitions_factory()
    _, listed = await mgmt.call("GET", f"{BASE}/{fa}/webhooks")
    hook = listed["webhooks"][0]
    assert hook["managed_by"] == "definitions"
    one = f"{BASE}/{fa}/webhooks/{hook['uid']}"
    status, body = await mgmt.call("POST", f"{BASE}/{fa}/webhooks", json={"name": "new"})
    assert status == 409 and "repository" in body["detail"]
    status, body = await mgmt.call("PATCH", one, json={"name": "renamed"})
    assert status == 409 and "definition files" in body["detail"]
    status, body = await mgmt.call("DELETE", one)
    assert status == 409
    assert (await mgmt.call("GET", one))[0] == 200


async def test_definitions_managed_rotation_applies_on_next_apply(mgmt: Mgmt) -> None:
    fa = await mgmt.definitions_factory()
    _, listed = await mgmt.call("GET", f"{BASE}/{fa}/webhooks")
    hook = listed["webhooks"][0]
    one = f"{BASE}/{fa}/webhooks/{hook['uid']}"
    status, body = await mgmt.call("POST", one + "/rotate-secret")
    assert status == 200 and body["applies_on_next_apply"] is True
    assert (await reveal(mgmt, "github-token")) == (body["secret"], 2)
    assert (await stored(mgmt, hook["uid"])).secret_version == 1  # still verifying with what it captured
    # Toggling Enabled off and on re-applies the webhook: it picks up the new version.
    assert (await mgmt.call("PATCH", one, json={"enabled": False}))[1]["enabled"] is False
    assert (await stored(mgmt, hook["uid"])).secret_version == 1
    assert (await mgmt.call("PATCH", one, json={"enabled": True}))[1]["enabled"] is True
    assert (await stored(mgmt, hook["uid"])).secret_version == 2


# --- end to end through ingress (docs/management.md) ---------------------------------------------------


async def post(mgmt: Mgmt, url: str, body: object, headers: dict[str, str] | None = None) -> int:
    path = url.removeprefix("http://factory.test")
    resp = await mgmt.client.post(path, data=json.dumps(body).encode(), headers=headers or {})
    return resp.status


async def test_dashboard_actions_take_effect_at_ingress_at_once(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    url, one = hook["ingress_url"], f"{BASE}/{fa}/webhooks/{hook['uid']}"
    bearer = {"Authorization": f"Bearer {hook['secret']}"}
    assert await post(mgmt, url, {"n": 1}, bearer) == 202
    assert await post(mgmt, url, {"n": 2}) == 401
    await mgmt.call("PATCH", one, json={"enabled": False})
    assert await post(mgmt, url, {"n": 3}, bearer) == 404
    await mgmt.call("PATCH", one, json={"enabled": True})
    assert await post(mgmt, url, {"n": 4}, bearer) == 202
    _, rotated = await mgmt.call("POST", one + "/rotate-secret")
    assert await post(mgmt, url, {"n": 5}, bearer) == 401  # old secret dead at once, no overlap
    assert await post(mgmt, url, {"n": 6}, {"Authorization": f"Bearer {rotated['secret']}"}) == 202
    assert (await mgmt.call("DELETE", one))[0] == 204
    assert await post(mgmt, url, {"n": 7}, {"Authorization": f"Bearer {rotated['secret']}"}) == 404


async def test_url_token_and_signature_webhooks_accept_with_the_shown_secret(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    url_hook = await mgmt.webhook(fa, name="alerts", auth_mode="url_token")
    assert await post(mgmt, url_hook["ingress_url_with_token"], {"a": 1}) == 202
    assert await post(mgmt, url_hook["ingress_url"].replace("{token}", "wrong"), {"a": 2}) == 401
    sw = await mgmt.webhook(fa, name="svix", auth_mode="signature", signature_scheme="svix")
    body = b'{"type":"invoice.paid"}'
    headers = signatures.sign("standard_webhooks", sw["secret"], body, dt.datetime.now(dt.UTC))
    resp = await mgmt.client.post(
        sw["ingress_url"].removeprefix("http://factory.test"), data=body, headers=headers
    )
    assert resp.status == 202
    gh = await mgmt.webhook(fa, name="gh", auth_mode="signature", signature_scheme="github")
    gh_headers = signatures.sign("github", "later", body, dt.datetime.now(dt.UTC), "d-1")
    gh_path = gh["ingress_url"].removeprefix("http://factory.test")
    assert (await mgmt.client.post(gh_path, data=body, headers=gh_headers)).status == 401  # not supplied yet
    await mgmt.call("POST", f"{BASE}/{fa}/webhooks/{gh['uid']}/secret", json={"secret": "later"})
    assert (await mgmt.client.post(gh_path, data=body, headers=gh_headers)).status == 202


async def test_definitions_managed_rotation_keeps_old_secret_until_reapplied(mgmt: Mgmt) -> None:
    fa = await mgmt.definitions_factory()
    _, listed = await mgmt.call("GET", f"{BASE}/{fa}/webhooks")
    hook = listed["webhooks"][0]
    one = f"{BASE}/{fa}/webhooks/{hook['uid']}"
    old = (await reveal(mgmt, "github-token"))[0]
    _, rotated = await mgmt.call("POST", one + "/rotate-secret")
    new = rotated["secret"]
    assert await post(mgmt, hook["ingress_url"], {"n": 1}, {"Authorization": f"Bearer {old}"}) == 202
    assert await post(mgmt, hook["ingress_url"], {"n": 2}, {"Authorization": f"Bearer {new}"}) == 401
    await mgmt.call("PATCH", one, json={"enabled": False})
    await mgmt.call("PATCH", one, json={"enabled": True})
    assert await post(mgmt, hook["ingress_url"], {"n": 3}, {"Authorization": f"Bearer {old}"}) == 401
    assert await post(mgmt, hook["ingress_url"], {"n": 4}, {"Authorization": f"Bearer {new}"}) == 202


async def test_zero_downtime_rollover_with_a_second_webhook(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    first = await mgmt.webhook(fa, name="orders")
    second = await mgmt.webhook(fa, name="orders-next")
    automation = await mgmt.automation(fa, [([first["uid"], second["uid"]], None)])
    assert automation.startswith("au_")
    assert (
        await post(mgmt, first["ingress_url"], {"n": 1}, {"Authorization": f"Bearer {first['secret']}"})
        == 202
    )
    assert (
        await post(mgmt, second["ingress_url"], {"n": 2}, {"Authorization": f"Bearer {second['secret']}"})
        == 202
    )
    await mgmt.call("DELETE", f"{BASE}/{fa}/webhooks/{first['uid']}")
    assert (
        await post(mgmt, first["ingress_url"], {"n": 3}, {"Authorization": f"Bearer {first['secret']}"})
        == 404
    )
    assert (
        await post(mgmt, second["ingress_url"], {"n": 4}, {"Authorization": f"Bearer {second['secret']}"})
        == 202
    )
