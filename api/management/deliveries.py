"""A webhook's delivery log, and "Test filter" against a stored delivery (docs/management.md, "Delivery
log" and "Test filter").

The log is read newest first by its insertion sequence (``seq``), so pages are stable while deliveries
keep arriving. Only Accepted entries, and the Replayed entries a replay writes (:mod:`.replay`), store a
payload and start runs (``run_ids``); Duplicate and Rejected entries are metadata. Those entries also
store their decisions (:mod:`api.ingress.decisions`), shown with the run each matched automation started
and its current state, found through the runs' (webhook, delivery ID, automation) columns.

Test filter mirrors what ingress does with a delivery: it uses the automation's routing rows (one per
webhook trigger and selected webhook UID, with that trigger's payload filter) and the same compiled
filter, so "Would trigger" here means a run would start there.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import sessions
from api.errors import Conflict, ResourceNotFound
from api.factories.routes import load_factory
from api.http.bodies import (
    SMALL_BODY_BYTES,
    fail_on,
    field_error,
    optional_string,
    read_json_object,
    unknown_fields,
)
from api.http.pagination import (
    Cursor,
    InvalidCursor,
    fingerprint,
    page_after,
    page_info,
    page_limit,
    split_page,
)
from api.http.paths import API_V1
from api.ingress.pipeline import ACCEPTED, STATUSES
from api.management.webhooks import load_webhook
from store.clock import rfc3339
from store.models import Automation, AutomationWebhook, Delivery, Factory, Run, Webhook
from store.rules import payload_filter

WOULD_TRIGGER, WOULD_NOT_TRIGGER = "Would trigger", "Would not trigger"
REPLAYED = "Replayed"  # written by a replay, never by ingress (docs/management.md, "Replaying a delivery")
LOG_STATUSES = (*STATUSES, REPLAYED)
WITH_RUNS = (ACCEPTED, REPLAYED)  # the entries that store a payload and start runs
COLUMNS = (
    Delivery.seq,
    Delivery.delivery_id,
    Delivery.webhook_uid,
    Delivery.status,
    Delivery.size,
    Delivery.received_at,
    Delivery.detail,
    Delivery.decisions,
)
# ``outcome`` of the log's list: entries that store a payload and started at least one run, or none.
OUTCOMES = ("runs", "no_runs")


@dataclass(frozen=True, slots=True)
class Entry:
    """One delivery log entry as read (the payload only when it was selected)."""

    seq: int
    delivery_id: str
    webhook_uid: str
    status: str
    size: int
    received_at: dt.datetime
    detail: str | None
    decisions: list[Any] | None = None
    payload: bytes | None = None


@dataclass(frozen=True, slots=True)
class RunRef:
    """A run a delivery started, with its automation and current state."""

    run_id: str
    automation_id: str | None
    state: str


def decisions_json(row: Entry, runs: list[RunRef]) -> list[dict[str, Any]] | None:
    """The entry's decisions with the run each matched automation started (docs/management.md,
    "Delivery log"); None when none were recorded (an entry that starts no runs, or one from before
    decisions were recorded, or a GitHub App delivery)."""
    if row.decisions is None or row.status not in WITH_RUNS:
        return None
    first: dict[str | None, RunRef] = {}
    for run in runs:
        first.setdefault(run.automation_id, run)
    shown = []
    for d in row.decisions:
        found = first.get(d.get("automation_uid")) if d.get("matched") else None
        shown.append(
            {
                "automation_uid": d.get("automation_uid"),
                "automation_name": d.get("automation_name"),
                "enabled": d.get("enabled", True),
                "matched": bool(d.get("matched")),
                "run_id": found.run_id if found else None,
                "run_state": found.state if found else None,
                "reason": d.get("reason"),
                "failed_path": d.get("failed_path"),
            }
        )
    return shown


def delivery_json(row: Entry, runs: list[RunRef]) -> dict[str, Any]:
    return {
        "delivery_id": row.delivery_id,
        "webhook_uid": row.webhook_uid,
        "status": row.status,
        "size": row.size,
        "received_at": rfc3339(row.received_at),
        "run_ids": [r.run_id for r in runs] if row.status in WITH_RUNS else [],
        "detail": row.detail,
        "decisions": decisions_json(row, runs),
    }


async def _runs(session: AsyncSession, webhook_uid: str, delivery_ids: set[str]) -> dict[str, list[RunRef]]:
    """Runs started by these deliveries of one webhook, oldest first."""
    found: dict[str, list[RunRef]] = defaultdict(list)
    if delivery_ids:
        stmt = (
            select(Run.delivery_id, Run.run_id, Run.automation_id, Run.state)
            .where(Run.webhook_uid == webhook_uid, Run.delivery_id.in_(delivery_ids))
            .order_by(Run.created_at, Run.run_id)
        )
        for delivery_id, run_id, automation_id, state in (await session.execute(stmt)).all():
            found[delivery_id or ""].append(RunRef(run_id, automation_id, state))
    return found


def parse_payload(raw: bytes | None) -> object:
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError):  # ingress stores only valid JSON; be safe anyway
        return None


async def read_log(
    session: AsyncSession,
    team_id: str,
    wid: str,
    limit: int,
    *,
    statuses: list[str] | None = None,
    before: int | None = None,
    payloads: bool = False,
    outcome: str | None = None,
) -> tuple[list[Entry], dict[str, list[RunRef]]]:
    """A webhook's log newest first (API and console): ``limit`` entries before sequence ``before``, with
    their payloads when asked, and the runs the entries that start runs started. ``outcome`` (one of
    :data:`OUTCOMES`) keeps the entries that store a payload and started runs, or started none."""
    stmt = select(*COLUMNS, *((Delivery.payload,) if payloads else ())).where(
        Delivery.webhook_uid == wid, Delivery.team_id == team_id
    )
    if statuses:
        stmt = stmt.where(Delivery.status.in_(statuses))
    if outcome is not None:
        started = (
            select(Run.run_id)
            .where(Run.webhook_uid == Delivery.webhook_uid, Run.delivery_id == Delivery.delivery_id)
            .exists()
        )
        stmt = stmt.where(Delivery.status.in_(WITH_RUNS), started if outcome == "runs" else ~started)
    if before is not None:
        stmt = stmt.where(Delivery.seq < before)
    rows = [Entry(*r) for r in await session.execute(stmt.order_by(Delivery.seq.desc()).limit(limit))]
    runs = await _runs(session, wid, {r.delivery_id for r in rows if r.status in WITH_RUNS})
    return rows, runs


async def list_deliveries(request: web.Request) -> web.Response:
    """``GET .../{wid}/deliveries`` (member): newest first; ``status`` (repeatable), ``outcome``, ``limit``,
    ``cursor``."""
    who = await require(request, "member")
    uid, wid = request.match_info["uid"], request.match_info["wid"]
    errors: list[dict[str, Any]] = []
    limit = page_limit(request.query, default=50, maximum=200, errors=errors)
    statuses = sorted(set(request.query.getall("status", [])))
    for status in statuses:
        if status not in LOG_STATUSES:
            errors.append(
                field_error("status", f"unknown status {status!r}; use one of: {', '.join(LOG_STATUSES)}")
            )
    outcome = request.query.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        errors.append(
            field_error(
                "outcome",
                f"unknown outcome {outcome!r}; use runs (started at least one run) or no_runs"
                " (accepted, started nothing)",
            )
        )
    fail_on(errors)
    listing: dict[str, Any] = {"list": "deliveries", "webhook": wid, "status": statuses}
    if outcome is not None:  # without it, the fingerprint (and an open cursor) stays what it was
        listing["outcome"] = outcome
    fp = fingerprint(listing)
    before: int | None = None
    after = page_after(request.query, fp)
    if after is not None:
        # A sequence number: ASCII digits only (str.isdigit also admits '²', which int() refuses) and
        # within a 64-bit column, so a forged cursor is a 400 and never reaches the database as an overflow.
        if not (after.row_id.isascii() and after.row_id.isdigit() and len(after.row_id) <= 18):
            raise InvalidCursor()
        before = int(after.row_id)
    async with sessions(request)() as session:
        await load_webhook(session, who.team_id, uid, wid)
        fetched, runs = await read_log(
            session, who.team_id, wid, limit + 1, statuses=statuses, before=before, outcome=outcome
        )
        rows, last = split_page(fetched, limit)
    return web.json_response(
        {
            "deliveries": [delivery_json(r, runs.get(r.delivery_id, [])) for r in rows],
            "page_info": page_info(Cursor(value=None, row_id=str(last.seq)) if last else None, fp),
        }
    )


async def get_delivery(request: web.Request) -> web.Response:
    """``GET .../deliveries/{delivery_id}`` (member): the Accepted entry and payload, else the newest (a
    Replayed entry, the only one with its identity, shows its payload too)."""
    who = await require(request, "member")
    uid, wid, delivery_id = (
        request.match_info["uid"],
        request.match_info["wid"],
        request.match_info["delivery_id"],
    )
    async with sessions(request)() as session:
        await load_webhook(session, who.team_id, uid, wid)
        base = select(*COLUMNS, Delivery.payload).where(
            Delivery.webhook_uid == wid, Delivery.team_id == who.team_id, Delivery.delivery_id == delivery_id
        )
        row = (
            await session.execute(
                base.where(Delivery.status == ACCEPTED).order_by(Delivery.seq.desc()).limit(1)
            )
        ).first()
        if row is None:
            row = (await session.execute(base.order_by(Delivery.seq.desc()).limit(1))).first()
        if row is None:
            raise ResourceNotFound(f"webhook {wid} has no delivery {delivery_id!r} in its log")
        found = Entry(*row)
        runs = await _runs(session, wid, {delivery_id} if found.status in WITH_RUNS else set())
    body = delivery_json(found, runs.get(delivery_id, []))
    if found.status in WITH_RUNS:
        body["payload"] = parse_payload(found.payload)
    return web.json_response(body)


# --- test filter ----------------------------------------------------------------------------------


def _webhook_check(
    automation: Automation, hook: Webhook, routes: list[AutomationWebhook], selecting: list[AutomationWebhook]
) -> dict[str, Any]:
    label = f"webhook {hook.name!r} ({hook.uid})"
    if not routes:
        passed, detail = False, "the automation has no webhook trigger that selects a webhook"
    elif selecting:
        triggers = ", ".join(f"#{i}" for i in sorted({r.trigger_index + 1 for r in selecting}))
        passed, detail = True, f"{label} is selected by trigger {triggers}"
    else:
        chosen = ", ".join(sorted({r.webhook_uid for r in routes}))
        passed, detail = (
            False,
            f"{label} is not selected by the automation's webhook triggers (they select {chosen})",
        )
    notes = []
    if not automation.enabled:
        notes.append("the automation is disabled: it starts no runs until it is enabled")
    if hook.deleted_at is not None:
        notes.append(f"{label} is deleted: senders get 404 and it starts nothing")
    elif not hook.enabled:
        notes.append(f"{label} is disabled: senders get 404 until it is enabled")
    if notes:
        detail += "; note: " + "; ".join(notes)
    return {"passed": passed, "detail": detail}


def _payload_check(candidates: list[AutomationWebhook], payload: object) -> dict[str, Any]:
    """The first trigger whose filter passes, else the first trigger's failure."""
    triggers = {r.trigger_index: r.payload_filter for r in sorted(candidates, key=lambda r: r.trigger_index)}
    if not triggers:
        return {"passed": False, "detail": "no webhook trigger to evaluate", "failed_path": None}
    results = []
    for index, spec in triggers.items():
        try:
            result = payload_filter.compile(spec).explain(payload)
        except payload_filter.InvalidFilter as exc:
            result = payload_filter.FilterResult(False, None, f"the payload filter is invalid: {exc}")
        prefix = f"trigger #{index + 1}: " if len(triggers) > 1 else ""
        results.append(
            {"passed": result.passed, "detail": prefix + result.detail, "failed_path": result.failed_path}
        )
        if result.passed:
            return results[-1]
    return results[0]


