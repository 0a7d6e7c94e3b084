"""Secret scopes over the management API (docs/management.md, "Team secrets"): ``webhook`` (the default)
backs webhook auth, ``run`` may be used by runs; a secret a live webhook names can never become ``run``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from store import secrets as secret_store

if TYPE_CHECKING:
    from conftest import Mgmt

PATH = "/api/v1/secrets"
BASE = "/api/v1/factory"


async def scopes(mgmt: Mgmt) -> dict[str, str]:
    status, listed = await mgmt.call("GET", PATH, mgmt.member)
    assert status == 200
    return {s["name"]: s["scope"] for s in listed["secrets"]}


async def test_create_with_a_scope_default_webhook_and_list_it(mgmt: Mgmt) -> None:
    status, plain = await mgmt.call("POST", PATH, json={"name": "hook", "value": "v-1"})
    assert status == 201 and plain["scope"] == "webhook"
    status, run = await mgmt.call("POST", PATH, json={"name": "GH_TOKEN", "scope": "run"})
    assert status == 201 and run["scope"] == "run" and run["value"]  # generated: shown once
    assert await scopes(mgmt) == {"GH_TOKEN": "run", "hook": "webhook"}
    for bad in ("both", "", 1, ["run"]):
        status, problem = await mgmt.call("POST", PATH, json={"name": "x", "scope": bad})
        assert status == 422 and [e["field"] for e in problem["errors"]] == ["scope"], bad
    assert (await mgmt.call("POST", PATH, mgmt.member, json={"name": "m", "scope": "run"}))[0] == 403


async def test_put_changes_the_scope_alone_or_with_a_new_value(mgmt: Mgmt) -> None:
    await mgmt.call("POST", PATH, json={"name": "s", "value": "first-value"})
    status, body = await mgmt.call("PUT", f"{PATH}/s", json={"scope": "run"})
    assert status == 200 and body["scope"] == "run" and body["version"] == 1 and "value" not in body
    async with mgmt.sessions() as s:
        assert await secret_store.reveal(s, mgmt.box, mgmt.team_id, "s") == ("first-value", 1)
    status, body = await mgmt.call("PUT", f"{PATH}/s", json={"scope": "webhook", "generate": True})
    assert status == 200 and body["scope"] == "webhook" and body["version"] == 2 and body["value"]
    status, body = await mgmt.call("PUT", f"{PATH}/s")  # no body: a new generated value, scope kept
    assert status == 200 and body["scope"] == "webhook" and body["version"] == 3
    status, problem = await mgmt.call("PUT", f"{PATH}/s", json={"scope": "all"})
    assert status == 422 and problem["errors"][0]["field"] == "scope"
    assert (await mgmt.call("PUT", f"{PATH}/missing", json={"scope": "run"}))[0] == 404


async def test_a_secret_a_live_webhook_names_cannot_become_run(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa, name="orders")  # generates webhook-orders-secret
    name = hook["secret_name"]
    assert (await scopes(mgmt))[name] == "webhook"
    status, problem = await mgmt.call("PUT", f"{PATH}/{name}", json={"scope": "run"})
    assert status == 409 and "shop/orders" in problem["detail"]
    status, problem = await mgmt.call("PUT", f"{PATH}/{name}", json={"scope": "run", "generate": True})
    assert status == 409  # refused whole: no new version either
    assert (await mgmt.call("GET", PATH))[1]["secrets"][0]["version"] == 1

    # A signature webhook waiting for its provider secret reserves the name: no run secret may take it.
    stripe = await mgmt.webhook(fa, name="stripe", auth_mode="signature", signature_scheme="stripe")
    status, problem = await mgmt.call(
        "POST", PATH, json={"name": stripe["secret_name"], "value": "x", "scope": "run"}
    )
    assert status == 409 and "shop/stripe" in problem["detail"]
    status, _ = await mgmt.call(
        "POST", f"{BASE}/{fa}/webhooks/{stripe['uid']}/secret", json={"secret": "whsec_1"}
    )
    assert status == 200 and (await scopes(mgmt))[stripe["secret_name"]] == "webhook"

    # Once no live webhook names it, an admin may hand the secret to runs (a deliberate choice).
    assert (await mgmt.call("DELETE", f"{BASE}/{fa}/webhooks/{hook['uid']}"))[0] == 204
    status, body = await mgmt.call("PUT", f"{PATH}/{name}", json={"scope": "run"})
    assert status == 200 and body["scope"] == "run"


async def test_a_webhook_may_not_use_a_run_secret(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    await mgmt.call("POST", PATH, json={"name": "GH_TOKEN", "value": "Run-Value_1", "scope": "run"})
    status, problem = await mgmt.call(
        "POST", f"{BASE}/{fa}/webhooks", json={"name": "ci", "secret_name": "GH_TOKEN"}
    )
    assert status == 422
    message = "team secret 'GH_TOKEN' may not back a webhook (scope: run); use a webhook-scoped secret"
    assert problem["errors"] == [{"field": "secret_name", "message": message}]
    assert "Run-Value_1" not in str(problem)
    await mgmt.call("POST", PATH, json={"name": "ci-token", "value": "Hook-Value_1"})  # default: webhook
    created = await mgmt.webhook(fa, name="ci", secret_name="ci-token")
    assert created["secret_name"] == "ci-token" and "secret" not in created
