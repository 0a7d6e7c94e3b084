"""Environments over HTTP: API-managed ones are editable by admins, definitions-managed ones read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Ctx

PATH = "/api/v1/environments"


async def test_create_get_replace_delete(ctx: Ctx) -> None:
    await ctx.secret("TOKEN", "v_123456", scope="run")
    body = {"name": "web", "setup": ["make"], "env": {"A": "1"}, "secrets": ["TOKEN"]}
    resp = await ctx.client.post(PATH, json=body, headers=ctx.admin)
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    assert created["managed_by"] == "api" and created["spec"]["setup"] == ["make"]
    by_uid = await ctx.client.get(f"{PATH}/{created['uid']}", headers=ctx.member)
    assert (await by_uid.json())["name"] == "web"
    resp = await ctx.client.put(f"{PATH}/web", json={"setup": ["make all"]}, headers=ctx.admin)
    assert resp.status == 200 and (await resp.json())["spec"] == {"setup": ["make all"]}
    listed = await (await ctx.client.get(PATH, headers=ctx.member)).json()
    assert [e["name"] for e in listed["environments"]] == ["web"]
    assert (await ctx.client.post(PATH, json={"name": "web"}, headers=ctx.admin)).status == 409
    assert (await ctx.client.delete(f"{PATH}/web", headers=ctx.admin)).status == 204
    assert (await ctx.client.get(f"{PATH}/web", headers=ctx.member)).status == 404


async def test_bad_bodies_roles_and_definitions_managed_environments(ctx: Ctx) -> None:
    assert (await ctx.client.post(PATH, json={"name": "x"}, headers=ctx.member)).status == 403
    resp = await ctx.client.post(
        PATH, json={"name": "x", "setup": "make", "secrets": ["NOPE"]}, headers=ctx.admin
    )
    assert resp.status == 422
    assert {"setup"} <= {e["field"] for e in (await resp.json())["errors"]}
    resp = await ctx.client.post(PATH, json={"name": "x", "secrets": ["NOPE"]}, headers=ctx.admin)
    assert resp.status == 422 and "team secret 'NOPE' does not exist" in (await resp.json())["detail"]
    resp = await ctx.client.post(
        PATH, json={"name": "x", "repos": [{"url": "u", "path": "../x"}]}, headers=ctx.admin
    )
    assert resp.status == 422
    await ctx.environment("from-git", {"setup": ["true"]})
    assert (await ctx.client.put(f"{PATH}/from-git", json={}, headers=ctx.admin)).status == 409
    assert (await ctx.client.delete(f"{PATH}/from-git", headers=ctx.admin)).status == 409
    got = await (await ctx.client.get(f"{PATH}/from-git", headers=ctx.member)).json()
    assert got["managed_by"] == "definitions" and got["definition_path"] == "environments/from-git.yaml"


async def test_environments_get_the_rules_definitions_get(ctx: Ctx) -> None:
    """A repository URL git must not be given (FC011 in a definition) and a secret runs may not read
    (FC044) are refused when the environment is created, not when a worker clones it."""
    await ctx.secret("HOOK", "whsec_not_for_runs")  # webhook-scoped: the default
    for repo, field in (
        ({"url": "ext::sh -c touch% /tmp/pwned", "path": "x"}, "repos.0.url"),
        ({"url": "--upload-pack=touch /tmp/pwned", "path": "x"}, "repos.0.url"),
        ({"url": "https://git.example/a.git", "path": "x", "ref": "--output=/tmp/x"}, "repos.0.ref"),
    ):
        resp = await ctx.client.post(PATH, json={"name": "x", "repos": [repo]}, headers=ctx.admin)
        assert resp.status == 422, await resp.text()
        assert [e["field"] for e in (await resp.json())["errors"]] == [field]
    resp = await ctx.client.post(PATH, json={"name": "x", "secrets": ["HOOK"]}, headers=ctx.admin)
    assert resp.status == 422
    assert "may not be used by runs (scope: webhook)" in (await resp.json())["detail"]
