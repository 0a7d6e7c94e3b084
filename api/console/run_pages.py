"""The console's page of one run, ``/console/runs/{run_id}`` (docs/console.md, "Pages").

Its state timeline and log, its sandbox, network policy and refused destinations
(:mod:`api.console.network_view`), Cancel and Send a follow-up (POST forms, CSRF-checked, through
:mod:`api.runs.records` like the API), live through ``/console/runs/{run_id}/events``: the API's run event
stream (:func:`api.runs.stream.stream_run`) authenticated by the console session and counted against the
session's key.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from aiohttp import web
from sqlalchemy import Row, func, select

from api.console.artifact_pages import artifact_views
from api.console.network_view import network_view, refused_destinations
from api.console.rendering import missing, or_404, pretty_json, render, when
from api.console.security import changing, signed_in
from api.context import CLOCK, SESSIONS, SETTINGS
from api.runs import events
from api.runs import records as runs
from api.runs.artifacts import artifacts_of
from api.runs.claim_signal import wake_claimers
from api.runs.event_hub import notify_events
from api.runs.followup_limits import FollowupLimits, TooManyFollowups
from api.runs.requests import MAX_PROMPT
from api.runs.serialize import run_item, sandbox_info
from api.runs.states import ACTIVE, IllegalTransition
from api.runs.stream import stream_run
from api.runs.stream_grants import Grant
from store.models import Automation, Factory, RunEvent

PAGE_TRANSCRIPT_EVENTS: Final = 1_000  # the newest transcript events shown (the stream has them all)
MAX_PAGE_EVENTS: Final = 2_000  # state changes and follow-ups shown (a run has a handful)
PAGE_LOG_LINES: Final = 1_000  # the newest log lines shown; the rest are in the logs API
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
    "followup_limit": (
        "alert",
        "This run has as many follow-ups waiting for its agent as it may hold; try later.",
    ),
    "followup_empty": ("alert", f"A follow-up needs a message (at most {MAX_PROMPT} characters)."),
}


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
    transcript: list[Event] = field(default_factory=list)


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
                    _EVENTS.where(of_run, RunEvent.kind.not_in([events.LOG, *events.TRANSCRIPT]))
                    .order_by(RunEvent.id)
                    .limit(MAX_PAGE_EVENTS)
                )
            ).all()
        )
        newest = _EVENTS.where(of_run, RunEvent.kind == events.LOG).order_by(RunEvent.id.desc())
        logs = list(reversed((await conn.execute(newest.limit(PAGE_LOG_LINES))).all()))
        said = _EVENTS.where(of_run, RunEvent.kind.in_(events.TRANSCRIPT)).order_by(RunEvent.id.desc())
        transcript = list(reversed((await conn.execute(said.limit(PAGE_TRANSCRIPT_EVENTS))).all()))
        log_lines = len(logs)
        if log_lines == PAGE_LOG_LINES:  # there may be more
            count = select(func.count(RunEvent.id)).where(of_run, RunEvent.kind == events.LOG)
            log_lines = int((await conn.execute(count)).scalar_one())
    # The newest event is the last state change or follow-up, or the newest log line.
    last_id = max((rows[-1].id for rows in (others, logs, transcript) if rows), default=0)
    return EventLog(others, logs, log_lines, last_id, transcript)


def transcript_entries(rows: Sequence[Event]) -> list[dict[str, Any]]:
    """The agent's transcript as the page shows it: messages, and each tool call with its result (matched by
    the call's id) folded under it. Text stays text: the template escapes it."""
    entries: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    for row in rows:
        data = row.data or {}
        if row.kind == "message":
            entries.append(
                {"kind": "message", "role": str(data.get("role", "")), "text": str(data.get("text", ""))}
            )
        elif row.kind == "tool_call":
            call_id = str(data.get("id", ""))
            call = {
                "kind": "tool",
                "id": call_id,
                "name": str(data.get("name", "")),
                "input": pretty_json(data.get("input")),
                "result": None,
            }
            entries.append(call)
            calls[call_id] = call
        elif row.kind == "tool_result":
            result = {"ok": bool(data.get("ok")), "output": str(data.get("output", ""))}
            found = calls.get(str(data.get("id", "")))
            if found is not None and found["result"] is None:
                found["result"] = result
            else:
                entries.append({"kind": "tool", "id": "", "name": "(result)", "input": "", "result": result})
    return entries


