"""Notification endpoints, their messages and attempts over the management API (docs/management.md,
"Notification endpoints"); how messages are made, signed and retried is docs/notifications.md.

Routes under ``/api/v1/factory/{uid}/notifications``, where ``{nid}`` is an endpoint's ID (``ne_...``)
or its name. Reads need ``member``, writes and resends ``admin``; worker keys get 403, and another team's
factory, endpoint or message is a 404. An endpoint of a factory managed through definition files belongs to
its repository: creating, changing or deleting it here is a 409 naming ``notifications/<name>.yaml``.
Resending a message is an action, not an edit, and is allowed there too.

Endpoints are checked as definitions are (:mod:`api.management.notification_requests`); the signing secret
must be a ``webhook``-scoped team secret (runs can never read it) holding a Standard Webhooks ``whsec_``
secret, the check a ``standard_webhooks`` webhook's secret passes. Responses never carry a secret value.

A resend gives a ``delivered`` or ``failed`` message one more attempt, at once, with the same webhook-id:
one guarded UPDATE puts it back to ``pending`` (``manual``, due now, unclaimed), so a message the sender
holds is never taken from it; this replica's sender is woken after the commit.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy import delete, func, or_, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import BOX, CLOCK, sessions
from api.errors import Conflict, ResourceNotFound
from api.factories.routes import load_factory
from api.http.bodies import SMALL_BODY_BYTES, fail_on, field_error, read_json_object
from api.http.pagination import (
    Cursor,
    fingerprint,
    page_after,
    page_info,
    page_limit,
    parse_timestamp_key,
    single_page_info,
    split_page,
    timestamp_key,
)
from api.http.paths import API_V1
from api.management.notification_requests import (
    MAX_ENDPOINTS,
    apply_update,
    check_signing_secret,
    parse_endpoint,
)
from api.notifications.sender import DELIVERED, FAILED, PENDING
from api.notifications.serialize import endpoint_json, message_detail_json, message_json
from api.notifications.service import wake
from store import ids
from store.clock import rfc3339
from store.models import Factory, NotificationAttempt, NotificationEndpoint, NotificationMessage

DEFINITIONS = "definitions"
STATUSES = (PENDING, DELIVERED, FAILED)
MAX_RUN_ID = 100


def definition_file(name: str, path: str | None = None) -> str:
    return path or f"notifications/{name}.yaml"


async def load_endpoint(
    session: AsyncSession, team_id: str, factory_uid: str, nid: str
) -> tuple[Factory, NotificationEndpoint]:
    """The factory and its endpoint ``nid`` (ID, else name); 404 when either is missing or another team's."""
    factory = await load_factory(session, team_id, factory_uid)
    e = NotificationEndpoint
    stmt = select(e).where(
        e.factory_uid == factory.uid, e.team_id == team_id, or_(e.uid == nid, e.name == nid)
    )
    rows = list(await session.scalars(stmt))
    row = next((r for r in rows if r.uid == nid), rows[0] if rows else None)
    if row is None:
        raise ResourceNotFound(f"notification endpoint {nid!r} does not exist in factory {factory_uid}")
    return factory, row


def refuse_definitions(factory: Factory, row: NotificationEndpoint, what: str) -> None:
    """409 for an endpoint a repository owns (docs/management.md, "Notification endpoints")."""
    if factory.managed_by == DEFINITIONS or row.managed_by == DEFINITIONS:
        where = definition_file(row.name, row.definition_path)
        raise Conflict(
            f"notification endpoint {row.name!r} is defined in {where} of factory {factory.name!r}"
            f" (managed through definition files); {what} there and commit"
        )


# --- endpoints --------------------------------------------------------------------------------------


