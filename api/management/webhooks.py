"""Webhook management under ``/api/v1/factory/{uid}/webhooks`` (docs/management.md, "Webhooks").

Every webhook secret is a team secret, referenced by name; a webhook verifies with the secret *version*
it captured (``Webhook.secret_version``), so the ingress reads one immutable value per request and a
rotation is a version move. Who moves it:

- API-managed factory: rotating moves the webhook to the new version at once (old value dead, no
  overlap); supplying a provider secret later captures it; re-enabling re-captures the current version.
- definitions-managed factory (docs/reconcile.md, "Secret rotation"): rotating gives the team secret a
  new version, and the webhook keeps its captured one until its definition next applies; toggling
  ``enabled`` off and on is such an apply. Creating, renaming and deleting are refused (409): the
  repository owns them.

A webhook's secret is always ``webhook``-scoped (docs/management.md, "Team secrets"): the secrets this
API generates are created so, and naming an existing ``run`` secret is refused, since runs could read it.

Disabling or deleting takes effect on the very next delivery (ingress reads the row every time);
deleting is a soft delete so the UID, and any automation selecting it, stay visible but never fire.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web
from sqlalchemy import select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import BOX, CLOCK, SETTINGS, sessions
from api.errors import Conflict, ResourceNotFound, ValidationFailed
from api.factories.routes import load_factory
from api.factories.serialize import webhook_json
from api.http.bodies import (
    SMALL_BODY_BYTES,
    fail_on,
    field_error,
    optional_string,
    read_json_object,
    unknown_fields,
)
from api.http.pagination import Cursor, fingerprint, page_after, page_info, page_limit, split_page
from api.http.paths import API_V1
from api.management.webhook_rules import (
    MAX_WEBHOOKS,
    SIGNATURE,
    URL_TOKEN,
    NewWebhook,
    check_name,
    generated_secret,
    new_secret_value,
    parse_create,
    secret_problem,
    suggested_secret_name,
)
from store import ids
from store import secrets as secret_store
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Factory, Webhook

DEFINITIONS = "definitions"


def webhook_view(row: Webhook, base_url: str) -> dict[str, Any]:
    """The webhook object, plus whether its secret is configured (False until a provider secret is given)."""
    return webhook_json(row, base_url) | {"secret_configured": row.secret_version is not None}


def with_secret(view: dict[str, Any], row: Webhook, value: str) -> dict[str, Any]:
    """A response that shows a secret once; a url_token webhook also gets its full, secret URL."""
    view["secret"] = value
    if row.auth_mode == URL_TOKEN:
        view["ingress_url_with_token"] = view["ingress_url"].replace("{token}", value)
    return view


async def load_webhook(
    session: AsyncSession, team_id: str, factory_uid: str, uid: str
) -> tuple[Factory, Webhook]:
    """The factory and its live webhook ``uid``; 404 when either is missing, deleted or another team's."""
    factory = await load_factory(session, team_id, factory_uid)
    row = await session.get(Webhook, uid)
    if row is None or row.factory_uid != factory.uid or row.team_id != team_id or row.deleted_at is not None:
        raise ResourceNotFound(f"webhook {uid} does not exist in factory {factory_uid}")
    return factory, row


async def _name_taken(session: AsyncSession, factory_uid: str, name: str) -> bool:
    stmt = select(Webhook.uid).where(
        Webhook.factory_uid == factory_uid, Webhook.name == name, Webhook.deleted_at.is_(None)
    )
    return (await session.execute(stmt)).first() is not None


async def _flush(session: AsyncSession, what: str) -> None:
    """Flush; a unique index refusing the write (a concurrent create) becomes a 409."""
    try:
        await session.flush()
    except IntegrityError:
        raise Conflict(f"{what} was taken concurrently; retry") from None


