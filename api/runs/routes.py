"""The Run API over HTTP (docs/api.md, "Runs"): create, list, get, follow up, cancel, logs; plus the
OpenAPI document. The event stream is :mod:`api.runs.stream` (docs/events.md).

Handlers parse and authorise, then call :mod:`api.runs.records` inside one transaction per request;
after a commit that queued a run they wake this process's waiting claimers. Runs need the
``member`` role (admins included); worker keys get 403 here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from api.auth import require
from api.context import CLOCK, SETTINGS, sessions
from api.errors import BadRequest, Conflict, ValidationFailed
from api.http.bodies import fail_on, field_error, read_json_object
from api.http.pagination import fingerprint, page_after, page_info, page_limit
from api.http.paths import API_V1
from api.runs import records as runs
from api.runs.artifacts import artifacts_of
from api.runs.claim_signal import wake_claimers
from api.runs.config import resolve_config
from api.runs.event_hub import notify_events, runs_queued
from api.runs.followup_limits import FollowupLimits
from api.runs.new_run import Creator, NewRun
from api.runs.prepare import SKILLS, finalize_config, install_resolver
from api.runs.requests import MAX_ATTACHMENTS, MAX_PROMPT, parse_list_query, parse_run_request
from api.runs.serialize import followup_item, item_context, log_line, run_item
from api.runs.states import IllegalTransition, RunState
from api.runs.stream import setup as setup_event_stream
from store import NotFound
from store.apikeys import Principal
from store.rules.vocabulary import RunSource

CLI_SOURCE_HEADER = "X-Factory-Source"
OPENAPI_PATH = Path(__file__).resolve().parents[2] / "schemas" / "openapi.yaml"
OPENAPI_JSON = web.AppKey("openapi_json", str)
MAX_LOG_LINES = 1000


def creator_of(who: Principal) -> Creator:
    return Creator(type="service_account", uid=who.key_id, display_name=who.name)


def illegal_transition(exc: IllegalTransition, detail: str) -> BadRequest | Conflict:
    """The API error for a refused state change: 409 for ``conflict``, else 400 ``invalid_request``."""
    return Conflict(detail) if exc.error_code == "conflict" else BadRequest(detail)


async def create_agent_run(request: web.Request) -> web.Response:
    who = await require(request, "member")
    settings = request.app[SETTINGS]
    limit = settings.max_attachment_bytes * MAX_ATTACHMENTS * 4 // 3 + 1_048_576
    body = await read_json_object(request, max_bytes=limit)
    parsed = parse_run_request(body, max_attachment_bytes=settings.max_attachment_bytes)
    # agent_identity_uid, interactive and mode are accepted and ignored: a foreman identity never
    # dispatches a factory from here (factories are dispatched by UID, POST /factory/{uid}/runs).
    cli = request.headers.get(CLI_SOURCE_HEADER, "").strip().upper() == RunSource.CLI
    source = RunSource.CLI if cli else RunSource.API
    async with sessions(request)() as session, session.begin():
        if parsed.parent_run_id is not None:
            try:
                await runs.get_run(session, who.team_id, parsed.parent_run_id)
            except NotFound:
                raise ValidationFailed(
                    f"parent_run_id: run {parsed.parent_run_id} does not exist",
                    errors=[field_error("parent_run_id", "no such run")],
                ) from None
        config = await finalize_config(
            session,
            request.app[SKILLS],
            who.team_id,
            resolve_config(parsed.config, None, None, None),
            skill_field=parsed.skill_field,
        )
        new = NewRun(
            team_id=who.team_id,
            prompt=parsed.prompt,
            title=parsed.title,
            agent_config=config,
            source=source,
            creator=creator_of(who),
            metadata=parsed.metadata,
            attachments=parsed.attachments,
            conversation_id=parsed.conversation_id,
            parent_run_id=parsed.parent_run_id,
        )
        run = await runs.create_run(session, request.app[CLOCK], new)
    runs_queued(request.app)
    return web.json_response(
        {"run_id": run.run_id, "task_id": run.run_id, "state": run.state, "at_capacity": False}
    )


async def list_agent_runs(request: web.Request) -> web.Response:
    who = await require(request, "member")
    limit = page_limit(request.query)
    query = parse_list_query(request.query)
    fp = fingerprint({"sort_by": query.sort_by, "sort_order": query.sort_order, **query.filters.params()})
    after = page_after(request.query, fp)
    page = runs.PageRequest(limit=limit, sort_by=query.sort_by, sort_order=query.sort_order, after=after)
    async with sessions(request)() as session:
        result = await runs.list_runs(session, who.team_id, query.filters, page)
        found = await artifacts_of(session, [r.run_id for r in result.runs])
    return web.json_response(
        {
            "runs": [
                run_item(
                    r,
                    result.attachments.get(r.run_id, ()),
                    artifacts=found[r.run_id],
                    **item_context(request),
                )
                for r in result.runs
            ],
            "page_info": page_info(result.next_position, fp),
        }
    )


async def get_agent_run(request: web.Request) -> web.Response:
    who = await require(request, "member")
    async with sessions(request)() as session:
        run = await runs.get_run(session, who.team_id, request.match_info["run_id"])
        names = await runs.attachment_names(session, [run])
        found = await artifacts_of(session, [run.run_id])
    return web.json_response(
        run_item(run, names[run.run_id], artifacts=found[run.run_id], **item_context(request))
    )


async def followup_agent_run(request: web.Request) -> web.Response:
    who = await require(request, "member")
    run_id = request.match_info["run_id"]
    body = await read_json_object(request, max_bytes=1_048_576)
    message, mode = body.get("message"), body.get("mode")
    errors = []
    if not isinstance(message, str) or not message.strip():
        errors.append(field_error("message", "is required (a non-empty string)"))
    elif len(message) > MAX_PROMPT:
        errors.append(field_error("message", f"must be at most {MAX_PROMPT} characters"))
    if mode is not None and (not isinstance(mode, str) or len(mode) > 40):
        errors.append(field_error("mode", "must be a string of at most 40 characters"))
    fail_on(errors)
    try:
        async with sessions(request)() as session, session.begin():
            followup, outcome = await runs.add_followup(
                session,
                request.app[CLOCK],
                who.team_id,
                run_id,
                str(message),
                mode,
                limits=FollowupLimits.of(request.app[SETTINGS]),
            )
    except IllegalTransition as exc:
        why = (
            "was cancelled" if exc.state is RunState.CANCELLED else f"is being cancelled ({exc.state.value})"
        )
        raise illegal_transition(exc, f"run {run_id} {why}; it takes no follow-ups") from None
    if outcome == "requeued":
        wake_claimers(request.app)
    notify_events(request.app)
    return web.json_response(followup_item(followup))


async def cancel_agent_run(request: web.Request) -> web.Response:
    who = await require(request, "member")
    run_id = request.match_info["run_id"]
    try:
        async with sessions(request)() as session, session.begin():
            run = await runs.cancel_run(session, request.app[CLOCK], who.team_id, run_id)
    except IllegalTransition as exc:
        raise illegal_transition(
            exc, f"run {run_id} is {exc.state.value}; only live runs can be cancelled"
        ) from None
    notify_events(request.app)
    return web.json_response(run.run_id)


async def agent_run_logs(request: web.Request) -> web.Response:
    who = await require(request, "member")
    raw_after = request.query.get("after", "0")
    if not raw_after.isascii() or not raw_after.isdigit() or len(raw_after) > 18:
        raise BadRequest("after must be a non-negative integer (a log line id)")
    limit = page_limit(request.query, default=200, maximum=MAX_LOG_LINES)
    async with sessions(request)() as session:
        lines, more = await runs.list_logs(
            session, who.team_id, request.match_info["run_id"], after=int(raw_after), limit=limit
        )
    next_after = lines[-1].id if lines else int(raw_after)
    return web.json_response(
        {"logs": [log_line(x) for x in lines], "next_after": next_after, "has_more": more}
    )


async def openapi_document(request: web.Request) -> web.Response:
    return web.Response(text=request.app[OPENAPI_JSON], content_type="application/json")


def load_openapi(path: Path = OPENAPI_PATH) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API (``schemas/openapi.yaml``)."""
    with path.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not an OpenAPI document")
    return data


def setup(app: web.Application) -> None:
    app[OPENAPI_JSON] = json.dumps(load_openapi())
    install_resolver(app)
    app.router.add_get(f"{API_V1}/openapi.json", openapi_document)
    app.router.add_post(f"{API_V1}/agent/run", create_agent_run)
    app.router.add_post(f"{API_V1}/agent/runs", create_agent_run)
    app.router.add_get(f"{API_V1}/agent/runs", list_agent_runs)
    app.router.add_get(API_V1 + "/agent/runs/{run_id}", get_agent_run)
    app.router.add_post(API_V1 + "/agent/runs/{run_id}/followups", followup_agent_run)
    app.router.add_post(API_V1 + "/agent/runs/{run_id}/cancel", cancel_agent_run)
    app.router.add_get(API_V1 + "/agent/runs/{run_id}/logs", agent_run_logs)
    setup_event_stream(app)