def _pick(entries: list[Entry], selected: set[str]) -> Entry:
    """Newest Accepted entry of a selected webhook, else newest Accepted entry, else the newest entry."""
    accepted = [e for e in entries if e.status == ACCEPTED]
    return next((e for e in accepted if e.webhook_uid in selected), accepted[0] if accepted else entries[0])


async def filter_test(request: web.Request) -> web.Response:
    """``POST .../automations/{aid}/test-filter`` (member) ``{delivery_id, webhook_uid?}``."""
    who = await require(request, "member")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    errors = unknown_fields(body, {"delivery_id", "webhook_uid"})
    delivery_id = optional_string(body, "delivery_id", errors)
    webhook_uid = optional_string(body, "webhook_uid", errors)
    if delivery_id is None and not any(e["field"] == "delivery_id" for e in errors):
        errors.append(
            field_error("delivery_id", "is required: a delivery ID from the webhook's delivery log")
        )
    fail_on(errors)
    uid, aid = request.match_info["uid"], request.match_info["aid"]
    async with sessions(request)() as session:
        result = await evaluate_filter(session, who.team_id, uid, aid, str(delivery_id), webhook_uid)
    return web.json_response(result)


async def load_automation(
    session: AsyncSession, team_id: str, uid: str, aid: str
) -> tuple[Factory, Automation]:
    """Factory ``uid`` and its automation ``aid`` (API and console); ResourceNotFound when either is
    missing or another team's."""
    factory = await load_factory(session, team_id, uid)
    automation = await session.get(Automation, aid)
    if automation is None or automation.factory_uid != factory.uid or automation.team_id != team_id:
        raise ResourceNotFound(f"automation {aid} does not exist in factory {uid}")
    return factory, automation


