"""``GET /api/v1/factory-files/schemas[/{version}[/{document}]]``: public, cacheable, editor-resolvable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import schemas

if TYPE_CHECKING:
    from conftest import Mgmt

BASE = "/api/v1/factory-files/schemas"


async def test_list_retrieve_and_documents_without_a_key(mgmt: Mgmt) -> None:
    resp = await mgmt.client.get(BASE)
    assert resp.status == 200 and resp.headers["Cache-Control"].startswith("public")
    index = await resp.json()
    assert index["current_version"] == "v1alpha1"
    assert index["versions"] == [{"schema_version": "v1alpha1", "schema_url": f"{BASE}/v1alpha1"}]

    resp = await mgmt.client.get(f"{BASE}/v1alpha1")
    version = await resp.json()
    assert version["schema_version"] == "v1alpha1"
    names = [f"{n}.schema.json" for n in schemas.NAMES]
    assert sorted(version["documents"]) == sorted(names)
    for name, document in version["documents"].items():
        assert document["$id"] == name
        assert "factoryctl.dev" not in str(document)  # every sibling reference is relative

    resp = await mgmt.client.get(f"{BASE}/v1alpha1/factory.schema.json")
    assert resp.status == 200 and resp.content_type == "application/schema+json"
    assert await resp.json(content_type=None) == version["documents"]["factory.schema.json"]


async def test_served_documents_resolve_each_other_at_their_url(mgmt: Mgmt) -> None:
    """What an editor does: fetch a document by URL and resolve relative $refs next to it."""
    url = f"http://server{BASE}/v1alpha1/"
    fetched = {}
    for name in schemas.NAMES:
        resp = await mgmt.client.get(f"{BASE}/v1alpha1/{name}.schema.json")
        fetched[url + f"{name}.schema.json"] = await resp.json(content_type=None)
    registry = Registry().with_resources(
        (uri, Resource.from_contents(doc, DRAFT202012)) for uri, doc in fetched.items()
    )
    factory = {**fetched[url + "factory.schema.json"], "$id": url + "factory.schema.json"}
    validator = Draft202012Validator(factory, registry=registry)
    assert validator.is_valid({"name": "shop"})
    assert not validator.is_valid({"name": "shop", "nmae": "typo"})


async def test_etag_and_if_none_match(mgmt: Mgmt) -> None:
    for path in (BASE, f"{BASE}/v1alpha1", f"{BASE}/v1alpha1/webhook.schema.json"):
        first = await mgmt.client.get(path)
        etag = first.headers["ETag"]
        assert etag.startswith('"') and etag == (await mgmt.client.get(path)).headers["ETag"]
        for header in (etag, f'"other", {etag}', "*", f"W/{etag}"):
            resp = await mgmt.client.get(path, headers={"If-None-Match": header})
            assert resp.status == 304 and await resp.read() == b"", (path, header)
            assert resp.headers["ETag"] == etag
        stale = await mgmt.client.get(path, headers={"If-None-Match": '"stale"'})
        assert stale.status == 200 and await stale.read() == await first.read()
    assert (await mgmt.client.get(BASE)).headers["ETag"] != (
        await mgmt.client.get(f"{BASE}/v1alpha1")
    ).headers["ETag"]


async def test_unknown_version_or_document_is_404_problem(mgmt: Mgmt) -> None:
    for path in (f"{BASE}/v9", f"{BASE}/v9/factory.schema.json", f"{BASE}/v1alpha1/nope.schema.json"):
        resp = await mgmt.client.get(path)
        body = await resp.json(content_type=None)
        assert (resp.status, resp.content_type) == (404, "application/problem+json"), path
        assert body["status"] == 404
