"""Console pages for runs and automations (docs/console.md, "Pages").

- ``/console/runs``: the team's runs, newest first, filtered like ``GET /agent/runs`` (the same parser,
  :func:`api.runs.requests.parse_list_query`, and query, :func:`api.runs.records.list_runs`), in keyset
  pages both ways (``cursor`` continues after a page; ``before`` goes back, reading the other way).
- ``/console/runs/{run_id}``: one run, its state timeline and log, Cancel and Send a follow-up (POST forms,
  CSRF-checked, through :mod:`api.runs.records` like the API), live through
  ``/console/runs/{run_id}/events``: the API's run event stream (:func:`api.runs.stream.stream_run`)
  authenticated by the console session and counted against the session's key.
- ``/console/factories/{uid}/automations/{aid}``: an automation, its triggers and payload conditions in
  words, and "Test filter" against a stored delivery (:func:`api.management.deliveries.evaluate_filter`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Final, NamedTuple
from urllib.parse import urlencode

from aiohttp import web
from multidict import MultiDict
from sqlalchemy import Row, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.console.rendering import or_404, pretty_json, render, when
from api.console.security import changing, signed_in
from api.console.sessions import ConsoleUser
from api.context import CLOCK, SESSIONS
from api.errors import ApiError
from api.factories.serialize import trigger_json
from api.http.pagination import (
    Cursor,
    InvalidCursor,
    decode_cursor,
    encode_cursor,
    fingerprint,
    timestamp_key,
)
from api.ingress.pipeline import ACCEPTED
from api.management.deliveries import WOULD_TRIGGER, evaluate_filter, load_automation
from api.runs import events
from api.runs import records as runs
from api.runs.claim_signal import wake_claimers
from api.runs.event_hub import notify_events
from api.runs.requests import MAX_PROMPT, SOURCES, parse_list_query
from api.runs.serialize import run_item
from api.runs.states import IllegalTransition, RunState
from api.runs.stream import stream_run
from store import payload_filter
from store.models import Automation, Delivery, Factory, Run, RunEvent, Webhook

PAGE_SIZE: Final = 25
SCAN_LIMIT: Final = 5_000  # runs one page of a search (or of two filters) examines at most
MAX_PAGE_EVENTS: Final = 2_000  # state changes and follow-ups shown (a run has a handful)
PAGE_LOG_LINES: Final = 1_000  # the newest log lines shown; the rest are in the logs API
RECENT_DELIVERIES: Final = 50
FILTER_FIELDS: Final = (
    "state",
    "source",
    "q",
    "name",
    "factory_uid",
    "creator",
    "created_after",
    "created_before",
)
STATES: Final = tuple(RunState.__members__)
LIVE_STATES: Final = ("QUEUED", "PENDING", "CLAIMED", "INPROGRESS", "BLOCKED")
NOTICES: Final = {  # fixed texts only: a query string never puts words on the page
    "cancelled": ("success", "The run was cancelled."),
    "cancel_requested": (
        "success",
        "Cancellation requested: the worker stops the run at its next heartbeat.",
    ),
    "not_cancellable": ("alert", "This run has already finished; only live runs can be cancelled."),
    "delivered": ("success", "Follow-up sent: the worker receives it with its next heartbeat."),
    "queued": ("success", "Follow-up queued: it goes out when a worker claims the run."),
    "requeued": ("success", "Follow-up sent: the run is queued again to continue."),
    "followup_refused": ("alert", "This run was cancelled (or is being cancelled); it takes no follow-ups."),
    "followup_empty": ("alert", f"A follow-up needs a message (at most {MAX_PROMPT} characters)."),
}
OPS: Final = {
    "eq": "equals",
    "in": "is one of",
    "not_in": "is none of",
}


def _missing(what: str) -> str:
    return f"Not found: {what} does not exist (or belongs to another team)."


# --- runs list ------------------------------------------------------------------------------------


def _picked(query: MultiDict[str]) -> dict[str, Any]:
    """The filter form's values as given (for the form and for page links), empty fields dropped."""
    out: dict[str, Any] = {key: query.get(key, "").strip() for key in FILTER_FIELDS if key != "state"}
    out["state"] = [s for s in query.getall("state", []) if s]
    return {k: v for k, v in out.items() if v}


