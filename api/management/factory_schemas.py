"""``GET /api/v1/factory-files/schemas[/{version}[/{document}]]``: the definition-file JSON Schemas, public.

The documents are the repository's ``schemas/*.schema.json`` (whatever :data:`schemas.NAMES` lists), served
with ``$id`` rewritten to the bare file name and absolute sibling ``$ref``s made relative, so an editor that
fetches ``.../schemas/v1alpha1/factory.schema.json`` resolves ``agent-config.schema.json`` next to it
(docs/api.md, "Factory files"). Every answer carries a strong ``ETag`` (a hash of the body) and honours
``If-None-Match`` with a bodiless 304; the documents change only with a release, so caches may keep them
for an hour. No authentication: they are the published format.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from aiohttp import web

import schemas
from api.errors import ResourceNotFound
from api.http.paths import API_V1

SCHEMA_VERSION = "v1alpha1"  # the one version this server speaks (factory.yaml's schemaVersion)
VERSIONS = (SCHEMA_VERSION,)
BASE = API_V1 + "/factory-files/schemas"
CACHE_CONTROL = "public, max-age=3600"


@dataclass(frozen=True)
class Body:
    """A serialized answer and its strong entity tag."""

    data: bytes
    etag: str


def _body(value: Any) -> Body:
    data = json.dumps(value, indent=2, sort_keys=False).encode("utf-8") + b"\n"
    return Body(data, '"' + hashlib.sha256(data).hexdigest() + '"')


def _relative(node: Any) -> Any:
    """``node`` with ``$ref``s into :data:`schemas.BASE_URI` made relative to a sibling document."""
    if isinstance(node, dict):
        out = {k: _relative(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith(schemas.BASE_URI):
            out["$ref"] = ref.removeprefix(schemas.BASE_URI)
        return out
    if isinstance(node, list):
        return [_relative(v) for v in node]
    return node


def file_name(name: str) -> str:
    return f"{name}.schema.json"


def served_document(name: str) -> dict[str, Any]:
    """Schema ``name`` as served: ``$id`` is its file name, sibling references are relative."""
    document: dict[str, Any] = _relative(schemas.load_schema(name))
    return {**document, "$id": file_name(name)}


@lru_cache(maxsize=1)
def _documents() -> dict[str, dict[str, Any]]:
    return {file_name(name): served_document(name) for name in schemas.NAMES}


@lru_cache(maxsize=1)
def index_body() -> Body:
    versions = [{"schema_version": v, "schema_url": f"{BASE}/{v}"} for v in VERSIONS]
    return _body({"current_version": SCHEMA_VERSION, "versions": versions})


@lru_cache(maxsize=len(VERSIONS))
def version_body(version: str) -> Body:
    return _body({"schema_version": version, "documents": _documents()})


@lru_cache(maxsize=64)
def document_body(document: str) -> Body:
    return _body(_documents()[document])


def matches(header: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` (``*``, one tag or a list; weak tags compare weakly) names ``etag``."""
    if header is None:
        return False
    tags = [t.strip() for t in header.split(",")]
    return any(t == "*" or t.removeprefix("W/") == etag for t in tags)


def _answer(request: web.Request, body: Body, content_type: str = "application/json") -> web.Response:
    headers = {"ETag": body.etag, "Cache-Control": CACHE_CONTROL}
    if matches(request.headers.get("If-None-Match"), body.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body.data, content_type=content_type, headers=headers)


def _known_version(request: web.Request) -> str:
    version = request.match_info["version"]
    if version not in VERSIONS:
        raise ResourceNotFound(
            f"unknown schema version {version!r}; this server serves {', '.join(VERSIONS)}"
        )
    return version


async def list_schemas(request: web.Request) -> web.Response:
    """``GET /factory-files/schemas``: the versions this server serves and the current one."""
    return _answer(request, index_body())


async def get_version(request: web.Request) -> web.Response:
    """``GET /factory-files/schemas/{version}``: every document of a version, keyed by file name."""
    return _answer(request, version_body(_known_version(request)))


async def get_document(request: web.Request) -> web.Response:
    """``GET /factory-files/schemas/{version}/{document}``: one bare JSON Schema, for editors."""
    _known_version(request)
    document = request.match_info["document"]
    if document not in _documents():
        raise ResourceNotFound(
            f"unknown schema document {document!r}; known: {', '.join(sorted(_documents()))}"
        )
    return _answer(request, document_body(document), "application/schema+json")


def setup(app: web.Application) -> None:
    app.router.add_get(BASE, list_schemas)
    app.router.add_get(BASE + "/{version}", get_version)
    app.router.add_get(BASE + "/{version}/{document}", get_document)
