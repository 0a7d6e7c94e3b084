"""``/api/v1/workers``: the worker protocol over HTTP (docs/workers.md).

- ``POST /workers/claim`` ``{worker_host, wait_seconds, worker_id?}`` long-polls up to
  ``min(wait_seconds, claim_wait_max_seconds)``: ``200`` with the run, its lease and ``lease_token``,
  ``204`` idle.
- ``POST /workers/runs/{id}/heartbeat`` ``{state?: "INPROGRESS", worker_id?, lease_token}`` extends the
  lease; answers ``cancel_requested`` and the pending follow-ups (each handed over once).
- ``POST /workers/runs/{id}/state`` ``{state, status_message?, worker_id?, lease_token}`` through the
  state machine.
- ``POST /workers/runs/{id}/logs`` ``{lines: [{stream, text}], worker_id?, lease_token}`` appends to the
  run log, within the run's log caps; a body over :data:`LOG_REQUEST_BYTES` is ``413``.
- ``POST /workers/runs/{id}/secrets`` ``{worker_id?, lease_token}`` answers ``{secrets: {NAME: value}}``: the
  current values of the team secrets *this run* references (computed from the stored run, never
  from the request), to the lease holder only, while the run is CLAIMED or INPROGRESS. Only
  ``run``-scoped secrets: one deleted or re-scoped since the run was created is left out (the worker
  fails the run). Never logged.

Worker keys act only for their own host IDs (403 otherwise); admin keys may act for any host,
including ``""`` (service-hosted). The lease owner is the key plus the caller's ``worker_id``, so
two processes sharing a key do not report each other's runs, and each claim's ``lease_token`` tells
its attempts apart, so a stale holder of an earlier attempt cannot act on the next one; anyone else
gets ``409`` (docs/workers.md, "Leases").
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web
from sqlalchemy import select

from api import Conflict, NotAuthorized, ValidationFailed
from api.auth import principal, require_worker_host
from api.claims.payload import (
    claim_payload,
    complete_claim,
    followup_json,
    run_secret_names,
    skill_resolver,
)
from api.context import BOX, CLOCK, SETTINGS, sessions
from api.http.bodies import SMALL_BODY_BYTES, field_error, read_json_object
from api.http.paths import API_V1
from api.runs.claim_signal import ClaimSignal, claim_signal
from api.runs.config import worker_host_of
from api.runs.event_hub import notify_events
from api.runs.queue import (
    LOG_STREAMS,
    REPORT_EVENTS,
    LogLimits,
    append_logs,
    claim_next,
    heartbeat,
    holds_lease,
    queued_exists,
    report_state,
)
from api.runs.states import IllegalTransition
from store import NotFound
from store import secrets as secret_store
from store.apikeys import Principal
from store.clock import rfc3339
from store.models import Run

PREFIX = f"{API_V1}/workers"
POLL_SECONDS = 0.25  # how often a long poll re-checks the store for runs queued by other processes
MAX_LOG_LINES = 1000
MAX_LOG_TEXT = 16_384
# One log request's body (docs/workers.md, "Log limits"): well under the app's client_max_size (8 MiB),
# so the documented limit, not aiohttp's, answers the 413. Workers batch by encoded bytes below it.
LOG_REQUEST_BYTES = 4 * 1024 * 1024
MAX_LEASE_TOKEN = 64
MAX_MESSAGE = 10_000
_WORKER_ID = re.compile(r"^[A-Za-z0-9._:@/+-]{1,120}$")

__all__ = ["setup"]


def _worker_id(body: dict[str, Any]) -> str:
    value = body.get("worker_id", "")
    if value in ("", None):
        return ""
    if not isinstance(value, str) or not _WORKER_ID.match(value):
        raise ValidationFailed(
            "worker_id must be 1-120 characters of letters, digits and ._:@/+-",
            errors=[field_error("worker_id", "invalid")],
        )
    return value


def _owner(who: Principal, body: dict[str, Any]) -> str:
    return f"{who.key_id}:{_worker_id(body)}"


def _lease_token(body: dict[str, Any]) -> str | None:
    """The claim's lease token the call presents (absent: None, which holds no tokened lease)."""
    value = body.get("lease_token")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_LEASE_TOKEN:
        raise ValidationFailed(
            "lease_token must be the string the claim answered",
            errors=[field_error("lease_token", "invalid")],
        )
    return value