def _api_query(picked: dict[str, Any]) -> MultiDict[str]:
    """The API query string of the form's values (a browser's ``datetime-local`` is read as UTC)."""
    query: MultiDict[str] = MultiDict()
    for key, value in picked.items():
        for item in value if isinstance(value, list) else [value]:
            if key.startswith("created_") and len(item) in (16, 19) and "T" in item:
                item = item + (":00Z" if len(item) == 16 else "Z")
            query.add(key, item)
    return query


def _link(picked: dict[str, Any], **page: str) -> str:
    pairs = [(k, i) for k, v in picked.items() for i in (v if isinstance(v, list) else [v])]
    return "/console/runs?" + urlencode([*pairs, *page.items()])


def _position(run: Run) -> Cursor:
    return Cursor(value=timestamp_key(run.created_at), row_id=run.run_id)


@dataclass
class RunsPage:
    rows: list[Run]
    next_link: str | None
    prev_link: str | None
    error: str | None
    scan_stopped: bool = False  # the page ended after examining SCAN_LIMIT runs


async def _runs_page(
    request: web.Request, session: AsyncSession, user: ConsoleUser, picked: dict[str, Any]
) -> RunsPage:
    try:
        filters = parse_list_query(_api_query(picked)).filters
    except ApiError as exc:
        return RunsPage([], None, None, f"Filter not applied: {exc}")
    base = {"sort_by": "created_at", **filters.params()}
    newest, oldest = fingerprint({**base, "sort_order": "desc"}), fingerprint({**base, "sort_order": "asc"})
    error = None
    before = after = None
    try:
        if request.query.get("before"):
            before = decode_cursor(request.query["before"], oldest)
        elif request.query.get("cursor"):
            after = decode_cursor(request.query["cursor"], newest)
    except InvalidCursor:
        error = "That page link no longer fits these filters; showing the newest runs."
    # A page of a search or of two filters examines at most SCAN_LIMIT runs; the links continue from the
    # last run examined, which may lie beyond the last run shown (docs/console.md, "Runs at scale").
    next_at: Cursor | None
    prev_at: Cursor | None
    if before is not None:  # read back towards the newest, then show newest first
        page = await runs.list_runs(
            session,
            user.team_id,
            filters,
            runs.PageRequest(PAGE_SIZE, "created_at", "asc", before),
            scan_limit=SCAN_LIMIT,
        )
        rows = list(reversed(page.runs))
        prev_at, next_at = page.next_position, _position(rows[-1]) if rows else before
    else:
        page = await runs.list_runs(
            session,
            user.team_id,
            filters,
            runs.PageRequest(PAGE_SIZE, "created_at", "desc", after),
            scan_limit=SCAN_LIMIT,
        )
        rows = page.runs
        next_at = page.next_position
        prev_at = (_position(rows[0]) if rows else after) if after is not None else None
    next_link = _link(picked, cursor=encode_cursor(next_at, newest)) if next_at else None
    prev_link = _link(picked, before=encode_cursor(prev_at, oldest)) if prev_at else None
    return RunsPage(rows, next_link, prev_link, error, page.scan_stopped)


async def runs_list(request: web.Request) -> web.StreamResponse:
    """``GET /console/runs``: the filter form and one page of runs, newest first."""
    user = await signed_in(request)
    picked = _picked(MultiDict(request.query))
    async with request.app[SESSIONS]() as session:
        page = await _runs_page(request, session, user, picked)
        factories = (
            await session.execute(
                select(Factory.uid, Factory.name)
                .where(Factory.team_id == user.team_id)
                .order_by(Factory.name)
            )
        ).all()
    names = {uid: name for uid, name in factories}
    return render(
        request,
        "runs.html",
        {
            "user": user,
            "nav": "runs",
            "runs": [
                {
                    "run_id": r.run_id,
                    "title": r.title,
                    "state": r.state,
                    "source": r.source,
                    "creator": r.creator_display_name or r.creator_uid,
                    "factory_uid": r.factory_uid,
                    "factory_name": names.get(r.factory_uid or "", r.factory_uid),
                    "created": when(r.created_at),
                    "updated": when(r.updated_at),
                }
                for r in page.rows
            ],
            "form": {**{key: "" for key in FILTER_FIELDS}, "state": [], **picked},
            "states": STATES,
            "sources": SOURCES,
            "factories": factories,
            "next_link": page.next_link,
            "prev_link": page.prev_link,
            "error": page.error,
            "scan_stopped": page.scan_stopped,
            "scan_limit": SCAN_LIMIT,
            "filtered": bool(picked),
        },
    )


