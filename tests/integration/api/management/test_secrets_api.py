"""Team secrets over HTTP: write-only values, versions, and refusing to delete a secret in use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from store import secrets as secret_store

if TYPE_CHECKING:
    from conftest import Mgmt

PATH = "/api/v1/secrets"


async def reveal(mgmt: Mgmt, name: str) -> tuple[str, int]:
    async with mgmt.sessions() as s:
        return await secret_store.reveal(s, mgmt.box, mgmt.team_id, name)


async def test_create_set_list_delete(mgmt: Mgmt) -> None:
    status, created = await mgmt.call("POST", PATH, json={"name": "stripe-signing", "value": "whsec_abc"})
    assert status == 201 and created["name"] == "stripe-signing" and created["version"] == 1
    assert "value" not in created and created["used_by"] == []
    assert await reveal(mgmt, "stripe-signing") == ("whsec_abc", 1)

    status, generated = await mgmt.call("POST", PATH, json={"name": "gen"})
    assert status == 201 and secret_store.URL_SAFE_RE.match(generated["value"])
    assert await reveal(mgmt, "gen") == (generated["value"], 1)

    status, updated = await mgmt.call("PUT", f"{PATH}/stripe-signing", json={"value": "whsec_def"})
    assert status == 200 and updated["version"] == 2 and "value" not in updated
    assert await reveal(mgmt, "stripe-signing") == ("whsec_def", 2)
    status, regenerated = await mgmt.call("PUT", f"{PATH}/gen")  # no body: generate
    assert status == 200 and regenerated["version"] == 2 and regenerated["value"] != generated["value"]
    status, again = await mgmt.call("PUT", f"{PATH}/gen", json={"generate": True})
    assert status == 200 and again["version"] == 3 and await reveal(mgmt, "gen") == (again["value"], 3)

    status, listed = await mgmt.call("GET", PATH, mgmt.member)
    assert status == 200
    assert [(s["name"], s["version"]) for s in listed["secrets"]] == [("gen", 3), ("stripe-signing", 2)]
    assert all("value" not in s for s in listed["secrets"])
    assert "whsec_def" not in str(listed)

    assert (await mgmt.call("DELETE", f"{PATH}/gen"))[0] == 204
    assert (await mgmt.call("DELETE", f"{PATH}/gen"))[0] == 404
    assert [s["name"] for s in (await mgmt.call("GET", PATH))[1]["secrets"]] == ["stripe-signing"]


async def test_bad_input(mgmt: Mgmt) -> None:
    await mgmt.call("POST", PATH, json={"name": "taken", "value": "v"})
    for body, field in (
        ({"name": "bad name"}, "name"),
        ({}, "name"),
        ({"name": "ok", "value": ""}, "value"),
        ({"name": "ok", "value": 5}, "value"),
        ({"name": "ok", "value": "x" * (secret_store.MAX_VALUE_BYTES + 1)}, "value"),
        ({"name": "ok", "valu": "typo"}, "valu"),
        ({"name": "ok", "value": "v", "generate": True}, "generate"),
        ({"name": "ok", "generate": False}, "value"),
        ({"name": "ok", "generate": "yes"}, "generate"),
    ):
        status, problem = await mgmt.call("POST", PATH, json=body)
        assert status == 422, body
        assert field in [e["field"] for e in problem["errors"]]
    status, problem = await mgmt.call("POST", PATH, json={"name": "taken", "value": "v"})
    assert status == 409 and problem["error_code"] == "conflict"
    assert (await mgmt.call("PUT", f"{PATH}/missing", json={"value": "v"}))[0] == 404
    assert (await mgmt.call("PUT", f"{PATH}/taken", json={"value": ""}))[0] == 422


async def test_roles_and_teams(mgmt: Mgmt) -> None:
    await mgmt.call("POST", PATH, json={"name": "mine", "value": "v"})
    assert (await mgmt.call("POST", PATH, mgmt.member, json={"name": "m", "value": "v"}))[0] == 403
    assert (await mgmt.call("PUT", f"{PATH}/mine", mgmt.member, json={"value": "v"}))[0] == 403
    assert (await mgmt.call("DELETE", f"{PATH}/mine", mgmt.member))[0] == 403
    assert (await mgmt.call("GET", PATH, mgmt.worker))[0] == 403
    # Another team sees none of this team's secrets, and cannot touch them.
    assert (await mgmt.call("GET", PATH, mgmt.other_admin))[1] == {"secrets": []}
    assert (await mgmt.call("PUT", f"{PATH}/mine", mgmt.other_admin, json={"value": "x"}))[0] == 404
    assert (await mgmt.call("DELETE", f"{PATH}/mine", mgmt.other_admin))[0] == 404
    assert (await mgmt.call("POST", PATH, mgmt.other_admin, json={"name": "mine", "value": "x"}))[0] == 201
    assert await reveal(mgmt, "mine") == ("v", 1)


async def test_a_secret_in_use_cannot_be_deleted(mgmt: Mgmt) -> None:
    fa = await mgmt.factory("shop")
    await mgmt.call("POST", PATH, json={"name": "shared", "value": "Shared1"})
    a = await mgmt.webhook(fa, name="a", secret_name="shared")
    await mgmt.webhook(fa, name="b", secret_name="shared")
    await mgmt.call("PATCH", f"/api/v1/factory/{fa}/webhooks/{a['uid']}", json={"enabled": False})
    status, problem = await mgmt.call("DELETE", f"{PATH}/shared")
    assert status == 409 and "shop/a" in problem["detail"] and "shop/b" in problem["detail"]
    _, listed = await mgmt.call("GET", PATH)
    assert listed["secrets"][0]["used_by"] == ["shop/a", "shop/b"]
    status, updated = await mgmt.call("PUT", f"{PATH}/shared", json={"value": "Shared2"})
    assert updated["used_by"] == ["shop/a", "shop/b"]
    for hook in (a, (await mgmt.call("GET", f"/api/v1/factory/{fa}/webhooks"))[1]["webhooks"][1]):
        assert (await mgmt.call("DELETE", f"/api/v1/factory/{fa}/webhooks/{hook['uid']}"))[0] == 204
    assert (await mgmt.call("DELETE", f"{PATH}/shared"))[0] == 204
