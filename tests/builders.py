"""Builders for store rows, shared by the conftests (and any test module): ``import builders``.

Each builder writes one kind of row in the caller's session (the caller owns the transaction),
flushes, and returns what the caller needs next. Where a store function exists the builder goes
through it, so test data is made the way the product makes it: teams (:func:`store.teams.ensure_team`),
API keys (:func:`store.apikeys.create_key`), secrets (:func:`store.secrets.create`) and runs
(:func:`api.runs.records.create_run`). Factories, webhooks, automations, environments, schedules,
notification endpoints and delivery log entries are written only by API handlers, the reconciler's
apply and ingress, so they are inserted as ORM rows shaped as those leave them; an automation's routing
rows come from :func:`reconciler.kinds.automations.routing_rows`, the function apply itself uses.

``tests/`` has no ``__init__.py``: pytest (``prepend`` import mode) puts it on ``sys.path`` when it
imports ``tests/conftest.py``, which is how this module (like ``live_servers`` and ``serve_support``)
is importable by name from every test directory.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.runs.new_run import Creator, NewAttachment, NewRun
from api.runs.records import create_run
from reconciler.kinds.automations import routing_rows
from reconciler.specs import AutomationSpec, TriggerSpec
from store import apikeys, ids
from store import secrets as secret_store
from store.clock import Clock, SystemClock
from store.crypto import SecretBox
from store.models import (
    Automation,
    Base,
    Delivery,
    Environment,
    Factory,
    NotificationEndpoint,
    Run,
    Schedule,
    Team,
    Webhook,
)
from store.rules import cron
from store.teams import DEFAULT_TEAM, ensure_team

OTHER_TEAM = "other-team"
WORKER_HOST = "host-a"
FOREMAN = "foreman"
DEFAULT_PROMPT = "Triage the event."
TEST_CREATOR = Creator("service_account", "key_test", "test")
_RUN_COLUMNS = frozenset(attr.key for attr in Run.__mapper__.column_attrs)
_Row = TypeVar("_Row", bound=Base)

# --- teams, keys, secrets -------------------------------------------------------------------------


async def team(session: AsyncSession, name: str = DEFAULT_TEAM, *, clock: Clock | None = None) -> Team:
    """The team called ``name``, created if needed."""
    return await ensure_team(session, name, clock)


async def api_key(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    role: str,
    *,
    name: str | None = None,
    worker_hosts: Sequence[str] | None = None,
) -> str:
    """A key of ``role`` in the team (named ``"<role> key"`` unless told); returns the plaintext."""
    _row, plaintext = await apikeys.create_key(
        session, clock, team_id, name or f"{role} key", role, list(worker_hosts) if worker_hosts else None
    )
    return plaintext


@dataclass(frozen=True)
class RoleKeys:
    """Plaintext keys of each role in the default team, and an admin key of :data:`OTHER_TEAM`."""

    team_id: str
    other_team_id: str
    admin: str
    member: str
    worker: str  # may claim runs for :data:`WORKER_HOST`
    other_admin: str


async def role_keys(
    session: AsyncSession, clock: Clock, *, names: Mapping[str, str] | None = None
) -> RoleKeys:
    """An admin, member and worker key of the default team and an admin key of another team.

    ``names`` maps ``admin``/``member``/``worker``/``other_admin`` to key names (default: the role).
    """
    names = names or {}
    home = await team(session, clock=clock)
    other = await team(session, OTHER_TEAM, clock=clock)
    keys = {
        slot: await api_key(
            session,
            clock,
            row.id,
            role,
            name=names.get(slot, slot),
            worker_hosts=[WORKER_HOST] if role == "worker" else None,
        )
        for slot, role, row in (
            ("admin", "admin", home),
            ("member", "member", home),
            ("worker", "worker", home),
            ("other_admin", "admin", other),
        )
    }
    return RoleKeys(team_id=home.id, other_team_id=other.id, **keys)


async def secret(
    session: AsyncSession,
    box: SecretBox,
    clock: Clock,
    team_id: str,
    name: str,
    value: str | None = None,
    *,
    scope: str = secret_store.DEFAULT_SCOPE,
) -> secret_store.SecretInfo:
    """A new team secret (version 1); ``value`` None generates one. ``scope`` as the store's default
    (``webhook``); runs may only reference ``run`` secrets."""
    return await secret_store.create(
        session,
        box,
        clock,
        team_id,
        name,
        secret_store.generate_value() if value is None else value,
        scope=scope,
    )


# --- factories and their definitions --------------------------------------------------------------


async def _added(session: AsyncSession, row: _Row) -> _Row:
    """``row`` added to the session and flushed (so its defaults and keys are set)."""
    session.add(row)
    await session.flush()
    return row


def _definition(
    clock: Clock, team_id: str, prefix: str, uid: str | None = None, **columns: Any
) -> dict[str, Any]:
    """The columns of a new team-owned definition row (factory, webhook, automation, environment): a fresh
    UID of kind ``prefix`` unless ``uid`` is given, no spec digest, created and updated now; then
    ``columns``."""
    now = clock.now()
    return {
        "uid": uid or ids.new_id(prefix),
        "team_id": team_id,
        "spec_digest": None,
        "created_at": now,
        "updated_at": now,
        **columns,
    }


def _definition_path(managed_by: str, given: str | None, default: str) -> str | None:
    """``given``; for a definitions-managed row without one, the file an apply reads it from."""
    return default if given is None and managed_by == "definitions" else given


async def factory(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    name: str,
    *,
    uid: str | None = None,
    managed_by: str = "api",
    agents: Mapping[str, Any] | None = None,
    worker_host: str | None = None,
    description: str | None = None,
    source: str | None = None,
    applied_revision: str | None = None,
    conditions: Sequence[Mapping[str, Any]] = (),
) -> Factory:
    """A factory as ``POST /factory`` (``managed_by="api"``) or an apply (``"definitions"``) leaves it;
    ``agents`` defaults to a bare ``foreman``. ``applied_revision`` None: no revision applied yet;
    otherwise the last one attempted and applied, with ``conditions`` as that apply set them."""
    return await _added(
        session,
        Factory(
            **_definition(clock, team_id, ids.FACTORY, uid),
            name=name,
            description=description,
            worker_host=worker_host,
            managed_by=managed_by,
            agents=dict(agents) if agents is not None else {FOREMAN: {}},
            source=source,
            last_applied_revision=applied_revision,
            last_attempted_revision=applied_revision,
            conditions=[dict(c) for c in conditions],
        ),
    )


async def webhook(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    factory_uid: str,
    name: str,
    *,
    uid: str | None = None,
    auth_mode: str = "token",
    signature_scheme: str | None = None,
    secret_name: str | None = None,
    secret_version: int | None = None,
    delivery_id_header: str | None = None,
    enabled: bool = True,
    managed_by: str = "api",
    definition_path: str | None = None,
    description: str | None = None,
    deleted_at: dt.datetime | None = None,
) -> Webhook:
    """A webhook, live unless ``deleted_at`` is given. ``secret_version`` is the captured version of
    ``secret_name`` (None: not supplied yet); a ``managed_by="definitions"`` webhook's
    ``definition_path`` defaults to ``webhooks/<name>.yaml``."""
    return await _added(
        session,
        Webhook(
            **_definition(clock, team_id, ids.WEBHOOK, uid),
            factory_uid=factory_uid,
            name=name,
            description=description,
            auth_mode=auth_mode,
            signature_scheme=signature_scheme,
            secret_name=secret_name,
            secret_version=secret_version,
            delivery_id_header=delivery_id_header,
            enabled=enabled,
            managed_by=managed_by,
            definition_path=_definition_path(managed_by, definition_path, f"webhooks/{name}.yaml"),
            deleted_at=deleted_at,
        ),
    )


async def token_webhooks(
    session: AsyncSession, box: SecretBox, clock: Clock, team_id: str, factory_uid: str, names: Sequence[str]
) -> dict[str, str]:
    """Token webhooks named ``names``, each with its own secret ``<name>-secret`` holding
    ``token-<name>`` (the bearer token a sender uses); {name: uid}."""
    uids: dict[str, str] = {}
    for name in names:
        info = await secret(session, box, clock, team_id, f"{name}-secret", f"token-{name}")
        hook = await webhook(
            session, clock, team_id, factory_uid, name, secret_name=info.name, secret_version=info.version
        )
        uids[name] = hook.uid
    return uids


def webhook_trigger(webhook_uids: Sequence[str], payload_filter: dict[str, Any] | None = None) -> TriggerSpec:
    """A ``webhook``/``received`` trigger selecting ``webhook_uids``; ``payload_filter`` None matches all."""
    return TriggerSpec("webhook", "received", tuple(webhook_uids), payload_filter)


async def automation(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    factory_uid: str,
    name: str,
    triggers: Sequence[TriggerSpec],
    *,
    uid: str | None = None,
    enabled: bool = True,
    agent: str = FOREMAN,
    prompt: str = DEFAULT_PROMPT,
    title: str | None = None,
    config: Mapping[str, Any] | None = None,
    definition_path: str | None = None,
) -> Automation:
    """An automation and its routing rows (one per webhook trigger and selected UID), as apply writes them.

    ``definition_path`` None is an automation not read from files (``automations/<name>/automation.md``
    is what an apply records)."""
    spec = AutomationSpec(
        name=name,
        path=definition_path or "",
        prompt=prompt,
        enabled=enabled,
        agent=agent,
        title=title,
        config=dict(config or {}),
        triggers=tuple(triggers),
    )
    row = await _added(
        session,
        Automation(
            **_definition(clock, team_id, ids.AUTOMATION, uid),
            factory_uid=factory_uid,
            name=name,
            definition_path=definition_path,
            **spec.fields(),
        ),
    )
    session.add_all(routing_rows(row.uid, spec))
    await session.flush()
    return row


async def environment(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    name: str,
    spec: Mapping[str, Any],
    *,
    factory_uid: str | None = None,
    managed_by: str = "definitions",
    definition_path: str | None = None,
) -> Environment:
    """A run environment; a ``definitions`` one's ``definition_path`` defaults to
    ``environments/<name>.yaml``."""
    return await _added(
        session,
        Environment(
            **_definition(clock, team_id, ids.ENVIRONMENT),
            factory_uid=factory_uid,
            name=name,
            spec=dict(spec),
            managed_by=managed_by,
            definition_path=_definition_path(managed_by, definition_path, f"environments/{name}.yaml"),
        ),
    )


async def schedule(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    name: str,
    cron_expression: str,
    *,
    uid: str | None = None,
    factory_uid: str | None = None,
    timezone: str = "UTC",
    automation: str | None = None,
    prompt: str | None = None,
    agent_config: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
    enabled: bool = True,
    next_fire_at: dt.datetime | None = None,
    managed_by: str = "api",
    definition_path: str | None = None,
) -> Schedule:
    """A schedule as the schedules API (``managed_by="api"``) or an apply (``"definitions"``) leaves it: an
    enabled one's ``next_fire_at`` is the expression's first fire after the clock's now unless given, a
    disabled one's is NULL. Without ``automation`` it runs ``prompt`` (default :data:`DEFAULT_PROMPT`); a
    ``definitions`` one's ``definition_path`` defaults to ``schedules/<name>.yaml``."""
    if enabled and next_fire_at is None:
        next_fire_at = cron.next_fire(cron.parse(cron_expression), cron.zone(timezone), clock.now())
    return await _added(
        session,
        Schedule(
            **_definition(clock, team_id, ids.SCHEDULE, uid),
            factory_uid=factory_uid,
            name=name,
            cron=cron_expression,
            timezone=timezone,
            automation=automation,
            prompt=prompt if prompt is not None or automation is not None else DEFAULT_PROMPT,
            agent_config=dict(agent_config or {}),
            run_metadata=dict(metadata or {}),
            enabled=enabled,
            next_fire_at=next_fire_at if enabled else None,
            last_fired_at=None,
            last_spawn_error=None,
            managed_by=managed_by,
            definition_path=_definition_path(managed_by, definition_path, f"schedules/{name}.yaml"),
        ),
    )