# --- one run --------------------------------------------------------------------------------------


Event = Row[tuple[int, str, dict[str, Any], dt.datetime]]  # (id, kind, data, created_at) of a RunEvent


class LogLine(NamedTuple):
    """One log line as the template reads it (``line.stream``, ``line.text``: attributes, not keys, so
    Jinja's attribute lookup finds them at the first try)."""

    stream: str
    text: str


@dataclass(frozen=True)
class EventLog:
    """What the run page shows of a run's event log: every state change and follow-up, the newest
    :data:`PAGE_LOG_LINES` log lines, how many log lines there are, and the newest event id (the live
    stream resumes after it)."""

    others: list[Event]
    logs: list[Event]
    log_lines: int
    last_id: int


_EVENTS = select(RunEvent.id, RunEvent.kind, RunEvent.data, RunEvent.created_at)


async def _events_of(request: web.Request, run_id: str) -> EventLog:
    """The run's event log as the page shows it, read as rows of the columns the page uses. A run keeps up
    to 10,000 log lines; rendering all of them cost about 180 ms and 1.9 MB of HTML, so the page shows the
    newest :data:`PAGE_LOG_LINES` and points at the logs API for the rest (docs/benchmarks.md, "Console
    pages at scale")."""
    of_run = RunEvent.run_id == run_id
    async with request.app[SESSIONS]() as session:
        conn = await session.connection()
        others = list(
            (
                await conn.execute(
                    _EVENTS.where(of_run, RunEvent.kind != events.LOG)
                    .order_by(RunEvent.id)
                    .limit(MAX_PAGE_EVENTS)
                )
            ).all()
        )
        newest = _EVENTS.where(of_run, RunEvent.kind == events.LOG).order_by(RunEvent.id.desc())
        logs = list(reversed((await conn.execute(newest.limit(PAGE_LOG_LINES))).all()))
        log_lines = len(logs)
        if log_lines == PAGE_LOG_LINES:  # there may be more
            count = select(func.count(RunEvent.id)).where(of_run, RunEvent.kind == events.LOG)
            log_lines = int((await conn.execute(count)).scalar_one())
    # The newest event is the last state change or follow-up, or the newest log line.
    last_id = max((rows[-1].id for rows in (others, logs) if rows), default=0)
    return EventLog(others, logs, log_lines, last_id)


def _state_step(event: Event) -> dict[str, Any]:
    data = event.data or {}
    message = data.get("status_message") or {}
    return {
        "state": str(data.get("state") or ""),
        "previous": data.get("previous_state"),
        "at": when(event.created_at),
        "message": message.get("message") if isinstance(message, dict) else None,
        "error_code": data.get("error_code"),
        "cancel_requested": bool(data.get("cancel_requested")),
    }