async def _store_webhook_secret(
    session: AsyncSession, box: SecretBox, clock: Clock, team_id: str, name: str, value: str
) -> secret_store.SecretInfo:
    """Create the webhook's secret (``webhook`` scope) or add a version; 409 if it is a ``run`` secret."""
    existing = await secret_store.get(session, team_id, name)
    if existing is None:
        return await secret_store.create(
            session, box, clock, team_id, name, value, scope=secret_store.WEBHOOK
        )
    problem = secret_store.webhook_problem(name, existing.scope)
    if problem:
        raise Conflict(problem)
    return await secret_store.set_value(session, box, clock, team_id, name, value)


async def create_webhook(request: web.Request) -> web.Response:
    """``POST .../webhooks`` (admin): 201 with the webhook and, this once, its secret."""
    who = await require(request, "admin")
    spec = parse_create(await read_json_object(request, max_bytes=SMALL_BODY_BYTES))
    async with sessions(request)() as session, session.begin():
        row, shown = await add_webhook(session, request.app, who.team_id, request.match_info["uid"], spec)
    view = webhook_view(row, request.app[SETTINGS].base_url)
    return web.json_response(with_secret(view, row, shown) if shown is not None else view, status=201)


async def add_webhook(
    session: AsyncSession, app: web.Application, team_id: str, factory_uid: str, spec: NewWebhook
) -> tuple[Webhook, str | None]:
    """Create ``spec`` on an API-managed factory (API and console): the row and the secret to show once."""
    clock, box = app[CLOCK], app[BOX]
    shown: str | None = None
    # A no-op write first: it serialises creates per factory, so the limit of 20 holds under races.
    await session.execute(
        update(Factory)
        .where(Factory.uid == factory_uid, Factory.team_id == team_id)
        .values(updated_at=Factory.updated_at)
    )
    factory = await load_factory(session, team_id, factory_uid)
    if factory.managed_by == DEFINITIONS:
        raise Conflict(
            f"factory {factory.name!r} is managed through definition files: add webhooks/{spec.name}.yaml"
            " to its repository instead (the repository is the source of truth)"
        )
    live = (
        await session.execute(
            select(Webhook.name).where(Webhook.factory_uid == factory.uid, Webhook.deleted_at.is_(None))
        )
    ).scalars()
    names = set(live)
    if spec.name in names:
        raise Conflict(f"factory {factory.name!r} already has a webhook named {spec.name!r}")
    if len(names) >= MAX_WEBHOOKS:
        raise Conflict(f"factory {factory.name!r} already has {MAX_WEBHOOKS} webhooks, the maximum")
    existing = await secret_store.get(session, team_id, spec.secret_name)
    if existing is not None:
        scope_problem = secret_store.webhook_problem(spec.secret_name, existing.scope)
        if scope_problem:
            raise ValidationFailed(scope_problem, errors=[field_error("secret_name", scope_problem)])
        if spec.secret is not None:
            raise ValidationFailed(
                f"secret_name {spec.secret_name!r} names an existing team secret, whose value is reused;"
                " omit secret, or choose a new secret_name",
                errors=[field_error("secret", "must be omitted when secret_name names an existing secret")],
            )
        value, version = await secret_store.reveal(session, box, team_id, spec.secret_name)
        problem = secret_problem(spec.auth_mode, spec.signature_scheme, value)
        if problem:
            message = f"existing secret {spec.secret_name!r} {problem}"
            raise ValidationFailed(message, errors=[field_error("secret_name", message)])
        captured: int | None = version
    else:
        shown = spec.secret or generated_secret(spec.auth_mode, spec.signature_scheme)
        captured = None
        if shown is not None:
            info = await secret_store.create(
                session, box, clock, team_id, spec.secret_name, shown, scope=secret_store.WEBHOOK
            )
            captured = info.version
    now = clock.now()
    row = Webhook(
        uid=ids.new_id(ids.WEBHOOK),
        team_id=team_id,
        factory_uid=factory.uid,
        name=spec.name,
        auth_mode=spec.auth_mode,
        signature_scheme=spec.signature_scheme,
        secret_name=spec.secret_name,
        secret_version=captured,
        delivery_id_header=spec.delivery_id_header,
        enabled=True,
        managed_by="api",
        created_at=now,
        updated_at=now,
        deleted_at=None,
    )
    session.add(row)
    await _flush(session, f"the webhook name {spec.name!r} or secret name {spec.secret_name!r}")
    return row, shown


