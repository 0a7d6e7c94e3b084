"""``/api/v1/workers``: the worker protocol over HTTP (docs/workers.md).

- ``POST /workers/claim`` ``{worker_host, wait_seconds, worker_id?, harnesses?}`` long-polls up to
  ``min(wait_seconds, claim_wait_max_seconds)``: ``200`` with the run, its lease and ``lease_token``,
  ``204`` idle.
- ``POST /workers/runs/{id}/heartbeat`` ``{state?: "INPROGRESS", worker_id?, lease_token}`` extends the
  lease; answers ``cancel_requested`` and the pending follow-ups (each handed over once).
- ``POST /workers/runs/{id}/state`` ``{state, status_message?, worker_id?, lease_token}`` through the
  state machine.
- ``POST /workers/runs/{id}/logs`` ``{lines: [{stream, text}], worker_id?, lease_token}`` appends to the
  run log, within the run's log caps; a body over :data:`LOG_REQUEST_BYTES` is ``413``.
- ``POST /workers/runs/{id}/events`` ``{events: [{kind, data}], worker_id?, lease_token}`` appends the
  agent's transcript (``message``, ``tool_call``, ``tool_result``, ``usage``, ``session``; bounded, 422
  otherwise: :mod:`api.claims.transcript`) to the run's event stream; answers ``{accepted}``.
- ``PUT /workers/runs/{id}/session-state`` (body: the agent CLI's session files as ``application/gzip``,
  at most 4 MiB, 413 over; headers ``X-Factory-Lease-Token``, ``X-Factory-Worker-Id``) keeps them encrypted
  for a follow-up; ``GET`` the same path answers them (``404`` when no attempt saved any). Lease holder
  only, never logged (:mod:`api.claims.session_state`).
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

The handlers parse (:mod:`api.claims.bodies`), authorize, call :class:`~api.claims.protocol.WorkerProtocol`
(the path service-hosted workers take in-process) and serialise; its
:class:`~api.claims.errors.LeaseRefused` becomes the ``409`` in :mod:`api.problems`.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from sqlalchemy import select

from api import NotAuthorized, PayloadTooLarge, ValidationFailed
from api.auth import principal, require_worker_host
from api.claims import bodies, session_state, transcript
from api.claims.protocol import Holder, WorkerProtocol
from api.context import SETTINGS, sessions
from api.http.bodies import SMALL_BODY_BYTES, field_error, read_json_object
from api.http.paths import API_V1
from api.runs.claim_signal import ClaimSignal, claim_signal
from store import NotFound
from store.apikeys import Principal
from store.clock import rfc3339
from store.models import Run

PREFIX = f"{API_V1}/workers"
POLL_SECONDS = 0.25  # how often a long poll re-checks the store for runs queued by other processes
# One log request's body (docs/workers.md, "Log limits"): well under the app's client_max_size (8 MiB),
# so the documented limit, not aiohttp's, answers the 413. Workers batch by encoded bytes below it.
LOG_REQUEST_BYTES = 4 * 1024 * 1024
# One transcript request's body, like the log's: workers batch by encoded bytes below it (and by
# api.claims.transcript.MAX_EVENTS_PER_CALL events).
EVENTS_REQUEST_BYTES = 4 * 1024 * 1024

__all__ = ["setup"]


async def claim(request: web.Request) -> web.Response:
    who = await principal(request)  # 401 before any body error
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    hosts = bodies.hosts(body)
    for host in hosts:
        await require_worker_host(request, host)
    owner = bodies.owner(who, body)
    offered = bodies.harnesses(body)
    wait = bodies.wait_seconds(body, request.app[SETTINGS].claim_wait_max_seconds)
    protocol = WorkerProtocol.of(request.app)
    signal = claim_signal(request.app)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    peek = False  # idle re-checks read first, so idle workers never take write locks
    while True:
        woken = signal.current()
        payload = await protocol.claim(hosts, owner, team_id=who.team_id, peek=peek, harnesses=offered)
        if payload is not None:
            return web.json_response(payload)
        peek = True
        remaining = deadline - loop.time()
        transport = request.transport
        if remaining <= 0 or transport is None or transport.is_closing():
            return web.Response(status=204)
        await ClaimSignal.wait(woken, min(POLL_SECONDS, remaining))


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
    holder = bodies.holder(who, body)
    sandbox = bodies.sandbox(body.get("sandbox"))
    beat = await WorkerProtocol.of(request.app).heartbeat(
        run_id, holder, start=state == "INPROGRESS", sandbox=sandbox
    )
    return web.json_response(
        {
            "run_id": run_id,
            "state": beat.state,
            "cancel_requested": beat.cancel_requested,
            "followups": beat.followups,
            "lease_expires_at": rfc3339(beat.lease_expires_at),
        }
    )


async def state_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    state = bodies.reported_state(body)
    message = bodies.status_message(body.get("status_message"))
    holder = bodies.holder(who, body)
    run = await WorkerProtocol.of(request.app).report(run_id, holder, state, message)
    return web.json_response(
        {"run_id": run.run_id, "state": run.state, "cancel_requested": run.cancel_requested}
    )


async def logs_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=LOG_REQUEST_BYTES)
    lines = bodies.log_lines(body)
    count = await WorkerProtocol.of(request.app).append_logs(run_id, bodies.holder(who, body), lines)
    return web.json_response({"run_id": run_id, "appended": count})


async def events_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=EVENTS_REQUEST_BYTES)
    batch = transcript.parse_events(body.get("events"))
    count = await WorkerProtocol.of(request.app).append_events(run_id, bodies.holder(who, body), batch)
    return web.json_response({"run_id": run_id, "accepted": count})


LEASE_TOKEN_HEADER = "X-Factory-Lease-Token"  # noqa: S105 - a header name
WORKER_ID_HEADER = "X-Factory-Worker-Id"


def _header_holder(request: web.Request, who: Principal) -> Holder:
    """The holder named by a binary call's headers (its body is not JSON)."""
    fields = {"lease_token": request.headers.get(LEASE_TOKEN_HEADER)}
    if WORKER_ID_HEADER in request.headers:
        fields["worker_id"] = request.headers[WORKER_ID_HEADER]
    return bodies.holder(who, {k: v for k, v in fields.items() if v is not None})