async def run_page(request: web.Request) -> web.StreamResponse:
    """``GET /console/runs/{run_id}``: the run, its timeline and log; live while the run is."""
    user = await signed_in(request)
    run_id = request.match_info["run_id"]
    async with request.app[SESSIONS]() as session:
        with or_404(_missing(f"run {run_id}")):
            run = await runs.get_run(session, user.team_id, run_id)
        names = await runs.attachment_names(session, [run])
        factory = await session.get(Factory, run.factory_uid) if run.factory_uid else None
        automation = await session.get(Automation, run.automation_id) if run.automation_id else None
    # Events are read after the run: whatever the page shows, the stream continues after its last id.
    log = await _events_of(request, run_id)
    item = run_item(run, names[run.run_id])
    notice = NOTICES.get(request.query.get("done", ""))
    link = item["session_link"]  # a worker's text: only an http(s) address becomes a link
    return render(
        request,
        "run.html",
        {
            "user": user,
            "nav": "runs",
            "run": item,
            "created": when(run.created_at),
            "started": when(run.started_at),
            "finished": when(run.finished_at),
            "config_json": pretty_json(item["agent_config"]),
            "metadata": item["metadata"],
            "factory_name": factory.name if factory and factory.team_id == user.team_id else None,
            "automation_name": automation.name if automation and automation.team_id == user.team_id else None,
            "timeline": [_state_step(e) for e in log.others if e.kind == events.STATE],
            "logs": [
                LogLine(str((e.data or {}).get("stream", "")), str((e.data or {}).get("text", "")))
                for e in log.logs
            ],
            "log_lines": log.log_lines,
            "followups": [
                {"at": when(e.created_at), **(e.data or {})} for e in log.others if e.kind == events.FOLLOWUP
            ],
            "truncated": any(e.kind == events.TRUNCATED for e in log.others),
            "last_event": log.last_id,
            "live": run.state in LIVE_STATES,
            "cancellable": run.state in LIVE_STATES and not run.cancel_requested,
            "notice": notice,
            "session_url": link
            if isinstance(link, str) and link.startswith(("https://", "http://"))
            else None,
        },
    )


async def run_events(request: web.Request) -> web.StreamResponse:
    """``GET /console/runs/{run_id}/events``: the API's run event stream for a signed-in session."""
    user = await signed_in(request)
    with or_404(_missing(f"run {request.match_info['run_id']}")):
        return await stream_run(request, user.team_id, user.key_id)


async def cancel(request: web.Request) -> web.StreamResponse:
    """``POST /console/runs/{run_id}/cancel`` (member, CSRF): as ``POST /agent/runs/{id}/cancel``."""
    user, _ = await changing(request)
    run_id = request.match_info["run_id"]
    try:
        with or_404(_missing(f"run {run_id}")):
            async with request.app[SESSIONS]() as session, session.begin():
                run = await runs.cancel_run(session, request.app[CLOCK], user.team_id, run_id)
        done = "cancel_requested" if run.cancel_requested else "cancelled"
    except IllegalTransition:
        done = "not_cancellable"
    else:
        notify_events(request.app)
    raise web.HTTPSeeOther(f"/console/runs/{run_id}?done={done}")


async def followup(request: web.Request) -> web.StreamResponse:
    """``POST /console/runs/{run_id}/followups`` (member, CSRF): as ``POST /agent/runs/{id}/followups``."""
    user, form = await changing(request)
    run_id = request.match_info["run_id"]
    message = form.get("message", "")
    if not message.strip() or len(message) > MAX_PROMPT:
        raise web.HTTPSeeOther(f"/console/runs/{run_id}?done=followup_empty")
    try:
        with or_404(_missing(f"run {run_id}")):
            async with request.app[SESSIONS]() as session, session.begin():
                _, done = await runs.add_followup(
                    session, request.app[CLOCK], user.team_id, run_id, message, None
                )
    except IllegalTransition:
        done = "followup_refused"
    else:
        if done == "requeued":
            wake_claimers(request.app)
        notify_events(request.app)
    raise web.HTTPSeeOther(f"/console/runs/{run_id}?done={done}")


# --- automation -----------------------------------------------------------------------------------


