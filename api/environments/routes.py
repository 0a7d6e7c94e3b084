"""Environments over HTTP: ``GET/POST /api/v1/environments``, ``GET/PUT/DELETE /api/v1/environments/{name}``.

An environment body has the shape of ``environments/<name>.yaml`` (``repos``, ``setup``, ``env``,
``secrets``, ``setupTimeoutSeconds``, ``mcpServers``, ``network``), checked against the same JSON Schema the
reconciler uses, plus: the network policy's host patterns (:mod:`store.rules.network_policy`, FC012 in a
definition); every named team secret (``secrets`` and ``secret:NAME`` values of ``mcpServers``) must exist
and be ``run``-scoped, and every MCP server URL must pass the outbound address rules (:mod:`api.runs.mcp`).
The stdio MCP servers defined here are the only commands a run can reference (docs/agent-config.md).
``{name}`` in the path is the name or the uid. Reads
need ``member``; writes need ``admin``; an environment applied from definition files is
read-only here (409), exactly like a definitions-managed factory.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

import safegit
import schemas
from api.auth import require
from api.context import CLOCK, sessions
from api.errors import Conflict, ResourceNotFound
from api.http.bodies import fail_on, field_error, read_json_object
from api.http.pagination import single_page_info
from api.http.paths import API_V1
from api.runs import mcp
from api.runs.network import network_policy
from api.runs.prepare import find_environment
from store import ids
from store import secrets as secret_store
from store.clock import rfc3339
from store.models import Environment
from store.rules.network_policy import network_problems

MAX_BODY = 1_048_576
SPEC_KEYS = ("repos", "setup", "env", "secrets", "setupTimeoutSeconds", mcp.ENVIRONMENT_KEY, "network")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def environment_json(row: Environment) -> dict[str, Any]:
    """The row as the API shows it; ``network`` is the policy its runs get, the default included
    (:func:`api.runs.network.network_policy`), next to the ``spec`` as written."""
    return {
        "uid": row.uid,
        "name": row.name,
        "managed_by": row.managed_by,
        "factory_uid": row.factory_uid,
        "definition_path": row.definition_path,
        "spec": row.spec or {},
        "network": network_policy(row.spec or {}),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def spec_errors(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Field errors of an environment spec against ``schemas/environment.schema.json``."""
    errors = []
    for error in sorted(
        schemas.validator("environment").iter_errors(spec), key=lambda e: list(e.absolute_path)
    ):
        where = ".".join(str(p) for p in error.absolute_path) or "(body)"
        message = error.schema.get("errorMessage") if isinstance(error.schema, dict) else None
        errors.append(field_error(where, str(message or error.message)))
    return errors


async def _spec_from(request: web.Request, body: dict[str, Any], team_id: str) -> dict[str, Any]:
    spec = {k: body[k] for k in SPEC_KEYS if k in body}
    errors = [
        field_error(k, f"unknown field; allowed: name, {', '.join(SPEC_KEYS)}")
        for k in sorted(body)
        if k not in (*SPEC_KEYS, "name")
    ]
    errors += spec_errors(spec)
    if not errors:
        errors += _repository_errors(spec)
        errors += _network_errors(spec)
        errors += [field_error(where, why) for where, why in mcp.environment_problems(spec)]
    refs = [("secrets", n) for n in spec.get("secrets") or []]
    refs += [  # store.secrets names the fields mcp_servers.*; the body's key is mcpServers
        (f"{mcp.ENVIRONMENT_KEY}.{where.split('.', 1)[1]}", n)
        for where, n in secret_store.mcp_secret_refs(spec.get(mcp.ENVIRONMENT_KEY))
    ]
    if not errors and refs:
        async with sessions(request)() as session:
            scopes = await secret_store.scopes(session, team_id, (n for _, n in refs))
        errors += [
            field_error(where, problem)
            for where, n in refs
            if (problem := secret_store.run_problem(n, scopes.get(n))) is not None
        ]
    fail_on(errors)
    return spec