async def notification(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    factory_uid: str,
    name: str,
    *,
    url: str = "https://hooks.example.com/factory",
    secret_name: str = "OPS_HOOK",
    events: Sequence[str] = ("SUCCEEDED", "FAILED", "ERROR"),
    filter: Mapping[str, Sequence[str]] | None = None,
    enabled: bool = True,
    description: str | None = None,
    failing: bool = False,
    consecutive_failures: int = 0,
    failing_since: dt.datetime | None = None,
    last_success_at: dt.datetime | None = None,
    managed_by: str = "api",
    definition_path: str | None = None,
) -> NotificationEndpoint:
    """A notification endpoint as the management API (``managed_by="api"``) or an apply
    (``"definitions"``) leaves it; ``events`` and ``filter`` must already be canonical
    (:mod:`store.rules.notification_rules`). Sender state (``failing`` ... ``last_success_at``) as given;
    a ``definitions`` one's ``definition_path`` defaults to ``notifications/<name>.yaml``."""
    return await _added(
        session,
        NotificationEndpoint(
            **_definition(clock, team_id, ids.NOTIFICATION),
            factory_uid=factory_uid,
            name=name,
            url=url,
            secret_name=secret_name,
            events=list(events),
            filter={key: list(values) for key, values in (filter or {}).items()},
            enabled=enabled,
            description=description,
            failing=failing,
            consecutive_failures=consecutive_failures,
            failing_since=failing_since,
            last_success_at=last_success_at,
            managed_by=managed_by,
            definition_path=_definition_path(managed_by, definition_path, f"notifications/{name}.yaml"),
        ),
    )