def _show(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def condition_sentences(spec: object) -> list[dict[str, str]]:
    """A payload filter's conditions, in check order, as ``{field, test}`` rows people can read."""
    if not isinstance(spec, dict) or not spec:
        return []
    try:
        found = payload_filter.conditions(spec)
    except payload_filter.InvalidFilter as exc:
        return [{"field": "—", "test": f"the filter is invalid: {exc}"}]
    out = []
    for path, op, operand in found:
        if op == "exists":
            test = "is present" if operand else "is absent"
        elif op == "object":
            test = "is an object"
        elif op == "eq":
            test = f"equals {_show(operand)}"
        else:
            values = operand if isinstance(operand, list) else [operand]
            test = f"{OPS[op]} {', '.join(_show(v) for v in values)}"
        out.append({"field": path, "test": test})
    return out


def _triggers(automation: Automation, hooks: dict[str, Webhook]) -> list[dict[str, Any]]:
    out = []
    for index, raw in enumerate(automation.triggers or []):
        trigger = trigger_json(raw)
        if not isinstance(trigger, dict):
            out.append({"index": index + 1, "kind": _show(trigger), "webhooks": [], "conditions": []})
            continue
        flt: dict[str, Any] = trigger["filter"] if isinstance(trigger.get("filter"), dict) else {}
        uids = [u for u in flt.get("resolved_webhook_ids") or [] if isinstance(u, str)]
        out.append(
            {
                "index": index + 1,
                "kind": f"{trigger.get('provider', '?')} · {trigger.get('event', '?')}",
                "webhooks": [
                    {
                        "uid": uid,
                        "name": hooks[uid].name if uid in hooks else None,
                        "live": uid in hooks and hooks[uid].deleted_at is None and hooks[uid].enabled,
                    }
                    for uid in uids
                ],
                "names": [n for n in flt.get("webhooks") or [] if isinstance(n, str)],
                "has_filter": flt.get("payload") is not None,
                "conditions": condition_sentences(flt.get("payload")),
            }
        )
    return out


async def automation_page(request: web.Request) -> web.StreamResponse:
    """``GET|POST /console/factories/{uid}/automations/{aid}``: the automation and "Test filter" (reads
    only, so the form may be a GET; a POST is CSRF-checked like every POST)."""
    if request.method == "POST":
        user, form = await changing(request)
        choice = form.get("delivery", "")
    else:
        user = await signed_in(request)
        choice = request.query.get("delivery", "")
    uid, aid = request.match_info["uid"], request.match_info["aid"]
    async with request.app[SESSIONS]() as session:
        with or_404(_missing(f"automation {aid} of factory {uid}")):
            factory, automation = await load_automation(session, user.team_id, uid, aid)
        hooks = {
            h.uid: h for h in (await session.scalars(select(Webhook).where(Webhook.factory_uid == uid))).all()
        }
        triggers = _triggers(automation, hooks)
        selected = list(dict.fromkeys(w["uid"] for t in triggers for w in t["webhooks"] if w["uid"] in hooks))
        deliveries = (
            await session.execute(
                select(Delivery.delivery_id, Delivery.webhook_uid, Delivery.received_at, Delivery.size)
                .where(
                    Delivery.team_id == user.team_id,
                    Delivery.webhook_uid.in_(selected or list(hooks)),
                    Delivery.status == ACCEPTED,
                )
                .order_by(Delivery.seq.desc())
                .limit(RECENT_DELIVERIES)
            )
        ).all()
        result, test_error = None, None
        if choice:
            webhook_uid, _, delivery_id = choice.partition(" ")
            try:
                result = await evaluate_filter(
                    session, user.team_id, uid, aid, delivery_id, webhook_uid or None
                )
            except ApiError as exc:
                test_error = str(exc)
    return render(
        request,
        "automation.html",
        {
            "user": user,
            "nav": "factories",
            "factory": {"uid": factory.uid, "name": factory.name},
            "automation": {
                "uid": automation.uid,
                "name": automation.name,
                "enabled": automation.enabled,
                "agent": automation.agent,
                "title": automation.title,
                "prompt": automation.prompt,
                "definition_path": automation.definition_path,
                "config_json": pretty_json(automation.config or {}),
                "has_config": bool(automation.config),
                "updated": when(automation.updated_at),
            },
            "triggers": triggers,
            "deliveries": [
                {
                    "value": f"{wid} {did}",
                    "label": f"{did} · {hooks[wid].name if wid in hooks else wid} · {when(at)} · {size} B",
                }
                for did, wid, at, size in deliveries
            ],
            "choice": choice,
            "result": result,
            "would_trigger": result is not None and result["result"] == WOULD_TRIGGER,
            "test_error": test_error,
        },
    )


def setup(app: web.Application) -> None:
    """Register the runs, run and automation pages."""
    app.router.add_get("/console/runs", runs_list)
    app.router.add_get("/console/runs/{run_id}", run_page)
    app.router.add_get("/console/runs/{run_id}/events", run_events)
    app.router.add_post("/console/runs/{run_id}/cancel", cancel)
    app.router.add_post("/console/runs/{run_id}/followups", followup)
    app.router.add_get("/console/factories/{uid}/automations/{aid}", automation_page)
    app.router.add_post("/console/factories/{uid}/automations/{aid}", automation_page)