def _repository_errors(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The rules definitions get as FC011 (docs/definitions.md): what git may be given as URL or ref."""
    return [
        field_error(f"repos.{index}.{key}", why)
        for index, key, why in safegit.repository_problems(spec.get("repos"))
    ]


def _network_errors(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The rules definitions get as FC012 (docs/definitions.md, "Network policy"): host patterns, and
    ``allow`` only with ``mode: allowlist``."""
    return [
        field_error(".".join(str(p) for p in ("network", *where)), why)
        for where, why in network_problems(spec.get("network"))
    ]


async def _load(request: web.Request, team_id: str) -> Environment:
    key = request.match_info["name"]
    async with sessions(request)() as session:
        row = await find_environment(session, team_id, key)
    if row is None:
        raise ResourceNotFound(f"environment {key} does not exist")
    return row


def _writable(row: Environment) -> None:
    if row.managed_by != "api":
        where = row.definition_path or "environments/"
        raise Conflict(
            f"environment {row.name} is managed by definition files ({where}); change the file instead"
        )


async def list_environments(request: web.Request) -> web.Response:
    """``GET /environments`` (member): every environment of the team, by name, on one page."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        stmt = select(Environment).where(Environment.team_id == who.team_id).order_by(Environment.name)
        rows = list((await session.execute(stmt)).scalars())
    return web.json_response(
        {"environments": [environment_json(r) for r in rows], "page_info": single_page_info()}
    )


async def get_environment(request: web.Request) -> web.Response:
    who = await require(request, "member")
    return web.json_response(environment_json(await _load(request, who.team_id)))


async def create_environment(request: web.Request) -> web.Response:
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=MAX_BODY)
    name = body.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        fail_on([field_error("name", "is required: letters, digits, '.', '_' or '-' (1-100 characters)")])
    assert isinstance(name, str)
    spec = await _spec_from(request, body, who.team_id)
    now = request.app[CLOCK].now()
    row = Environment(
        uid=ids.new_id(ids.ENVIRONMENT),
        team_id=who.team_id,
        factory_uid=None,
        name=name,
        spec=spec,
        managed_by="api",
        definition_path=None,
        spec_digest=None,
        created_at=now,
        updated_at=now,
    )
    try:
        async with sessions(request)() as session, session.begin():
            session.add(row)
            await session.flush()
    except IntegrityError:
        raise Conflict(f"environment {name} already exists") from None
    return web.json_response(environment_json(row), status=201)


async def replace_environment(request: web.Request) -> web.Response:
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=MAX_BODY)
    row = await _load(request, who.team_id)
    _writable(row)
    if "name" in body and body["name"] != row.name:
        raise Conflict("environments cannot be renamed; create a new one")
    spec = await _spec_from(request, body, who.team_id)
    async with sessions(request)() as session, session.begin():
        stored = await session.get(Environment, row.uid)
        if stored is None:
            raise ResourceNotFound(f"environment {row.name} does not exist")
        _writable(stored)
        stored.spec = spec
        stored.updated_at = request.app[CLOCK].now()
        await session.flush()
        out = environment_json(stored)
    return web.json_response(out)


async def delete_environment(request: web.Request) -> web.Response:
    who = await require(request, "admin")
    row = await _load(request, who.team_id)
    _writable(row)
    async with sessions(request)() as session, session.begin():
        stored = await session.get(Environment, row.uid)
        if stored is not None:
            await session.delete(stored)
    return web.Response(status=204)


def setup(app: web.Application) -> None:
    app.router.add_get(f"{API_V1}/environments", list_environments)
    app.router.add_post(f"{API_V1}/environments", create_environment)
    app.router.add_get(API_V1 + "/environments/{name}", get_environment)
    app.router.add_put(API_V1 + "/environments/{name}", replace_environment)
    app.router.add_delete(API_V1 + "/environments/{name}", delete_environment)