async def list_webhooks(request: web.Request) -> web.Response:
    """``GET .../webhooks`` (member): live webhooks (enabled or not) by name, keyset-paginated."""
    who = await require(request, "member")
    factory_uid = request.match_info["uid"]
    errors: list[dict[str, Any]] = []
    limit = page_limit(request.query, default=50, maximum=100, errors=errors)
    fail_on(errors)
    fp = fingerprint({"list": "webhooks", "factory": factory_uid})
    stmt = select(Webhook).where(Webhook.factory_uid == factory_uid, Webhook.deleted_at.is_(None))
    after = page_after(request.query, fp)
    if after is not None:
        stmt = stmt.where(tuple_(Webhook.name, Webhook.uid) > tuple_(after.value or "", after.row_id))
    async with sessions(request)() as session:
        await load_factory(session, who.team_id, factory_uid)
        fetched = (await session.execute(stmt.order_by(Webhook.name, Webhook.uid).limit(limit + 1))).scalars()
        rows, last = split_page(list(fetched), limit)
    base = request.app[SETTINGS].base_url
    return web.json_response(
        {
            "webhooks": [webhook_view(r, base) for r in rows],
            "page_info": page_info(Cursor(value=last.name, row_id=last.uid) if last else None, fp),
        }
    )


async def get_webhook(request: web.Request) -> web.Response:
    who = await require(request, "member")
    async with sessions(request)() as session:
        _, row = await load_webhook(
            session, who.team_id, request.match_info["uid"], request.match_info["wid"]
        )
    return web.json_response(webhook_view(row, request.app[SETTINGS].base_url))


async def patch_webhook(request: web.Request) -> web.Response:
    """``PATCH .../webhooks/{wid}`` (admin) ``{enabled?, name?}``."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    errors = unknown_fields(body, {"enabled", "name"})
    enabled = body.get("enabled")
    if "enabled" in body and not isinstance(enabled, bool):
        errors.append(field_error("enabled", "must be true or false"))
    name = check_name(body["name"], errors) if "name" in body else None
    if not body:
        errors.append(field_error("enabled", "give enabled and/or name"))
    fail_on(errors)
    clock = request.app[CLOCK]
    async with sessions(request)() as session, session.begin():
        factory, row = await load_webhook(
            session, who.team_id, request.match_info["uid"], request.match_info["wid"]
        )
        changed = False
        if name is not None and name != row.name:
            if factory.managed_by == DEFINITIONS:
                raise Conflict(
                    "renaming is not supported on a factory managed through definition files; renaming"
                    " webhooks/<name>.yaml in the repository creates a new webhook with a new UID"
                )
            if await _name_taken(session, factory.uid, name):
                raise Conflict(f"factory {factory.name!r} already has a webhook named {name!r}")
            row.name, changed = name, True
        if isinstance(enabled, bool) and enabled != row.enabled:
            await set_enabled(session, row, enabled)
            changed = True
        if changed:
            row.updated_at = clock.now()
            await _flush(session, f"the webhook name {row.name!r}")
    return web.json_response(webhook_view(row, request.app[SETTINGS].base_url))


async def set_enabled(session: AsyncSession, row: Webhook, enabled: bool) -> None:
    """Enable or disable ``row`` (API and console; the caller stamps ``updated_at``)."""
    row.enabled = enabled
    if enabled and row.secret_name is not None:
        # Re-enabling re-applies the webhook: it captures its secret's current version
        # (docs/reconcile.md, "Secret rotation").
        secret = await secret_store.get(session, row.team_id, row.secret_name)
        if secret is not None:
            row.secret_version = secret.current_version


async def rotate(
    session: AsyncSession, app: web.Application, factory: Factory, row: Webhook, given: str | None
) -> tuple[str, bool]:
    """A new secret for ``row`` (API and console): the value to show once, and whether it waits for the
    definition's next apply."""
    clock, box = app[CLOCK], app[BOX]
    value = new_secret_value(row.auth_mode, row.signature_scheme, given)
    name = row.secret_name or suggested_secret_name(row.name)
    info = await _store_webhook_secret(session, box, clock, row.team_id, name, value)
    deferred = factory.managed_by == DEFINITIONS and row.secret_version is not None
    if not deferred:
        row.secret_name, row.secret_version, row.updated_at = name, info.version, clock.now()
    return value, deferred


