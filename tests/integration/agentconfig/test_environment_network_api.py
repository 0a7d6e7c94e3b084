"""An environment's network policy over the API (docs/definitions.md, "Network policy"): written and read
back as ``spec.network``, shown as the policy its runs get (``network``, the default included), refused
with a field error per bad pattern — the rules definitions get as FC012."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from api.runs.routes import load_openapi

if TYPE_CHECKING:
    from conftest import Ctx

PATH = "/api/v1/environments"
BASE = "urn:factoryctl:openapi"
DOCUMENTED = Draft202012Validator(
    {"$ref": f"{BASE}#/components/schemas/Environment"},
    registry=Registry().with_resource(BASE, Resource.from_contents(load_openapi(), DRAFT202012)),
)
REPO = {"url": "https://github.com/acme/app.git", "path": "app"}


async def test_a_policy_round_trips_and_the_effective_one_is_shown(ctx: Ctx) -> None:
    network = {"mode": "allowlist", "allow": ["*.npmjs.org:443", "pypi.org"]}
    resp = await ctx.client.post(
        PATH, json={"name": "web", "repos": [REPO], "network": network}, headers=ctx.admin
    )
    assert resp.status == 201, await resp.text()
    got = await (await ctx.client.get(f"{PATH}/web", headers=ctx.member)).json()
    DOCUMENTED.validate(got)  # the OpenAPI document's Environment, network included
    assert not DOCUMENTED.is_valid({**got, "network": {"mode": "sometimes", "allow": []}})
    assert got["spec"]["network"] == network
    assert got["network"] == {"mode": "allowlist", "allow": ["github.com:443", "*.npmjs.org:443", "pypi.org"]}
    resp = await ctx.client.put(
        f"{PATH}/web", json={"repos": [REPO], "network": {"mode": "none"}}, headers=ctx.admin
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["network"] == {"mode": "none", "allow": []}
    resp = await ctx.client.put(f"{PATH}/web", json={"repos": [REPO]}, headers=ctx.admin)
    replaced: dict[str, Any] = await resp.json()
    assert "network" not in replaced["spec"]  # a replace drops what the body leaves out...
    assert replaced["network"] == {"mode": "allowlist", "allow": ["github.com:443"]}  # ...back to the default
    listed = await (await ctx.client.get(PATH, headers=ctx.member)).json()
    assert [e["network"]["allow"] for e in listed["environments"]] == [["github.com:443"]]


async def test_bad_policies_are_422_with_a_field_per_problem(ctx: Ctx) -> None:
    cases: list[tuple[Any, list[str], str]] = [
        ({"mode": "sometimes"}, ["network.mode"], "'sometimes' is not one of"),
        ({"allow": ["github.com"]}, ["network"], "'mode' is a required property"),
        ({"mode": "allowlist", "hosts": []}, ["network"], "Additional properties"),
        ({"mode": "allowlist", "allow": ["h.example"] * 101}, ["network.allow"], "is too long"),
        (
            {"mode": "allowlist", "allow": ["ok.example", "https://x.example", "*.com"]},
            ["network.allow.1", "network.allow.2"],
            "write a host, not a URL",
        ),
        ({"mode": "open", "allow": ["github.com"]}, ["network.allow"], "read only with mode: allowlist"),
    ]
    for network, fields, words in cases:
        resp = await ctx.client.post(PATH, json={"name": "x", "network": network}, headers=ctx.admin)
        assert resp.status == 422, network
        assert resp.content_type == "application/problem+json"
        problem = await resp.json()
        assert [e["field"] for e in problem["errors"]] == fields, problem
        assert words in problem["errors"][0]["message"], problem
    assert (await ctx.client.get(f"{PATH}/x", headers=ctx.member)).status == 404


async def test_a_definitions_managed_environment_shows_its_policy(ctx: Ctx) -> None:
    await ctx.environment("from-git", {"repos": [REPO], "network": {"mode": "open"}})
    got = await (await ctx.client.get(f"{PATH}/from-git", headers=ctx.member)).json()
    assert got["managed_by"] == "definitions" and got["network"] == {"mode": "open", "allow": []}