async def put_session_state_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    limit = session_state.MAX_SESSION_STATE_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the session state exceeds {limit} bytes")
    archive = await request.content.read(limit + 1)
    if len(archive) > limit:
        raise PayloadTooLarge(f"the session state exceeds {limit} bytes")
    if not archive:
        raise ValidationFailed("the body must be the session state (a tar.gz)", errors=[])
    size = await WorkerProtocol.of(request.app).save_session_state(
        run_id, _header_holder(request, who), archive
    )
    return web.json_response({"run_id": run_id, "size": size})


async def get_session_state_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    archive = await WorkerProtocol.of(request.app).load_session_state(run_id, _header_holder(request, who))
    if archive is None:
        raise NotFound(f"run {run_id} has no saved session state")
    return web.Response(body=archive, content_type="application/gzip", headers={"Cache-Control": "no-store"})


async def secrets_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize_for_run(request, run_id)
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES, optional=True)
    readable = await WorkerProtocol.of(request.app).secrets(run_id, bodies.holder(who, body))
    return web.json_response({"secrets": readable.values}, headers={"Cache-Control": "no-store"})


def setup(app: web.Application) -> None:
    app.router.add_post(f"{PREFIX}/claim", claim)
    app.router.add_post(PREFIX + "/runs/{run_id}/heartbeat", heartbeat_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/state", state_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/logs", logs_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/events", events_route)
    app.router.add_post(PREFIX + "/runs/{run_id}/secrets", secrets_route)
    app.router.add_put(PREFIX + "/runs/{run_id}/session-state", put_session_state_route)
    app.router.add_get(PREFIX + "/runs/{run_id}/session-state", get_session_state_route)