def remove(factory: Factory, row: Webhook, now: dt.datetime) -> None:
    """Soft-delete ``row`` (API and console); 409 on a definitions-managed factory."""
    if factory.managed_by == DEFINITIONS:
        raise Conflict(
            f"factory {factory.name!r} is managed through definition files: remove"
            f" {row.definition_path or 'the webhook file'} from its repository (or disable the webhook)"
        )
    row.deleted_at = row.updated_at = now


async def rotate_secret(request: web.Request) -> web.Response:
    """``POST .../{wid}/rotate-secret`` (admin) ``{secret?}``: a new secret, shown once."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    errors = unknown_fields(body, {"secret"})
    given = optional_string(body, "secret", errors)
    fail_on(errors)
    async with sessions(request)() as session, session.begin():
        factory, row = await load_webhook(
            session, who.team_id, request.match_info["uid"], request.match_info["wid"]
        )
        value, deferred = await rotate(session, request.app, factory, row, given)
    view = with_secret(webhook_view(row, request.app[SETTINGS].base_url), row, value)
    view["applies_on_next_apply"] = deferred
    return web.json_response(view)


async def supply_secret(request: web.Request) -> web.Response:
    """``POST .../{wid}/secret`` (admin) ``{secret}``: the provider's signing secret, after creation."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    errors = unknown_fields(body, {"secret"})
    given = optional_string(body, "secret", errors)
    if given is None and not errors:
        errors.append(field_error("secret", "is required: the provider's signing secret"))
    fail_on(errors)
    assert given is not None
    clock, box = request.app[CLOCK], request.app[BOX]
    async with sessions(request)() as session, session.begin():
        _, row = await load_webhook(
            session, who.team_id, request.match_info["uid"], request.match_info["wid"]
        )
        if row.auth_mode != SIGNATURE:
            raise Conflict(f"{row.auth_mode} webhooks use a service-generated secret; use rotate-secret")
        if row.secret_version is not None:
            raise Conflict("this webhook already has its signing secret; use rotate-secret to replace it")
        value = new_secret_value(row.auth_mode, row.signature_scheme, given)
        name = row.secret_name or suggested_secret_name(row.name)
        info = await _store_webhook_secret(session, box, clock, who.team_id, name, value)
        row.secret_name, row.secret_version, row.updated_at = name, info.version, clock.now()
    return web.json_response(webhook_view(row, request.app[SETTINGS].base_url))


async def delete_webhook(request: web.Request) -> web.Response:
    """``DELETE .../webhooks/{wid}`` (admin): senders get 404 at once; automations keep their triggers."""
    who = await require(request, "admin")
    clock = request.app[CLOCK]
    async with sessions(request)() as session, session.begin():
        factory, row = await load_webhook(
            session, who.team_id, request.match_info["uid"], request.match_info["wid"]
        )
        remove(factory, row, clock.now())
    return web.Response(status=204)


def setup(app: web.Application) -> None:
    base = API_V1 + "/factory/{uid}/webhooks"
    app.router.add_get(base, list_webhooks)
    app.router.add_post(base, create_webhook)
    app.router.add_get(base + "/{wid}", get_webhook)
    app.router.add_patch(base + "/{wid}", patch_webhook)
    app.router.add_delete(base + "/{wid}", delete_webhook)
    app.router.add_post(base + "/{wid}/rotate-secret", rotate_secret)
    app.router.add_post(base + "/{wid}/secret", supply_secret)
