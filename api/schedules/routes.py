"""``/api/v1/agent/schedules``: scheduled agents over HTTP (docs/api.md, "Schedules"; docs/schedules.md,
"Schedules over the API").

Wire-compatible with the official SDK's schedule resource (list, create, get, update, delete, pause,
resume) plus ``POST .../{id}/run`` ("run now"). Bodies follow the run API's rules, since the same SDK
sends them: unknown fields are ignored, ``agent_config`` is checked like a run's ``config`` (the request
config is stored, not its resolution, so a skill or environment is resolved again at each fire), and
``agent_uid``, ``mode`` and ``team`` are accepted and ignored, as the runs API ignores
``agent_identity_uid``: every schedule belongs to the caller's team and runs as the schedule.

Everything needs the ``member`` role (a schedule only starts runs, which members may do). A schedule
applied from ``schedules/<name>.yaml`` belongs to its repository: editing, deleting, pausing or resuming
it here is a 409 naming the file, like webhooks of a definitions-managed factory; running it now is an
action, not an edit, and is allowed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import CLOCK, sessions
from api.errors import Conflict, ResourceNotFound
from api.http.bodies import fail_on, field_error, read_json_object
from api.http.paths import API_V1
from api.runs.config import validate_config
from api.runs.event_hub import runs_queued
from api.runs.prepare import SKILLS, finalize_config, install_resolver
from api.runs.requests import MAX_PROMPT, validate_metadata
from api.runs.routes import creator_of
from api.runs.skill_list import primary_skill, with_primary
from api.schedules.firing import start_run
from api.schedules.serialize import automation_views, schedule_item
from store import ids
from store.models import Factory, Schedule
from store.rules import cron

MAX_BODY = 2_097_152  # a prompt of 200,000 characters and a config with a base prompt, JSON-escaped
MAX_NAME = 200
MAX_CRON = 200
MAX_TIMEZONE = 100
MAX_IGNORED = 100  # agent_uid, mode: type-checked, then ignored
DEFAULT_TIMEZONE = "UTC"
DEFINITIONS = "definitions"


@dataclass(frozen=True)
class ScheduleBody:
    """A checked ScheduleCreateParams / ScheduleUpdateParams; None: the field was not given."""

    name: str
    cron: str
    timezone: str | None
    enabled: bool | None
    prompt: str | None
    agent_config: dict[str, Any] | None
    metadata: dict[str, str] | None


def parse_body(body: Mapping[str, Any], *, update: bool) -> ScheduleBody:
    """Every field error at once (422). ``update``: ``enabled`` is required, as the SDK sends it."""
    errors: list[dict[str, Any]] = []
    name = _string(body, "name", MAX_NAME, errors, required=True)
    cron_expr = _string(body, "cron_schedule", MAX_CRON, errors, required=True)
    if cron_expr is not None:
        errors += cron_errors(cron_expr)
    timezone = _string(body, "timezone", MAX_TIMEZONE, errors)
    if timezone is not None:
        errors += timezone_errors(timezone)
    enabled = body.get("enabled")
    if (enabled is None and update) or (enabled is not None and not isinstance(enabled, bool)):
        errors.append(
            field_error("enabled", "is required: true or false" if update else "must be true or false")
        )
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        errors.append(field_error("prompt", "must be a string"))
    elif isinstance(prompt, str) and len(prompt) > MAX_PROMPT:
        errors.append(field_error("prompt", f"must be at most {MAX_PROMPT} characters"))
    config = body.get("agent_config")
    errors += validate_config(config, field="agent_config")
    if not update and "prompt" not in {e["field"] for e in errors}:  # an update checks the merged result
        errors += prompt_errors(prompt, config if isinstance(config, Mapping) else {})
    errors += validate_metadata(body.get("metadata"))
    for ignored in ("agent_uid", "mode"):
        value = body.get(ignored)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_IGNORED):
            errors.append(field_error(ignored, f"must be a string of at most {MAX_IGNORED} characters"))
    if body.get("team") is not None and not isinstance(body["team"], bool):
        errors.append(field_error("team", "must be true or false"))
    fail_on(errors)
    metadata = body.get("metadata")
    return ScheduleBody(
        name=str(name),
        cron=str(cron_expr),
        timezone=timezone,
        enabled=enabled if isinstance(enabled, bool) else None,
        prompt=prompt if isinstance(prompt, str) else None,
        # the first of ``skills`` also stored as ``skill_spec``, as the SDK shows it (api/runs/skill_list.py)
        agent_config=with_primary(config) if isinstance(config, Mapping) else None,
        metadata=dict(metadata) if isinstance(metadata, Mapping) else None,
    )


def _string(
    body: Mapping[str, Any], name: str, max_len: int, errors: list[dict[str, Any]], *, required: bool = False
) -> str | None:
    """A non-blank string field of at most ``max_len`` characters, stripped; None when absent."""
    value = body.get(name)
    if value is None:
        if required:
            errors.append(field_error(name, "is required"))
        return None
    if not isinstance(value, str) or not value.strip():
        errors.append(field_error(name, "must be a non-empty string"))
        return None
    if len(value) > max_len:
        errors.append(field_error(name, f"must be at most {max_len} characters"))
        return None
    return value.strip()


def cron_errors(expr: str) -> list[dict[str, Any]]:
    """A bad expression's error, naming the cron field at fault: ``hour: 24 is out of range 0-23 (...)``."""
    try:
        cron.parse(expr)
    except cron.CronError as exc:
        return [field_error("cron_schedule", exc.message)]
    return []


