"""Factory endpoints (docs/api.md, "Factories"): list and get factories, create API-managed ones, dispatch
to a foreman.

Reads need ``member``; creating a factory needs ``admin``. A factory of another team is a 404.
Dispatch (``POST /factory/{uid}/runs``) starts a FACTORY-sourced run for the factory's ``foreman``
agent, on the factory's ``workerHost`` — it is the only way a factory is dispatched.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy import and_, or_, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import CLOCK, SETTINGS, sessions
from api.errors import Conflict, ResourceNotFound
from api.factories.serialize import factory_detail_json, factory_json
from api.http.bodies import SMALL_BODY_BYTES, fail_on, field_error, optional_string, read_json_object
from api.http.pagination import Cursor, fingerprint, page_after, page_info, page_limit, split_page
from api.http.paths import API_V1
from api.runs import records as runs
from api.runs.config import resolve_config
from api.runs.event_hub import runs_queued
from api.runs.new_run import NewRun
from api.runs.prepare import SKILLS, finalize_config, install_resolver
from api.runs.requests import MAX_PROMPT, MAX_TITLE, validate_metadata
from api.runs.routes import creator_of
from store import ids
from store.models import ApplyRecord, Automation, Factory, FactoryObject, Webhook
from store.rules.vocabulary import RunSource
from store.snapshot import snapshot_reads

FOREMAN = "foreman"  # the foreman of a legacy or API-created factory


async def foreman_of(session: AsyncSession, factory: Factory) -> str:
    """The name of the factory's foreman: its agent whose type is FOREMAN (docs/definitions.md), else the
    agent called ``foreman`` (legacy trees and API-created factories)."""
    stmt = select(FactoryObject.name, FactoryObject.spec).where(
        FactoryObject.factory_uid == factory.uid, FactoryObject.kind == "agent"
    )
    for name, spec in await session.execute(stmt):
        if isinstance(spec, dict) and spec.get("agent_type") == "FOREMAN":
            return str(name)
    return FOREMAN


MAX_NAME = 200


async def load_factory(session: AsyncSession, team_id: str, uid: str) -> Factory:
    row = await session.get(Factory, uid)
    if row is None or row.team_id != team_id:
        raise ResourceNotFound(f"factory {uid} does not exist")
    return row


async def list_factories(request: web.Request) -> web.Response:
    """``GET /factory``: by name, keyset-paginated; ``search`` matches name or description."""
    who = await require(request, "member")
    limit = page_limit(request.query)
    search = request.query.get("search") or None
    fp = fingerprint({"list": "factories", "search": search})
    stmt = select(Factory).where(Factory.team_id == who.team_id)
    if search:
        stmt = stmt.where(
            or_(
                Factory.name.icontains(search, autoescape=True),
                Factory.description.icontains(search, autoescape=True),
            )
        )
    after = page_after(request.query, fp)
    if after is not None:
        stmt = stmt.where(tuple_(Factory.name, Factory.uid) > tuple_(after.value or "", after.row_id))
    stmt = stmt.order_by(Factory.name, Factory.uid).limit(limit + 1)
    async with sessions(request)() as session:
        rows, last = split_page(list((await session.execute(stmt)).scalars()), limit)
    return web.json_response(
        {
            "factories": [factory_json(r) for r in rows],
            "page_info": page_info(Cursor(value=last.name, row_id=last.uid) if last else None, fp),
        }
    )


async def factory_detail(session: AsyncSession, team_id: str, uid: str, base_url: str) -> dict[str, Any]:
    """The factory with its live webhooks, automations and last apply (``GET /factory/{uid}``, console)."""
    row = await load_factory(session, team_id, uid)
    hooks = (
        await session.execute(
            select(Webhook)
            .where(and_(Webhook.factory_uid == uid, Webhook.deleted_at.is_(None)))
            .order_by(Webhook.name)
        )
    ).scalars()
    autos = (
        await session.execute(
            select(Automation).where(Automation.factory_uid == uid).order_by(Automation.name)
        )
    ).scalars()
    last = (
        await session.execute(
            select(ApplyRecord)
            .where(ApplyRecord.factory_uid == uid, ApplyRecord.team_id == team_id)
            .order_by(ApplyRecord.started_at.desc(), ApplyRecord.id.desc())
            .limit(1)
        )
    ).scalar_one_or_none()
    return factory_detail_json(row, list(hooks), list(autos), last, base_url)


async def get_factory(request: web.Request) -> web.Response:
    """``GET /factory/{uid}``: the factory with its live webhooks, automations and last apply."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        await snapshot_reads(session)  # conditions and last apply of the same moment
        body = await factory_detail(
            session, who.team_id, request.match_info["uid"], request.app[SETTINGS].base_url
        )
    return web.json_response(body)


