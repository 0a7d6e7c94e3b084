"""Replaying a stored delivery (docs/management.md, "Replaying a delivery").

A replay re-evaluates an Accepted delivery against the automations *as they are now* - after a filter was
fixed, an automation added or enabled - and starts a run for each match. It writes a new delivery-log
entry with status ``Replayed`` and an identity of its own, ``<original delivery ID>/replay/<id>``, which
carries the original payload and says who replayed what (``detail``). Its runs are built by the very code
ingress uses (:func:`api.ingress.pipeline.start_runs`, matched by :func:`api.ingress.decisions.decide_in`)
with that new identity as their ``delivery_id``: the log's "delivery -> runs" listing shows them, and the
runs' unique index (automation, webhook, delivery) holds without ever refusing a replay. A replay is an
explicit request, so it is never de-duplicated: replaying twice starts the runs twice.

Only Accepted entries are replayed (the others store no payload, or are replays themselves); a deleted
webhook is refused, a disabled one is not (disabling closes the sender's URL, not the admin's log).
Disabled automations never run: they are not matched, and naming one is a 409. The Replayed entry records
the decisions of the replay's routing as an Accepted entry does (docs/ingress.md, "Decisions"); with an
``automation_id``, every other automation is decided "not part of this replay".
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from aiohttp import web
from sqlalchemy import Connection, Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import CLOCK, SESSIONS
from api.errors import Conflict, ResourceNotFound, ValidationFailed
from api.factories.routes import load_factory
from api.http.bodies import (
    SMALL_BODY_BYTES,
    fail_on,
    field_error,
    optional_string,
    read_json_object,
    unknown_fields,
)
from api.http.paths import API_V1
from api.ingress import decisions, lookup, pipeline
from api.management.deliveries import COLUMNS, REPLAYED, Entry, parse_payload
from api.runs.event_hub import runs_queued
from store import ids
from store.apikeys import Principal
from store.clock import rfc3339
from store.models import Automation, AutomationWebhook, Delivery, Run, Webhook

_DELIVERIES: Table = Delivery.__table__  # type: ignore[assignment]
_MARK = "/replay/"
_ID_MAX = 300  # deliveries.delivery_id and runs.delivery_id
_SUFFIX = len(_MARK) + 26  # the 26 time-ordered characters of a store ID
_DETAIL_MAX = 500


def replay_identity(original: str, now_ms: int) -> str:
    """``<original>/replay/<time-ordered id>``; an original too long to carry (ingress never writes one)
    is replaced by its hash, never truncated, so distinct originals stay distinct."""
    base = original
    if len(base) + _SUFFIX > _ID_MAX:
        base = "sha256_" + hashlib.sha256(original.encode("utf-8")).hexdigest()[:40]
    return base + _MARK + ids.new_id("rp", now_ms=now_ms).removeprefix("rp_")


async def _webhook(session: AsyncSession, team_id: str, factory_uid: str, wid: str) -> Webhook:
    """The factory's webhook, disabled or not; 404 when unknown or another team's, 409 when deleted."""
    factory = await load_factory(session, team_id, factory_uid)
    row = await session.get(Webhook, wid)
    if row is None or row.factory_uid != factory.uid or row.team_id != team_id:
        raise ResourceNotFound(f"webhook {wid} does not exist in factory {factory_uid}")
    if row.deleted_at is not None:
        raise Conflict(f"webhook {wid} ({row.name}) is deleted: its deliveries can no longer be replayed")
    return row


async def original_entry(session: AsyncSession, team_id: str, wid: str, delivery_id: str) -> Entry:
    """The Accepted entry with this identity; 404 when the log has none, 409 naming any other status."""
    base = select(*COLUMNS, Delivery.payload).where(
        Delivery.webhook_uid == wid, Delivery.team_id == team_id, Delivery.delivery_id == delivery_id
    )
    newest = base.order_by(Delivery.seq.desc()).limit(1)
    row = (await session.execute(newest.where(Delivery.status == pipeline.ACCEPTED))).first()
    row = row or (await session.execute(newest)).first()
    if row is None:
        raise ResourceNotFound(f"webhook {wid} has no delivery {delivery_id!r} in its log")
    entry = Entry(*row)
    if entry.status == REPLAYED:
        original = delivery_id.rsplit(_MARK, 1)[0]
        raise Conflict(f"delivery {delivery_id!r} is a Replayed entry; replay the original {original!r}")
    if entry.status == pipeline.DUPLICATE:
        raise Conflict(
            f"delivery {delivery_id!r} is logged only as 'Duplicate' (its Accepted entry was pruned): only"
            " Accepted deliveries store a payload to replay"
        )
    if entry.status != pipeline.ACCEPTED:
        raise Conflict(
            f"delivery {delivery_id!r} was logged as {entry.status!r}: it was never accepted and stores no"
            " payload; only Accepted deliveries can be replayed"
        )
    return entry


async def _check_automation(session: AsyncSession, hook: Webhook, automation_id: str) -> None:
    """``automation_id`` must be an automation of this factory that routes the webhook (else 422), and
    enabled (else 409)."""
    stmt = (
        select(Automation.enabled)
        .join(AutomationWebhook, AutomationWebhook.automation_uid == Automation.uid)
        .where(
            Automation.uid == automation_id,
            Automation.team_id == hook.team_id,
            Automation.factory_uid == hook.factory_uid,
            AutomationWebhook.webhook_uid == hook.uid,
        )
        .limit(1)
    )
    enabled = (await session.execute(stmt)).scalar_one_or_none()
    if enabled is None:
        message = (
            f"automation {automation_id} is not an automation of factory {hook.factory_uid} with a webhook"
            f" trigger that selects webhook {hook.uid}"
        )
        raise ValidationFailed(message, errors=[field_error("automation_id", message)])
    if not enabled:
        raise Conflict(f"automation {automation_id} is disabled: enable it before replaying into it")


def replay_in(
    conn: Connection,
    pending: pipeline.Pending,
    entry: Entry,
    who: Principal,
    only: str | None,
    now: dt.datetime,
) -> tuple[list[dict[str, str | None]], str]:
    """Match, start the runs and write the Replayed entry, in the caller's transaction."""
    routed = pipeline.route_in(conn, [pending], lookup.FilterCache(64))[0]
    if only is not None:
        routed = decisions.only(routed, only)
    if routed.matched:
        pipeline.start_runs(conn, now, [pending], {0: routed.matched})
    runs = [
        {"run_id": run_id, "automation_id": automation_id}
        for run_id, automation_id in conn.execute(
            select(Run.run_id, Run.automation_id)
            .where(Run.webhook_uid == pending.webhook.uid, Run.delivery_id == pending.delivery_id)
            .order_by(Run.automation_id)
        ).all()
    ]
    detail = f"replay of {entry.delivery_id!r} by API key {who.name!r} ({who.key_id})"
    detail += f" into automation {only}" if only else ""
    detail += f": {len(runs)} run(s) started" if runs else ": no enabled automation matched, nothing started"
    conn.execute(
        insert(_DELIVERIES).values(
            team_id=pending.webhook.team_id,
            webhook_uid=pending.webhook.uid,
            delivery_id=pending.delivery_id,
            status=REPLAYED,
            size=entry.size,
            received_at=now,
            payload=entry.payload,
            detail=detail[:_DETAIL_MAX],
            decisions=routed.decisions,
        )
    )
    return runs, detail[:_DETAIL_MAX]