async def list_endpoints(request: web.Request) -> web.Response:
    """``GET .../notifications`` (member): every endpoint of the factory, by name (at most 20: one page)."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        factory = await load_factory(session, who.team_id, request.match_info["uid"])
        e = NotificationEndpoint
        stmt = select(e).where(e.factory_uid == factory.uid, e.team_id == who.team_id).order_by(e.name, e.uid)
        rows = list(await session.scalars(stmt))
    return web.json_response({"endpoints": [endpoint_json(r) for r in rows], "page_info": single_page_info()})


async def create_endpoint(request: web.Request) -> web.Response:
    """``POST .../notifications`` (admin): 201 with the endpoint; only on API-managed factories."""
    who = await require(request, "admin")
    spec = parse_endpoint(await read_json_object(request, max_bytes=SMALL_BODY_BYTES), create=True)
    assert spec.name is not None and spec.url is not None and spec.secret_name is not None
    factory_uid = request.match_info["uid"]
    async with sessions(request)() as session, session.begin():
        # A no-op write first: it serialises creates per factory, so the limit holds under races.
        await session.execute(
            update(Factory)
            .where(Factory.uid == factory_uid, Factory.team_id == who.team_id)
            .values(updated_at=Factory.updated_at)
        )
        factory = await load_factory(session, who.team_id, factory_uid)
        if factory.managed_by == DEFINITIONS:
            raise Conflict(
                f"factory {factory.name!r} is managed through definition files: add"
                f" {definition_file(spec.name)} to its repository instead (the repository is the source"
                " of truth)"
            )
        count = await session.scalar(
            select(func.count()).where(NotificationEndpoint.factory_uid == factory.uid)
        )
        if (count or 0) >= MAX_ENDPOINTS:
            raise Conflict(
                f"factory {factory.name!r} already has {MAX_ENDPOINTS} notification endpoints, the maximum"
            )
        await check_signing_secret(
            session, request.app[BOX], who.team_id, spec.secret_name, spec.secret_field
        )
        now = request.app[CLOCK].now()
        row = NotificationEndpoint(
            uid=ids.new_id(ids.NOTIFICATION),
            team_id=who.team_id,
            factory_uid=factory.uid,
            name=spec.name,
            url=spec.url,
            secret_name=spec.secret_name,
            events=spec.events,
            filter=spec.filter or {},
            enabled=True if spec.enabled is None else spec.enabled,
            description=spec.description,
            failing=False,
            consecutive_failures=0,
            managed_by="api",
            definition_path=None,
            spec_digest=None,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        taken = f"factory {factory.name!r} already has a notification endpoint named {spec.name!r}"
        try:
            await session.flush()
        except IntegrityError:  # the unique (factory, name) decides, concurrent creates included
            raise Conflict(taken) from None
        out = endpoint_json(row)
    return web.json_response(out, status=201)


async def get_endpoint(request: web.Request) -> web.Response:
    who = await require(request, "member")
    async with sessions(request)() as session:
        _, row = await load_endpoint(
            session, who.team_id, request.match_info["uid"], request.match_info["nid"]
        )
    return web.json_response(endpoint_json(row))


async def update_endpoint(request: web.Request) -> web.Response:
    """``PATCH .../notifications/{nid}`` (admin): url, secretName, events, filter, enabled, description."""
    who = await require(request, "admin")
    spec = parse_endpoint(await read_json_object(request, max_bytes=SMALL_BODY_BYTES), create=False)
    async with sessions(request)() as session, session.begin():
        factory, row = await load_endpoint(
            session, who.team_id, request.match_info["uid"], request.match_info["nid"]
        )
        refuse_definitions(factory, row, "change it")
        if spec.secret_name is not None and spec.secret_name != row.secret_name:
            await check_signing_secret(
                session, request.app[BOX], who.team_id, spec.secret_name, spec.secret_field
            )
        if apply_update(row, spec):
            row.updated_at = request.app[CLOCK].now()
        out = endpoint_json(row)
    return web.json_response(out)


async def delete_endpoint(request: web.Request) -> web.Response:
    """``DELETE .../notifications/{nid}`` (admin): the endpoint with its messages and their attempts."""
    who = await require(request, "admin")
    async with sessions(request)() as session, session.begin():
        factory, row = await load_endpoint(
            session, who.team_id, request.match_info["uid"], request.match_info["nid"]
        )
        refuse_definitions(factory, row, "remove the file (or set enabled: false)")
        await session.execute(delete(NotificationEndpoint).where(NotificationEndpoint.uid == row.uid))
    return web.Response(status=204)


# --- messages and attempts --------------------------------------------------------------------------


async def load_message(
    session: AsyncSession, team_id: str, endpoint: NotificationEndpoint, msg_id: str
) -> NotificationMessage:
    m = NotificationMessage
    stmt = select(m).where(m.id == msg_id, m.endpoint_uid == endpoint.uid, m.team_id == team_id)
    row = (await session.scalars(stmt)).one_or_none()
    if row is None:
        raise ResourceNotFound(f"notification endpoint {endpoint.name!r} has no message {msg_id!r}")
    return row


async def list_messages(request: web.Request) -> web.Response:
    """``GET .../{nid}/messages`` (member): newest first; ``status`` (repeatable), ``run_id``, pages."""
    who = await require(request, "member")
    errors: list[dict[str, Any]] = []
    limit = page_limit(request.query, default=50, maximum=200, errors=errors)
    statuses = sorted(set(request.query.getall("status", [])))
    for status in statuses:
        if status not in STATUSES:
            errors.append(field_error("status", f"unknown status {status!r}; use {', '.join(STATUSES)}"))
    run_id = request.query.get("run_id") or None
    if run_id is not None and len(run_id) > MAX_RUN_ID:
        errors.append(field_error("run_id", f"must be at most {MAX_RUN_ID} characters"))
    fail_on(errors)
    m = NotificationMessage
    async with sessions(request)() as session:
        _, endpoint = await load_endpoint(
            session, who.team_id, request.match_info["uid"], request.match_info["nid"]
        )
        fp = fingerprint(
            {"list": "notification-messages", "endpoint": endpoint.uid, "status": statuses, "run": run_id}
        )
        stmt = select(m).where(m.endpoint_uid == endpoint.uid, m.team_id == who.team_id)
        if statuses:
            stmt = stmt.where(m.status.in_(statuses))
        if run_id is not None:
            stmt = stmt.where(m.run_id == run_id)
        after = page_after(request.query, fp)
        if after is not None:
            bound = tuple_(parse_timestamp_key(after.value), after.row_id)
            stmt = stmt.where(tuple_(m.created_at, m.id) < bound)
        stmt = stmt.order_by(m.created_at.desc(), m.id.desc()).limit(limit + 1)
        rows, last = split_page(list(await session.scalars(stmt)), limit)
    position = Cursor(value=timestamp_key(last.created_at), row_id=last.id) if last else None
    return web.json_response(
        {"messages": [message_json(r) for r in rows], "page_info": page_info(position, fp)}
    )


async def get_message(request: web.Request) -> web.Response:
    """``GET .../{nid}/messages/{msg_id}`` (member): the message, its ``payload`` and its attempts."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        _, endpoint = await load_endpoint(
            session, who.team_id, request.match_info["uid"], request.match_info["nid"]
        )
        row = await load_message(session, who.team_id, endpoint, request.match_info["msg_id"])
        a = NotificationAttempt
        attempts = list(await session.scalars(select(a).where(a.message_id == row.id).order_by(a.id)))
    return web.json_response(message_detail_json(row, attempts))