def timezone_errors(name: str) -> list[dict[str, Any]]:
    try:
        cron.zone(name)
    except cron.CronError as exc:
        return [field_error("timezone", exc.message)]
    return []


def prompt_errors(prompt: str | None, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run API's rule: a prompt, unless a skill says what to do."""
    if (prompt and prompt.strip()) or primary_skill(config):
        return []
    return [
        field_error("prompt", "is required unless agent_config.skill_spec or agent_config.skills is given")
    ]


def next_fire_at(expr: str, timezone: str, enabled: bool, now: dt.datetime) -> dt.datetime | None:
    """The first fire time after ``now``; None while disabled (the scheduler selects on it)."""
    return cron.next_fire(cron.parse(expr), cron.zone(timezone), now) if enabled else None


async def load_schedule(
    session: AsyncSession, team_id: str, uid: str, *, for_update: bool = False
) -> Schedule:
    """The team's schedule ``uid``; 404 for a missing one and for another team's alike."""
    stmt = select(Schedule).where(Schedule.uid == uid, Schedule.team_id == team_id)
    row = (await session.execute(stmt.with_for_update() if for_update else stmt)).scalar_one_or_none()
    if row is None:
        raise ResourceNotFound(f"schedule {uid} does not exist")
    return row


async def refuse_definitions(session: AsyncSession, row: Schedule, what: str) -> None:
    """409 for a schedule applied from definition files: the repository owns it (docs/schedules.md)."""
    if row.managed_by != DEFINITIONS:
        return
    factory = await session.get(Factory, row.factory_uid) if row.factory_uid else None
    where = row.definition_path or f"schedules/{row.name}.yaml"
    owner = factory.name if factory is not None else row.factory_uid
    raise Conflict(
        f"schedule {row.name!r} is defined in {where} of factory {owner!r}; {what} there and commit"
    )


async def _item(session: AsyncSession, row: Schedule) -> dict[str, Any]:
    return schedule_item(row, await automation_views(session, [row]))


async def list_schedules(request: web.Request) -> web.Response:
    """The team's schedules, API- and definitions-managed, oldest first."""
    who = await require(request, "member")
    stmt = select(Schedule).where(Schedule.team_id == who.team_id).order_by(Schedule.created_at, Schedule.uid)
    async with sessions(request)() as session:
        rows = list((await session.execute(stmt)).scalars())
        views = await automation_views(session, rows)
    return web.json_response({"schedules": [schedule_item(r, views) for r in rows]})


async def create_schedule(request: web.Request) -> web.Response:
    """201 with the new API-managed schedule; ``next_run`` is its first fire time (NULL when disabled)."""
    who = await require(request, "member")
    parsed = parse_body(await read_json_object(request, max_bytes=MAX_BODY), update=False)
    config = parsed.agent_config or {}
    timezone = parsed.timezone or DEFAULT_TIMEZONE
    enabled = True if parsed.enabled is None else parsed.enabled
    now = request.app[CLOCK].now()
    async with sessions(request)() as session, session.begin():
        await finalize_config(session, request.app[SKILLS], who.team_id, dict(config), field="agent_config")
        row = Schedule(
            uid=ids.new_id(ids.SCHEDULE),
            team_id=who.team_id,
            factory_uid=None,
            name=parsed.name,
            cron=parsed.cron,
            timezone=timezone,
            automation=None,
            prompt=parsed.prompt or "",
            agent_config=config,
            run_metadata=parsed.metadata or {},
            enabled=enabled,
            next_fire_at=next_fire_at(parsed.cron, timezone, enabled, now),
            last_fired_at=None,
            last_spawn_error=None,
            managed_by="api",
            definition_path=None,
            spec_digest=None,
            creator_uid=who.key_id,
            creator_display_name=who.name,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        await session.flush()
        out = schedule_item(row, {})
    return web.json_response(out, status=201)


async def get_schedule(request: web.Request) -> web.Response:
    who = await require(request, "member")
    async with sessions(request)() as session:
        row = await load_schedule(session, who.team_id, request.match_info["schedule_id"])
        out = await _item(session, row)
    return web.json_response(out)


async def update_schedule(request: web.Request) -> web.Response:
    """Replace name, cron and enabled; prompt, agent_config, metadata and timezone when given. The next
    fire time moves only when the cron expression, time zone or enabled flag changes."""
    who = await require(request, "member")
    parsed = parse_body(await read_json_object(request, max_bytes=MAX_BODY), update=True)
    now = request.app[CLOCK].now()
    async with sessions(request)() as session, session.begin():
        row = await load_schedule(session, who.team_id, request.match_info["schedule_id"], for_update=True)
        await refuse_definitions(session, row, "change it")
        prompt = row.prompt if parsed.prompt is None else parsed.prompt
        config = row.agent_config if parsed.agent_config is None else parsed.agent_config
        fail_on(prompt_errors(prompt, config))
        if parsed.agent_config is not None:  # a kept config was checked when it was given
            await finalize_config(
                session, request.app[SKILLS], who.team_id, dict(config), field="agent_config"
            )
        timezone = parsed.timezone or row.timezone
        enabled = bool(parsed.enabled)
        if (parsed.cron, timezone, enabled) != (row.cron, row.timezone, row.enabled):
            row.next_fire_at = next_fire_at(parsed.cron, timezone, enabled, now)
        row.name, row.cron, row.timezone, row.enabled = parsed.name, parsed.cron, timezone, enabled
        row.prompt, row.agent_config = prompt, config
        if parsed.metadata is not None:
            row.run_metadata = parsed.metadata
        row.updated_at = now
        out = await _item(session, row)
    return web.json_response(out)


async def delete_schedule(request: web.Request) -> web.Response:
    """Future fires stop at once; runs it started stay (their ``schedule_id`` keeps naming it)."""
    who = await require(request, "member")
    async with sessions(request)() as session, session.begin():
        row = await load_schedule(session, who.team_id, request.match_info["schedule_id"], for_update=True)
        await refuse_definitions(session, row, "remove the file")
        await session.delete(row)
    return web.json_response({"success": True})


async def pause_schedule(request: web.Request) -> web.Response:
    """Disable: no next fire. Pausing a paused schedule changes nothing."""
    who = await require(request, "member")
    async with sessions(request)() as session, session.begin():
        row = await load_schedule(session, who.team_id, request.match_info["schedule_id"], for_update=True)
        await refuse_definitions(session, row, "set enabled: false")
        if row.enabled:
            row.enabled, row.next_fire_at = False, None
            row.updated_at = request.app[CLOCK].now()
        out = await _item(session, row)
    return web.json_response(out)


async def resume_schedule(request: web.Request) -> web.Response:
    """Enable from now on: the next fire is the first after now; times missed while paused never fire.
    Resuming an enabled schedule changes nothing."""
    who = await require(request, "member")
    async with sessions(request)() as session, session.begin():
        row = await load_schedule(session, who.team_id, request.match_info["schedule_id"], for_update=True)
        await refuse_definitions(session, row, "set enabled: true")
        if not row.enabled:
            now = request.app[CLOCK].now()
            row.enabled, row.next_fire_at = True, next_fire_at(row.cron, row.timezone, True, now)
            row.updated_at = now
        out = await _item(session, row)
    return web.json_response(out)


async def run_schedule_now(request: web.Request) -> web.Response:
    """Start one run now, as a fire would (source ``SCHEDULED_AGENT``), without touching the next fire
    time; the answer is run creation's. Allowed on definitions-managed schedules: it edits nothing."""
    who = await require(request, "member")
    async with sessions(request)() as session, session.begin():
        row = await load_schedule(session, who.team_id, request.match_info["schedule_id"])
        run = await start_run(
            session, request.app[CLOCK].now(), row, resolver=request.app[SKILLS], creator=creator_of(who)
        )
        out = {"run_id": run.run_id, "task_id": run.run_id, "state": run.state, "at_capacity": False}
    runs_queued(request.app)
    return web.json_response(out)


def setup(app: web.Application) -> None:
    """Add the schedule routes."""
    install_resolver(app)
    base = f"{API_V1}/agent/schedules"
    one = base + "/{schedule_id}"
    app.router.add_get(base, list_schedules)
    app.router.add_post(base, create_schedule)
    app.router.add_get(one, get_schedule)
    app.router.add_put(one, update_schedule)
    app.router.add_delete(one, delete_schedule)
    app.router.add_post(one + "/pause", pause_schedule)
    app.router.add_post(one + "/resume", resume_schedule)
    app.router.add_post(one + "/run", run_schedule_now)