async def evaluate_filter(
    session: AsyncSession, team_id: str, uid: str, aid: str, delivery_id: str, webhook_uid: str | None = None
) -> dict[str, Any]:
    """The "Test filter" of automation ``aid`` against a stored delivery: the TestFilterResponse body (also
    shown by the console's automation page). Raises ResourceNotFound, or Conflict for a delivery that
    stores no payload to test."""
    factory, automation = await load_automation(session, team_id, uid, aid)
    hooks = {
        h.uid: h
        for h in (await session.execute(select(Webhook).where(Webhook.factory_uid == factory.uid))).scalars()
    }
    if webhook_uid is not None and webhook_uid not in hooks:
        raise ResourceNotFound(f"webhook {webhook_uid} does not exist in factory {uid}")
    routes = list(
        (
            await session.execute(
                select(AutomationWebhook)
                .where(AutomationWebhook.automation_uid == aid)
                .order_by(AutomationWebhook.trigger_index, AutomationWebhook.webhook_uid)
            )
        ).scalars()
    )
    candidates = [webhook_uid] if webhook_uid is not None else list(hooks)
    entries = [
        Entry(*r)
        for r in await session.execute(
            select(*COLUMNS, Delivery.payload)
            .where(
                Delivery.team_id == team_id,
                Delivery.webhook_uid.in_(candidates),
                Delivery.delivery_id == delivery_id,
            )
            .order_by(Delivery.seq.desc())
        )
    ]
    if not entries:
        raise ResourceNotFound(f"no webhook of factory {uid} has delivery {delivery_id!r} in its log")
    entry = _pick(entries, {r.webhook_uid for r in routes})
    if entry.status == REPLAYED:
        raise Conflict(f"delivery {delivery_id!r} is a replay ({entry.detail}); test the original delivery")
    if entry.status != ACCEPTED:
        raise Conflict(
            f"delivery {delivery_id!r} was logged as {entry.status!r}; only accepted deliveries store a"
            " payload to test against"
        )
    selecting = [r for r in routes if r.webhook_uid == entry.webhook_uid]
    webhook_check = _webhook_check(automation, hooks[entry.webhook_uid], routes, selecting)
    payload_check = _payload_check(selecting or routes, parse_payload(entry.payload))
    passed = webhook_check["passed"] and payload_check["passed"]
    return {
        "result": WOULD_TRIGGER if passed else WOULD_NOT_TRIGGER,
        "webhook_check": webhook_check,
        "payload_check": payload_check,
        "delivery": {k: v for k, v in delivery_json(entry, []).items() if k not in ("run_ids", "decisions")},
    }


def setup(app: web.Application) -> None:
    base = API_V1 + "/factory/{uid}/webhooks/{wid}/deliveries"
    app.router.add_get(base, list_deliveries)
    app.router.add_get(base + "/{delivery_id:.+}", get_delivery)
    app.router.add_post(API_V1 + "/factory/{uid}/automations/{aid}/test-filter", filter_test)