async def create_factory(request: web.Request) -> web.Response:
    """``POST /factory`` (admin): an API-managed factory with a ``foreman`` agent; 409 on a taken name."""
    who = await require(request, "admin")
    body = await read_json_object(request, max_bytes=SMALL_BODY_BYTES)
    errors: list[dict[str, Any]] = []
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append(field_error("name", "is required (a non-empty string)"))
    elif len(name.strip()) > MAX_NAME or not name.strip().isprintable():
        errors.append(field_error("name", f"must be printable and at most {MAX_NAME} characters"))
    worker_host = optional_string(body, "worker_host", errors, max_length=200)
    description = optional_string(body, "description", errors, max_length=10_000)
    fail_on(errors)
    assert isinstance(name, str)
    now = request.app[CLOCK].now()
    row = Factory(
        uid=ids.new_id(ids.FACTORY),
        team_id=who.team_id,
        name=name.strip(),
        description=description,
        worker_host=worker_host,
        managed_by="api",
        agents={FOREMAN: {}},
        conditions=[],
        created_at=now,
        updated_at=now,
    )
    try:
        async with sessions(request)() as session, session.begin():
            session.add(row)
    except IntegrityError:
        raise Conflict(f"a factory named {name.strip()!r} already exists") from None
    return web.json_response(factory_json(row), status=201)


def dispatch_prompt(prompt: str, ticket_ref: str | None, ticket_url: str | None) -> str:
    """The foreman's prompt: the caller's prompt, then the ticket it concerns (when given)."""
    ticket = " ".join(part for part in (ticket_ref, ticket_url) if part)
    return f"{prompt.rstrip()}\n\nTicket: {ticket}" if ticket else prompt


async def dispatch_factory_run(request: web.Request) -> web.Response:
    """``POST /factory/{uid}/runs``: start a run of the factory's foreman on its worker host."""
    who = await require(request, "member")
    body = await read_json_object(request, max_bytes=1_048_576)
    errors: list[dict[str, Any]] = []
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        errors.append(field_error("prompt", "is required (a non-empty string)"))
    elif len(prompt) > MAX_PROMPT:
        errors.append(field_error("prompt", f"must be at most {MAX_PROMPT} characters"))
    title = optional_string(body, "title", errors, max_length=MAX_TITLE)
    ticket_ref = optional_string(body, "ticket_ref", errors, max_length=256)
    ticket_url = optional_string(body, "ticket_url", errors, max_length=256)
    metadata = {k: v for k, v in (("ticket_ref", ticket_ref), ("ticket_url", ticket_url)) if v}
    errors += validate_metadata(metadata)
    fail_on(errors)
    assert isinstance(prompt, str)
    async with sessions(request)() as session, session.begin():
        factory = await load_factory(session, who.team_id, request.match_info["uid"])
        agents = factory.agents or {}
        foreman = await foreman_of(session, factory)
        defaults = agents.get(foreman) if isinstance(agents.get(foreman), dict) else None
        config = resolve_config(None, None, defaults, None)
        if factory.worker_host and not config.get("worker_host"):
            config["worker_host"] = factory.worker_host
        config = await finalize_config(
            session, request.app[SKILLS], who.team_id, config, field=f"agents.{foreman}"
        )
        new = NewRun(
            team_id=who.team_id,
            prompt=dispatch_prompt(prompt, ticket_ref, ticket_url),
            title=title or (f"{ticket_ref}: {runs.default_title(prompt)}" if ticket_ref else None),
            agent_config=config,
            source=RunSource.FACTORY,
            creator=creator_of(who),
            metadata=metadata,
            factory_uid=factory.uid,
            agent=foreman,
        )
        run = await runs.create_run(session, request.app[CLOCK], new)
    runs_queued(request.app)
    return web.json_response(
        {
            "factory_uid": factory.uid,
            "foreman_agent": foreman,
            "run_id": run.run_id,
            "state": run.state,
            "ticket_ref": ticket_ref,
        }
    )


def setup(app: web.Application) -> None:
    install_resolver(app)
    app.router.add_get(f"{API_V1}/factory", list_factories)
    app.router.add_post(f"{API_V1}/factory", create_factory)
    app.router.add_get(API_V1 + "/factory/{uid}", get_factory)
    app.router.add_post(API_V1 + "/factory/{uid}/runs", dispatch_factory_run)