def log_limits(request: web.Request) -> LogLimits:
    settings = request.app[SETTINGS]
    return LogLimits(max_lines=settings.run_log_max_lines, max_bytes=settings.run_log_max_bytes)


def _hosts(body: dict[str, Any]) -> list[str]:
    raw = body.get("worker_hosts", [body.get("worker_host")])
    if not isinstance(raw, list) or not raw or not all(h is None or isinstance(h, str) for h in raw):
        raise ValidationFailed(
            "worker_host must be a string (or worker_hosts a list of strings)",
            errors=[field_error("worker_host", "must be a string")],
        )
    hosts = sorted({worker_host_of(h) for h in raw})
    if any(len(h) > 200 for h in hosts):
        raise ValidationFailed(
            "worker_host is too long", errors=[field_error("worker_host", "at most 200 chars")]
        )
    return hosts


def _wait_seconds(body: dict[str, Any], maximum: float) -> float:
    value = body.get("wait_seconds", 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValidationFailed(
            "wait_seconds must be a non-negative number", errors=[field_error("wait_seconds", "invalid")]
        )
    return min(float(value), maximum)


async def claim(request: web.Request) -> web.Response:
    who = await principal(request)  # 401 before any body error
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    hosts = _hosts(body)
    for host in hosts:
        await require_worker_host(request, host)
    owner = _owner(who, body)
    settings = request.app[SETTINGS]
    wait = _wait_seconds(body, settings.claim_wait_max_seconds)
    signal = claim_signal(request.app)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    peek = False
    while True:
        woken = signal.current()
        payload = await _try_claim(request, hosts, owner, who.team_id, peek=peek)
        if payload is not None:
            return web.json_response(payload)
        peek = True
        remaining = deadline - loop.time()
        transport = request.transport
        if remaining <= 0 or transport is None or transport.is_closing():
            return web.Response(status=204)
        await ClaimSignal.wait(woken, min(POLL_SECONDS, remaining))


async def _try_claim(
    request: web.Request, hosts: list[str], owner: str, team_id: str, *, peek: bool
) -> dict[str, Any] | None:
    factory = sessions(request)
    if peek:  # idle re-checks read first, so idle workers never take write locks
        async with factory() as session:
            if not await queued_exists(session, worker_hosts=hosts, team_id=team_id):
                return None
    lease = request.app[SETTINGS].lease_seconds
    clock = request.app[CLOCK]
    while True:  # a run whose skill fails at claim time ends FAILED; then take the next one
        async with factory() as session, session.begin():
            run = await claim_next(
                session, clock, worker_hosts=hosts, owner=owner, lease_seconds=lease, team_id=team_id
            )
            if run is None:
                return None
            payload = await claim_payload(session, clock, run, lease)
        notify_events(request.app)  # the claim is a state event (docs/events.md)
        resolver = skill_resolver(request.app)
        completed = await complete_claim(factory, clock, resolver, payload, owner=owner)
        if completed is not None:
            return completed


async def _authorize_for_run(request: web.Request, run_id: str) -> Principal:
    """The caller, if it may act on ``run_id``: 404 for another team's run, 403 for another host's."""
    who = await principal(request)
    if who.role not in ("worker", "admin"):
        raise NotAuthorized(f"the worker API needs a worker or admin key; this key has {who.role}")
    stmt = select(Run.worker_host).where(Run.run_id == run_id, Run.team_id == who.team_id)
    async with sessions(request)() as session:
        host = await session.scalar(stmt)
    if host is None:
        raise NotFound(f"run {run_id} does not exist")
    return await require_worker_host(request, host)


async def heartbeat_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    state = body.get("state")
    if state not in (None, "INPROGRESS"):
        raise ValidationFailed("state may only be INPROGRESS here", errors=[field_error("state", "invalid")])
    try:
        async with sessions(request)() as session, session.begin():
            beat = await heartbeat(
                session,
                request.app[CLOCK],
                run_id,
                owner=_owner(who, body),
                lease_token=_lease_token(body),
                lease_seconds=request.app[SETTINGS].lease_seconds,
                start=state == "INPROGRESS",
                team_id=who.team_id,
            )
    except IllegalTransition as exc:  # (NotLeaseHolder becomes its 409 in api/problems.py)
        raise Conflict(str(exc), extensions={"state": exc.state.value}) from None
    if state is not None:
        notify_events(request.app)  # a start is a state event (docs/events.md)
    return web.json_response(
        {
            "run_id": run_id,
            "state": beat.state,
            "cancel_requested": beat.cancel_requested,
            "followups": [followup_json(f) for f in beat.followups],
            "lease_expires_at": rfc3339(beat.lease_expires_at),
        }
    )


def _status_message(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"message": value}
    if not isinstance(value, dict) or not isinstance(value.get("message"), str):
        raise ValidationFailed(
            "status_message must be {message, error_code?, retryable?}",
            errors=[field_error("status_message", "invalid")],
        )
    out: dict[str, Any] = {"message": value["message"][:MAX_MESSAGE]}
    code = value.get("error_code")
    if code is not None:
        if not isinstance(code, str) or not 0 < len(code) <= 100:
            raise ValidationFailed("status_message.error_code must be a short string")
        out["error_code"] = code
    retryable = value.get("retryable")
    if retryable is not None:
        if not isinstance(retryable, bool):
            raise ValidationFailed("status_message.retryable must be a boolean")
        out["retryable"] = retryable
    return out


async def state_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    state = body.get("state")
    if state not in REPORT_EVENTS:
        raise ValidationFailed(
            f"state must be one of {', '.join(REPORT_EVENTS)}", errors=[field_error("state", "invalid")]
        )
    message = _status_message(body.get("status_message"))
    try:
        async with sessions(request)() as session, session.begin():
            run = await report_state(
                session,
                request.app[CLOCK],
                run_id,
                owner=_owner(who, body),
                lease_token=_lease_token(body),
                state=str(state),
                status_message=message,
                team_id=who.team_id,
            )
    except IllegalTransition as exc:  # (NotLeaseHolder becomes its 409 in api/problems.py)
        detail = f"cannot report {state} for a run in state {exc.state.value}"
        raise Conflict(detail, extensions={"state": exc.state.value}) from None
    notify_events(request.app)
    return web.json_response(
        {"run_id": run.run_id, "state": run.state, "cancel_requested": run.cancel_requested}
    )


def _log_lines(body: dict[str, Any]) -> list[tuple[str, str]]:
    raw = body.get("lines")
    if not isinstance(raw, list) or len(raw) > MAX_LOG_LINES:
        raise ValidationFailed(
            f"lines must be a list of at most {MAX_LOG_LINES} {{stream, text}} objects",
            errors=[field_error("lines", "invalid")],
        )
    lines = []
    for i, item in enumerate(raw):
        if (
            not isinstance(item, dict)
            or item.get("stream") not in LOG_STREAMS
            or not isinstance(item.get("text"), str)
        ):
            raise ValidationFailed(
                f"lines[{i}] must be {{stream: stdout|stderr|system, text: string}}",
                errors=[field_error(f"lines[{i}]", "invalid")],
            )
        lines.append((str(item["stream"]), str(item["text"])[:MAX_LOG_TEXT].replace("\x00", "")))
    return lines


async def logs_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=LOG_REQUEST_BYTES)
    lines = _log_lines(body)
    async with sessions(request)() as session, session.begin():
        count = await append_logs(
            session,
            request.app[CLOCK],
            run_id,
            lines,
            owner=_owner(who, body),
            lease_token=_lease_token(body),
            team_id=who.team_id,
            limits=log_limits(request),
        )
    notify_events(request.app)
    return web.json_response({"run_id": run_id, "appended": count})


async def secrets_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    owner, token = _owner(who, body), _lease_token(body)
    box = request.app[BOX]
    async with sessions(request)() as session:
        run = await session.scalar(select(Run).where(Run.run_id == run_id, Run.team_id == who.team_id))
        if run is None:
            raise NotFound(f"run {run_id} does not exist")
        if not holds_lease(run, owner, token):
            raise Conflict(f"run {run_id} is {run.state} and its lease is not held by this worker")
        # Only run-scoped secrets: one deleted or re-scoped since the run was created (or a run stored
        # before scopes existed) is left out, and the worker reports it missing.
        readable = await secret_store.reveal_for_run(
            session, box, who.team_id, await run_secret_names(session, run)
        )
    return web.json_response({"secrets": readable.values}, headers={"Cache-Control": "no-store"})


def setup(app: web.Application) -> None:
    app.router.add_post(f"{PREFIX}/claim", claim)
    app.router.add_post(PREFIX + "/runs/{run_id}/heartbeat", heartbeat_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/state", state_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/logs", logs_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/secrets", secrets_route)