async def replay_delivery(request: web.Request) -> web.Response:
    """``POST .../deliveries/{delivery_id}/replay`` (admin) ``{automation_id?}``: 201 with the new entry's
    identity and the runs it started (docs/management.md, "Replaying a delivery")."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    errors = unknown_fields(body, {"automation_id"})
    only = optional_string(body, "automation_id", errors)
    fail_on(errors)
    uid, wid, delivery_id = (request.match_info[k] for k in ("uid", "wid", "delivery_id"))
    answer = await replay(request.app, who, uid, wid, delivery_id, only)
    return web.json_response(answer, status=201)


async def replay(
    app: web.Application, who: Principal, uid: str, wid: str, delivery_id: str, only: str | None
) -> dict[str, Any]:
    """Replay an Accepted delivery (API and console): the new entry's identity and the runs it started."""
    now = app[CLOCK].now()
    async with app[SESSIONS]() as session, session.begin():
        hook = await _webhook(session, who.team_id, uid, wid)
        entry = await original_entry(session, who.team_id, wid, delivery_id)
        if only is not None:
            await _check_automation(session, hook, only)
        webhook = lookup.WebhookRow(
            uid=hook.uid,
            team_id=hook.team_id,
            factory_uid=hook.factory_uid,
            name=hook.name,
            auth_mode=hook.auth_mode,
            signature_scheme=hook.signature_scheme,
            secret_name=hook.secret_name,
            secret_version=hook.secret_version,
            delivery_id_header=hook.delivery_id_header,
            secret_id=None,  # runs never need the secret
        )
        identity = replay_identity(entry.delivery_id, int(now.timestamp() * 1000))
        pending = pipeline.Pending(webhook, identity, entry.payload or b"", parse_payload(entry.payload))
        conn = await session.connection()
        runs, detail = await conn.run_sync(replay_in, pending, entry, who, only, now)
    if runs:
        runs_queued(app)
    answer = {
        "delivery_id": identity,
        "replay_of": entry.delivery_id,
        "webhook_uid": wid,
        "status": REPLAYED,
        "received_at": rfc3339(now),
        "automation_id": only,
        "detail": detail,
        "runs": runs,
    }
    return answer


def setup(app: web.Application) -> None:
    path = API_V1 + "/factory/{uid}/webhooks/{wid}/deliveries/{delivery_id:.+}/replay"
    app.router.add_post(path, replay_delivery)