def usage_view(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's ``request_usage`` as the page shows it: ``text`` (``1,500 tokens · $0.0123``, None before
    any usage), and ``tokens`` and ``cost`` for run.js to add live usage to."""
    if not usage:
        return {"text": None, "tokens": 0, "cost": ""}
    tokens = int(usage.get("total_tokens") or 0)
    text = f"{tokens:,} tokens"
    cost = usage.get("inference_cost_usd")
    if isinstance(cost, int | float):
        return {"text": f"{text} · ${cost:.4f}", "tokens": tokens, "cost": repr(float(cost))}
    return {"text": text, "tokens": tokens, "cost": ""}


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
        with or_404(missing(f"run {run_id}")):
            run = await runs.get_run(session, user.team_id, run_id)
        names = await runs.attachment_names(session, [run])
        found = await artifacts_of(session, [run.run_id])
        factory = await session.get(Factory, run.factory_uid) if run.factory_uid else None
        automation = await session.get(Automation, run.automation_id) if run.automation_id else None
        network = await network_view(session, user.team_id, run.agent_config, sandbox_info(run.sandbox))
    # Events are read after the run: whatever the page shows, the stream continues after its last id.
    log = await _events_of(request, run_id)
    item = run_item(run, names[run.run_id], now=request.app[CLOCK].now(), artifacts=found[run.run_id])
    notice = NOTICES.get(request.query.get("done", ""))
    # A run that finished between the two reads is not live: its terminal event is on the page already, and
    # a stream after it would only answer 204 (docs/events.md, "Ordering and delivery").
    states = [str((e.data or {}).get("state")) for e in log.others if e.kind == events.STATE]
    live = run.state in ACTIVE and not (states and events.is_terminal(states[-1]))
    link = item["session_link"]  # a worker's text: only an http(s) address becomes a link
    return render(
        request,
        "run.html",
        {
            "user": user,
            "nav": "runs",
            "run": item,
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
            "transcript": transcript_entries(log.transcript),
            "usage": usage_view(item["request_usage"]),
            "artifacts": artifact_views(run.run_id, item["artifacts"]),
            "network": network,
            "refused": refused_destinations(log.others),
            "last_event": log.last_id,
            "live": live,
            "cancellable": live and not run.cancel_requested,
            "notice": notice,
            "session_url": link
            if isinstance(link, str) and link.startswith(("https://", "http://"))
            else None,
        },
    )


async def run_events(request: web.Request) -> web.StreamResponse:
    """``GET /console/runs/{run_id}/events``: the API's run event stream for a signed-in session; it ends
    when the session does (sign-out, its key revoked: docs/events.md, "Revocation and sign-out")."""
    user = await signed_in(request)
    with or_404(missing(f"run {request.match_info['run_id']}")):
        return await stream_run(request, user.team_id, Grant(user.key_id, user.session_id))


async def cancel(request: web.Request) -> web.StreamResponse:
    """``POST /console/runs/{run_id}/cancel`` (member, CSRF): as ``POST /agent/runs/{id}/cancel``."""
    user, _ = await changing(request)
    run_id = request.match_info["run_id"]
    try:
        with or_404(missing(f"run {run_id}")):
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
        with or_404(missing(f"run {run_id}")):
            async with request.app[SESSIONS]() as session, session.begin():
                _, done = await runs.add_followup(
                    session,
                    request.app[CLOCK],
                    user.team_id,
                    run_id,
                    message,
                    None,
                    limits=FollowupLimits.of(request.app[SETTINGS]),
                )
    except IllegalTransition:
        done = "followup_refused"
    except TooManyFollowups:
        done = "followup_limit"
    else:
        if done == "requeued":
            wake_claimers(request.app)
        notify_events(request.app)
    raise web.HTTPSeeOther(f"/console/runs/{run_id}?done={done}")


# --- automation -----------------------------------------------------------------------------------


def setup(app: web.Application) -> None:
    """Register the run page, its event stream and its two forms."""
    app.router.add_get("/console/runs/{run_id}", run_page)
    app.router.add_get("/console/runs/{run_id}/events", run_events)
    app.router.add_post("/console/runs/{run_id}/cancel", cancel)
    app.router.add_post("/console/runs/{run_id}/followups", followup)