async def resend_message(request: web.Request) -> web.Response:
    """``POST .../messages/{msg_id}/resend`` (admin): 202; one more attempt, at once, same webhook-id."""
    who = await require(request, "admin")
    msg_id = request.match_info["msg_id"]
    now = request.app[CLOCK].now()
    m = NotificationMessage
    async with sessions(request)() as session, session.begin():
        _, endpoint = await load_endpoint(
            session, who.team_id, request.match_info["uid"], request.match_info["nid"]
        )
        if not endpoint.enabled:
            raise Conflict(
                f"notification endpoint {endpoint.name!r} is disabled: nothing is sent to it; enable it"
                " before resending"
            )
        result = await session.execute(
            update(m)
            .where(
                m.id == msg_id,
                m.endpoint_uid == endpoint.uid,
                m.team_id == who.team_id,
                m.status.in_((DELIVERED, FAILED)),
            )
            .values(status=PENDING, manual=True, next_attempt_at=now, claim_token=None)
            .execution_options(synchronize_session=False)
        )
        row = await load_message(session, who.team_id, endpoint, msg_id)
        if not getattr(result, "rowcount", 0):
            due = rfc3339(row.next_attempt_at) or "soon"
            raise Conflict(
                f"message {msg_id} is already queued (status {row.status}, next attempt at {due});"
                " resend a delivered or failed message"
            )
        out = message_json(row)
    wake(request.app)
    return web.json_response(out, status=202)


def setup(app: web.Application) -> None:
    """Register the notification routes."""
    base = API_V1 + "/factory/{uid}/notifications"
    one = base + "/{nid}"
    app.router.add_get(base, list_endpoints)
    app.router.add_post(base, create_endpoint)
    app.router.add_get(one, get_endpoint)
    app.router.add_patch(one, update_endpoint)
    app.router.add_delete(one, delete_endpoint)
    app.router.add_get(one + "/messages", list_messages)
    app.router.add_get(one + "/messages/{msg_id}", get_message)
    app.router.add_post(one + "/messages/{msg_id}/resend", resend_message)
