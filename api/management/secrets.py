"""Team secrets over HTTP: ``GET/POST /api/v1/secrets``, ``PUT/DELETE /api/v1/secrets/{name}``
(docs/management.md, "Team secrets").

Values are write-only: no response carries one, except a value the service generated (``value``
omitted, or ``generate: true``), which is returned once. Setting a value adds a version; webhooks keep
verifying with the version they captured until they next apply (docs/reconcile.md, "Secret rotation"), so
responses name the
webhooks (``used_by``, as ``<factory>/<webhook>``) that use the secret. A secret a live webhook uses
cannot be deleted (409 naming them): deleting it would make those webhooks reject every delivery.

``scope`` (``webhook``, the default, or ``run``) says what may use a secret; the store keeps the rule
(:mod:`store.secrets`): making a secret a live webhook names ``run`` is a 409, since runs could then read
the value that verifies its deliveries. A ``PUT`` with ``scope`` and no ``value``/``generate`` changes
only the scope.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import BOX, CLOCK, sessions
from api.errors import Conflict, ResourceNotFound
from api.http.bodies import SMALL_BODY_BYTES, fail_on, field_error, read_json_object, unknown_fields
from api.http.paths import API_V1
from store import secrets as secret_store
from store.clock import rfc3339
from store.models import Factory, GitHubConnection, Webhook

GITHUB_APP = "GitHub App"  # how a secret's used_by names the team's GitHub App connection


async def users(session: AsyncSession, team_id: str, name: str | None = None) -> dict[str, list[str]]:
    """Secret name -> what uses it: ``factory/webhook`` names of the live webhooks (enabled or not) that
    reference it, then ``GitHub App`` when the team's GitHub App connection verifies with it."""
    stmt = (
        select(Webhook.secret_name, Factory.name, Webhook.name)
        .join(Factory, Factory.uid == Webhook.factory_uid)
        .where(Webhook.team_id == team_id, Webhook.deleted_at.is_(None), Webhook.secret_name.is_not(None))
        .order_by(Factory.name, Webhook.name)
    )
    if name is not None:
        stmt = stmt.where(Webhook.secret_name == name)
    found: dict[str, list[str]] = defaultdict(list)
    for secret_name, factory_name, webhook_name in (await session.execute(stmt)).all():
        found[secret_name or ""].append(f"{factory_name}/{webhook_name}")
    app = select(GitHubConnection.secret_name).where(GitHubConnection.team_id == team_id)
    if name is not None:
        app = app.where(GitHubConnection.secret_name == name)
    for (secret_name,) in (await session.execute(app)).all():
        found[secret_name].append(GITHUB_APP)
    return found


def secret_json(info: secret_store.SecretInfo, used_by: list[str]) -> dict[str, Any]:
    return {
        "name": info.name,
        "version": info.version,
        "created_at": rfc3339(info.created_at),
        "updated_at": rfc3339(info.updated_at),
        "scope": info.scope,
        "used_by": used_by,
    }


def _scope(body: dict[str, Any], errors: list[dict[str, Any]]) -> str | None:
    """The requested scope, or None when not given."""
    scope = body.get("scope")
    if scope is None:
        return None
    if scope not in secret_store.SCOPES:
        errors.append(
            field_error("scope", "must be 'webhook' (backs webhook auth) or 'run' (may be used by runs)")
        )
        return None
    return str(scope)


def _value(body: dict[str, Any], errors: list[dict[str, Any]]) -> str | None:
    """The given value (exactly as sent), or None to generate one (no ``value``, or ``generate: true``)."""
    value, generate = body.get("value"), body.get("generate")
    if generate is not None and not isinstance(generate, bool):
        errors.append(field_error("generate", "must be true or false"))
    if value is None:
        if generate is False:
            errors.append(field_error("value", "is required when generate is false"))
        return None
    if generate is True:
        errors.append(field_error("generate", "give either value or generate: true, not both"))
    if not isinstance(value, str) or not value:
        errors.append(field_error("value", "must be a non-empty string (omit it to generate a value)"))
        return None
    if len(value.encode("utf-8")) > secret_store.MAX_VALUE_BYTES:
        errors.append(field_error("value", f"must be at most {secret_store.MAX_VALUE_BYTES} bytes"))
    return value


