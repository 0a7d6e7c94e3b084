"""A team's GitHub App connection and its delivery log (docs/management.md, "GitHub App connection").

``POST /integrations/github`` (admin) connects the team's GitHub App: it names the team secret that holds
the App's webhook secret and answers with the URL to paste into the App's settings. A team has at most one
connection - the unique constraint on ``github_connections.team_id`` decides, so two concurrent connects
give one 201 and one 409. ``GET`` shows it, ``DELETE`` removes it (deliveries to its URL then 404; its log
entries stay until retention prunes them).

The connection's delivery log and replay are the webhook's (:mod:`.deliveries`, :mod:`.replay`): the same
entries, keyed by the connection UID, and a replay routes by the event its Accepted entry recorded.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import CLOCK, SESSIONS, SETTINGS, sessions
from api.errors import Conflict, ResourceNotFound
from api.http.bodies import SMALL_BODY_BYTES, fail_on, field_error, read_json_object, unknown_fields
from api.http.pagination import page_limit
from api.http.paths import API_V1
from api.ingress import pipeline
from api.ingress.github_routing import connection_row
from api.management.deliveries import LOG_STATUSES, delivery_json, parse_payload, read_log
from api.management.replay import original_entry, replay_identity, replay_in
from api.runs.event_hub import runs_queued
from store import ids
from store import secrets as secret_store
from store.apikeys import Principal
from store.clock import rfc3339
from store.models import GitHubConnection

PATH = API_V1 + "/integrations/github"
INGRESS_PATH = "/webhooks/github/"


def connection_json(row: GitHubConnection, base_url: str) -> dict[str, Any]:
    return {
        "uid": row.uid,
        "url": base_url.rstrip("/") + INGRESS_PATH + row.uid,
        "secret_name": row.secret_name,
        "created_at": rfc3339(row.created_at),
    }


async def load_connection(session: AsyncSession, team_id: str) -> GitHubConnection:
    row = (
        await session.execute(select(GitHubConnection).where(GitHubConnection.team_id == team_id))
    ).scalar_one_or_none()
    if row is None:
        raise ResourceNotFound(
            "this team has no GitHub App connection; POST /integrations/github connects one"
        )
    return row


async def connect(request: web.Request) -> web.Response:
    """``POST /integrations/github`` (admin) ``{secret_name}`` -> 201, or 409 when the team has one."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    errors = unknown_fields(body, {"secret_name"})
    name = body.get("secret_name")
    if not isinstance(name, str) or not secret_store.NAME_RE.match(name):
        errors.append(
            field_error(
                "secret_name",
                "is required: the team secret holding the App's webhook secret (letters, digits, '.', '_'"
                " or '-', 1-200, starting alnum)",
            )
        )
    fail_on(errors)
    assert isinstance(name, str)
    row = GitHubConnection(
        uid=ids.new_id(ids.GITHUB_CONNECTION),
        team_id=who.team_id,
        secret_name=name,
        created_at=request.app[CLOCK].now(),
    )
    try:
        async with sessions(request)() as session, session.begin():
            secret = await secret_store.get(session, who.team_id, name)
            if secret is not None and secret.scope != "webhook":
                message = (
                    f"secret {name!r} has scope {secret.scope!r}: the App's webhook secret must have scope"
                    " 'webhook', so that no run can read it"
                )
                fail_on([field_error("secret_name", message)])
            session.add(row)
    except IntegrityError:  # the unique team_id: another connect won
        raise Conflict(
            "this team already has a GitHub App connection; DELETE /integrations/github first"
        ) from None
    return web.json_response(connection_json(row, request.app[SETTINGS].base_url), status=201)


async def show(request: web.Request) -> web.Response:
    """``GET /integrations/github`` (member): the team's connection, or 404."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        row = await load_connection(session, who.team_id)
    return web.json_response(connection_json(row, request.app[SETTINGS].base_url))


async def disconnect(request: web.Request) -> web.Response:
    """``DELETE /integrations/github`` (admin): 204, or 404 when there is none."""
    who = await require(request, "admin")
    async with sessions(request)() as session, session.begin():
        row = await load_connection(session, who.team_id)
        await session.execute(delete(GitHubConnection).where(GitHubConnection.uid == row.uid))
    return web.Response(status=204)


async def list_deliveries(request: web.Request) -> web.Response:
    """``GET /integrations/github/deliveries`` (member): the newest entries of the connection's log
    (``limit``, ``status`` repeatable), each with the runs it started."""
    who = await require(request, "member")
    errors: list[dict[str, Any]] = []
    limit = page_limit(request.query, default=50, maximum=200, errors=errors)
    statuses = sorted(set(request.query.getall("status", [])))
    errors += [field_error("status", f"unknown status {s!r}") for s in statuses if s not in LOG_STATUSES]
    fail_on(errors)
    async with sessions(request)() as session:
        row = await load_connection(session, who.team_id)
        entries, runs = await read_log(session, who.team_id, row.uid, limit, statuses=statuses)
    return web.json_response({"deliveries": [delivery_json(e, runs.get(e.delivery_id, [])) for e in entries]})


async def replay_delivery(request: web.Request) -> web.Response:
    """``POST /integrations/github/deliveries/{delivery_id}/replay`` (admin): 201 with the new entry's
    identity and the runs it started (docs/management.md, "Replaying a delivery")."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    fail_on(unknown_fields(body, set()))
    answer = await replay(request.app, who, request.match_info["delivery_id"])
    return web.json_response(answer, status=201)


async def replay(app: web.Application, who: Principal, delivery_id: str) -> dict[str, Any]:
    """Replay an Accepted GitHub delivery against the team's automations as they are now."""
    now = app[CLOCK].now()
    async with app[SESSIONS]() as session, session.begin():
        row = await load_connection(session, who.team_id)
        entry = await original_entry(session, who.team_id, row.uid, delivery_id)
        detail = entry.detail or ""
        if not detail.startswith(pipeline.EVENT_DETAIL):
            raise Conflict(f"delivery {delivery_id!r} does not record its GitHub event and cannot be routed")
        event = detail.removeprefix(pipeline.EVENT_DETAIL)
        identity = replay_identity(entry.delivery_id, int(now.timestamp() * 1000))
        connection = connection_row(row.uid, row.team_id, row.secret_name, None, None)
        payload = parse_payload(entry.payload)
        pending = pipeline.Pending(connection, identity, entry.payload or b"", payload, event=event)
        conn = await session.connection()
        runs, answer_detail = await conn.run_sync(replay_in, pending, entry, who, None, now)
    if runs:
        runs_queued(app)
    return {
        "delivery_id": identity,
        "replay_of": entry.delivery_id,
        "webhook_uid": row.uid,
        "event": event,
        "status": "Replayed",
        "received_at": rfc3339(now),
        "automation_id": None,
        "detail": answer_detail,
        "runs": runs,
    }


def setup(app: web.Application) -> None:
    app.router.add_post(PATH, connect)
    app.router.add_get(PATH, show)
    app.router.add_delete(PATH, disconnect)
    app.router.add_get(PATH + "/deliveries", list_deliveries)
    app.router.add_post(PATH + "/deliveries/{delivery_id:.+}/replay", replay_delivery)
