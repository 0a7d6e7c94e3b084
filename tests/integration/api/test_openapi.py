"""The OpenAPI document: served, covers every route, and real responses validate against it."""

from __future__ import annotations

import base64
import re
from typing import Any

import openapi_spec_validator
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.runs.routes import load_openapi
from store.crypto import SecretBox
from store.db import create_engine

DOC = load_openapi()
BASE = "urn:factoryctl:openapi"
REGISTRY: Registry[Any] = Registry().with_resource(
    BASE, Resource.from_contents(DOC, default_specification=DRAFT202012)
)


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def schema_validator(pointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{BASE}#{pointer}"}, registry=REGISTRY)


def _resolve(obj: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in obj:
        node: Any = DOC
        for part in obj["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        obj = node
    return obj


def normalise(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def documented_path(path: str) -> str:
    for template in DOC["paths"]:
        if re.fullmatch(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)), path):
            return str(template)
    raise AssertionError(f"{path} is not in the OpenAPI document")


async def check(resp: Any, method: str) -> Any:
    """Assert the status is documented for the operation and the body matches its schema."""
    template = documented_path(resp.url.path)
    operation = DOC["paths"][template][method.lower()]
    status = str(resp.status)
    assert status in operation["responses"], f"{method} {template} does not document {status}"
    response = _resolve(operation["responses"][status])
    content = response.get("content") or {}
    assert resp.content_type in content, f"{method} {template} {status}: {resp.content_type} not documented"
    body = await resp.json(content_type=None)
    pointer = f"/paths/{template.replace('~', '~0').replace('/', '~1')}/{method.lower()}"
    schema = content[resp.content_type]["schema"]
    validator = (
        schema_validator(schema["$ref"].removeprefix("#"))
        if "$ref" in schema
        else Draft202012Validator(schema, registry=REGISTRY)
    )
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
    assert not errors, f"{pointer} {status}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors)
    return body


def test_document_is_openapi_31_with_the_named_models() -> None:
    assert DOC["openapi"].startswith("3.1")
    names = set(DOC["components"]["schemas"])
    assert {
        "RunAgentRequest",
        "RunAgentResponse",
        "ListRunsResponse",
        "RunItem",
        "PageInfo",
        "RunStatusMessage",
        "RunCreatorInfo",
        "RunState",
        "RunSourceType",
        "RunFollowupRequest",
        "AmbientAgentConfig",
        "MCPServerConfig",
        "Error",
    } <= names
    for schema in DOC["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_document_passes_the_openapi_spec_validator() -> None:
    openapi_spec_validator.validate(DOC)


async def test_served_as_json_without_a_key(client: Any) -> None:
    resp = await client.get("/api/v1/openapi.json")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert await resp.json() == DOC


async def test_every_route_is_documented(
    sqlite_url: str, api_settings: ServerSettings, box: SecretBox
) -> None:
    engine = create_engine(sqlite_url)
    api_app = create_app(api_settings, engine, box, route_modules=ROUTE_MODULES)
    documented = {
        (m.upper(), normalise(p)) for p, ops in DOC["paths"].items() for m in ops if m != "parameters"
    }
    missing = []
    for route in api_app.router.routes():
        info = route.resource.canonical if route.resource else ""
        if route.method in ("HEAD", "*") or not info:
            continue
        if info == "/" or info == "/console" or info.startswith("/console/"):
            continue  # the web console: HTML pages, not API (docs/console.md)
        if (route.method, normalise(info)) not in documented:
            missing.append(f"{route.method} {info}")
    await engine.dispose()
    assert not missing, f"routes missing from schemas/openapi.yaml: {missing}"


async def test_run_responses_match_the_schemas(client: Any, member_key: str, worker_key: str) -> None:
    attachment = {
        "file_name": "a.json",
        "mime_type": "application/json",
        "data": base64.b64encode(b"{}").decode(),
    }
    created = await check(
        await client.post(
            "/api/v1/agent/run",
            json={
                "prompt": "p",
                "config": {"name": "n", "mcp_servers": {"s": {"url": "https://mcp.example/s"}}},
                "metadata": {"k": "v"},
                "attachments": [attachment],
            },
            headers=h(member_key),
        ),
        "POST",
    )
    run_id = created["run_id"]
    await check(await client.post("/api/v1/agent/runs", json={"prompt": "q"}, headers=h(member_key)), "POST")
    await check(await client.get(f"/api/v1/agent/runs/{run_id}", headers=h(member_key)), "GET")
    listed = await check(await client.get("/api/v1/agent/runs?limit=1", headers=h(member_key)), "GET")
    assert listed["page_info"]["has_next_page"] is True
    await check(await client.get(f"/api/v1/agent/runs/{run_id}/logs", headers=h(member_key)), "GET")
    followup = await client.post(
        f"/api/v1/agent/runs/{run_id}/followups", json={"message": "m"}, headers=h(member_key)
    )
    await check(followup, "POST")
    assert (
        await check(await client.post(f"/api/v1/agent/runs/{run_id}/cancel", headers=h(member_key)), "POST")
        == run_id
    )
    # errors are documented problem+json documents
    await check(await client.post(f"/api/v1/agent/runs/{run_id}/cancel", headers=h(member_key)), "POST")
    await check(
        await client.post(
            f"/api/v1/agent/runs/{run_id}/followups", json={"message": "m"}, headers=h(member_key)
        ),
        "POST",
    )
    await check(await client.get("/api/v1/agent/runs/run_nope", headers=h(member_key)), "GET")
    await check(await client.get("/api/v1/agent/runs?limit=0", headers=h(member_key)), "GET")
    await check(await client.get("/api/v1/agent/runs"), "GET")
    await check(await client.get("/api/v1/agent/runs", headers=h(worker_key)), "GET")
    bad = await client.post(
        "/api/v1/agent/run", json={"prompt": "p", "metadata": {"bad key": "v"}}, headers=h(member_key)
    )
    assert (await check(bad, "POST"))["errors"][0]["field"] == "metadata.bad key"
    big = {"file_name": "big", "data": base64.b64encode(b"x" * 5000).decode()}
    await check(
        await client.post(
            "/api/v1/agent/run", json={"prompt": "p", "attachments": [big]}, headers=h(member_key)
        ),
        "POST",
    )


async def test_factory_responses_match_the_schemas(client: Any, admin_key: str, member_key: str) -> None:
    factory = await check(
        await client.post("/api/v1/factory", json={"name": "f", "worker_host": "h"}, headers=h(admin_key)),
        "POST",
    )
    await check(await client.post("/api/v1/factory", json={"name": "f"}, headers=h(admin_key)), "POST")
    await check(await client.post("/api/v1/factory", json={}, headers=h(admin_key)), "POST")
    await check(await client.post("/api/v1/factory", json={"name": "g"}, headers=h(member_key)), "POST")
    await check(await client.get("/api/v1/factory?search=f", headers=h(member_key)), "GET")
    await check(await client.get(f"/api/v1/factory/{factory['uid']}", headers=h(member_key)), "GET")
    await check(await client.get("/api/v1/factory/fa_nope", headers=h(member_key)), "GET")
    await check(
        await client.post(
            f"/api/v1/factory/{factory['uid']}/runs",
            json={"prompt": "p", "ticket_ref": "T-1"},
            headers=h(member_key),
        ),
        "POST",
    )
    await check(
        await client.post(f"/api/v1/factory/{factory['uid']}/runs", json={}, headers=h(member_key)), "POST"
    )


async def test_ops_responses_match_the_schemas(client: Any) -> None:
    await check(await client.get("/healthz"), "GET")
    await check(await client.get("/readyz"), "GET")