# --- ingress and runs -----------------------------------------------------------------------------


async def delivery(
    session: AsyncSession,
    team_id: str,
    webhook_uid: str,
    delivery_id: str,
    *,
    received_at: dt.datetime,
    status: str = "Accepted",
    payload: bytes | None = None,
    size: int | None = None,
    detail: str | None = None,
) -> Delivery:
    """A delivery log entry as ingress writes it (``size`` defaults to the payload's length)."""
    return await _added(
        session,
        Delivery(
            team_id=team_id,
            webhook_uid=webhook_uid,
            delivery_id=delivery_id,
            status=status,
            size=len(payload or b"") if size is None else size,
            received_at=received_at,
            payload=payload,
            detail=detail,
        ),
    )


async def run(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    *,
    prompt: str = "do the thing",
    title: str | None = None,
    agent_config: Mapping[str, Any] | None = None,
    source: str = "API",
    creator: Creator = TEST_CREATOR,
    metadata: Mapping[str, str] | None = None,
    attachments: Sequence[NewAttachment] = (),
    worker_host: str | None = None,
    **columns: Any,
) -> Run:
    """A QUEUED run through :func:`api.runs.records.create_run`, then any ``columns`` of :class:`Run`
    (``state``, ``factory_uid``...) overwritten directly, as a worker or ingress would leave them.

    ``worker_host`` None takes ``agent_config["worker_host"]`` (``create_run``'s rule).
    """
    unknown = set(columns) - _RUN_COLUMNS
    if unknown:
        raise TypeError(f"not columns of Run: {', '.join(sorted(unknown))}")
    new = NewRun(
        team_id=team_id,
        prompt=prompt,
        title=title,
        agent_config=dict(agent_config or {}),
        source=source,
        creator=creator,
        metadata=metadata or {},
        attachments=list(attachments),
        worker_host=worker_host,
    )
    row = await create_run(session, clock, new)
    for name, value in columns.items():
        setattr(row, name, value)
    if columns:
        await session.flush()
    return row


# --- for fixtures ---------------------------------------------------------------------------------


@dataclass
class TeamRows:
    """One team's rows, for the set-up helpers fixtures hand to tests (subclass it and add the client,
    keys...): each method writes what one builder writes, in a transaction of its own, at the system
    clock's time."""

    sessions: async_sessionmaker[AsyncSession]
    box: SecretBox
    team_id: str

    async def secret(self, name: str, value: str | None = None, **options: Any) -> secret_store.SecretInfo:
        """A team secret (``value`` None generates one; ``options`` as :func:`secret` takes them)."""
        async with self.sessions() as s, s.begin():
            return await secret(s, self.box, SystemClock(), self.team_id, name, value, **options)

    async def environment(self, name: str, spec: Mapping[str, Any], **options: Any) -> str:
        """An environment (as the reconciler applies ``environments/<name>.yaml`` unless ``options`` say
        otherwise); its UID."""
        async with self.sessions() as s, s.begin():
            row = await environment(s, SystemClock(), self.team_id, name, spec, **options)
        return row.uid