async def list_secrets(request: web.Request) -> web.Response:
    """``GET /secrets`` (member): names, versions, scopes, timestamps and users; never values."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        infos = await secret_store.list_secrets(session, who.team_id)
        used = await users(session, who.team_id)
    return web.json_response({"secrets": [secret_json(i, used.get(i.name, [])) for i in infos]})


async def create_secret(request: web.Request) -> web.Response:
    """``POST /secrets`` (admin) ``{name, value?, scope?}`` -> 201; a generated value is returned once."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    errors = unknown_fields(body, {"name", "value", "generate", "scope"})
    name = body.get("name")
    if not isinstance(name, str) or not secret_store.NAME_RE.match(name):
        errors.append(
            field_error("name", "is required: letters, digits, '.', '_' or '-' (1-200, starting alnum)")
        )
    given = _value(body, errors)
    scope = _scope(body, errors) or secret_store.DEFAULT_SCOPE
    fail_on(errors)
    assert isinstance(name, str)
    value = given or secret_store.generate_value()
    async with sessions(request)() as session, session.begin():
        if await secret_store.get(session, who.team_id, name) is not None:
            raise Conflict(f"secret {name!r} already exists; PUT /secrets/{name} gives it a new value")
        info = await secret_store.create(
            session, request.app[BOX], request.app[CLOCK], who.team_id, name, value, scope=scope
        )
        used = await users(session, who.team_id, name)
    out = secret_json(info, used.get(name, []))
    if given is None:
        out["value"] = value
    return web.json_response(out, status=201)


async def set_secret(request: web.Request) -> web.Response:
    """``PUT /secrets/{name}`` (admin) ``{value?, generate?, scope?}``: a new version (a generated value is
    returned once) and/or a new scope; ``scope`` alone changes only the scope."""
    who = await require(request, "admin")
    name = request.match_info["name"]
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    errors = unknown_fields(body, {"value", "generate", "scope"})
    scope = _scope(body, errors)
    new_value = not (scope is not None and "value" not in body and "generate" not in body)
    given = _value(body, errors) if new_value else None
    fail_on(errors)
    value = (given or secret_store.generate_value()) if new_value else None
    clock = request.app[CLOCK]
    async with sessions(request)() as session, session.begin():
        if await secret_store.get(session, who.team_id, name) is None:
            raise ResourceNotFound(f"secret {name!r} does not exist; POST /secrets creates it")
        if scope is not None:
            info = await secret_store.set_scope(session, clock, who.team_id, name, scope)
        if value is not None:
            info = await secret_store.set_value(session, request.app[BOX], clock, who.team_id, name, value)
        used = await users(session, who.team_id, name)
    out = secret_json(info, used.get(name, []))
    if value is not None and given is None:
        out["value"] = value
    return web.json_response(out)


async def delete_secret(request: web.Request) -> web.Response:
    """``DELETE /secrets/{name}`` (admin): 204, or 409 naming the live webhooks that use it."""
    who = await require(request, "admin")
    name = request.match_info["name"]
    async with sessions(request)() as session, session.begin():
        if await secret_store.get(session, who.team_id, name) is None:
            raise ResourceNotFound(f"secret {name!r} does not exist")
        used = (await users(session, who.team_id, name)).get(name, [])
        if used:
            raise Conflict(
                f"secret {name!r} is used by {', '.join(used)}; delete those webhooks (or point their"
                " definitions at another secret) or disconnect the GitHub App first"
                if GITHUB_APP in used
                else f"secret {name!r} is used by webhook{'s' if len(used) > 1 else ''} {', '.join(used)};"
                " delete those webhooks (or point their definitions at another secret) first"
            )
        await secret_store.delete_secret(session, who.team_id, name)
    return web.Response(status=204)


def setup(app: web.Application) -> None:
    app.router.add_get(API_V1 + "/secrets", list_secrets)
    app.router.add_post(API_V1 + "/secrets", create_secret)
    app.router.add_put(API_V1 + "/secrets/{name}", set_secret)
    app.router.add_delete(API_V1 + "/secrets/{name}", delete_secret)
