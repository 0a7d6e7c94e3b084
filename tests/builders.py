"""Builders for store rows, shared by the conftests (and any test module): ``import builders``.

Each builder writes one kind of row in the caller's session (the caller owns the transaction),
flushes, and returns what the caller needs next. Where a store function exists the builder goes
through it, so test data is made the way the product makes it: teams (:func:`store.teams.ensure_team`),
API keys (:func:`store.apikeys.create_key`), secrets (:func:`store.secrets.create`) and runs
(:func:`api.runs.records.create_run`). Factories, webhooks, automations, environments and delivery
log entries are written only by API handlers, the reconciler's apply and ingress, so they are
inserted as ORM rows shaped as those leave them; an automation's routing rows come from
:func:`reconciler.apply.routing_rows`, the function apply itself uses.

``tests/`` has no ``__init__.py``: pytest (``prepend`` import mode) puts it on ``sys.path`` when it
imports ``tests/conftest.py``, which is how this module (like ``live_servers`` and ``serve_support``)
is importable by name from every test directory.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.records import Creator, NewAttachment, create_run
from reconciler.apply import routing_rows
from reconciler.specs import AutomationSpec, TriggerSpec
from store import apikeys, ids
from store import secrets as secret_store
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Automation, Delivery, Environment, Factory, Run, Team, Webhook
from store.teams import DEFAULT_TEAM, ensure_team

OTHER_TEAM = "other-team"
WORKER_HOST = "host-a"
FOREMAN = "foreman"
DEFAULT_PROMPT = "Triage the event."
TEST_CREATOR = Creator("service_account", "key_test", "test")
_RUN_COLUMNS = frozenset(attr.key for attr in Run.__mapper__.column_attrs)

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
    session: AsyncSession, box: SecretBox, clock: Clock, team_id: str, name: str, value: str | None = None
) -> secret_store.SecretInfo:
    """A new team secret (version 1); ``value`` None generates one."""
    return await secret_store.create(
        session, box, clock, team_id, name, secret_store.generate_value() if value is None else value
    )


# --- factories and their definitions --------------------------------------------------------------


async def factory(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    name: str,
    *,
    managed_by: str = "api",
    agents: Mapping[str, Any] | None = None,
    worker_host: str | None = None,
    description: str | None = None,
    source: str | None = None,
) -> Factory:
    """A factory as ``POST /factory`` (``managed_by="api"``) or an apply (``"definitions"``) leaves it,
    before any revision was applied; ``agents`` defaults to a bare ``foreman``."""
    now = clock.now()
    row = Factory(
        uid=ids.new_id(ids.FACTORY),
        team_id=team_id,
        name=name,
        description=description,
        worker_host=worker_host,
        managed_by=managed_by,
        agents=dict(agents) if agents is not None else {FOREMAN: {}},
        source=source,
        spec_digest=None,
        last_applied_revision=None,
        last_attempted_revision=None,
        conditions=[],
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    await session.flush()
    return row


async def webhook(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    factory_uid: str,
    name: str,
    *,
    auth_mode: str = "token",
    signature_scheme: str | None = None,
    secret_name: str | None = None,
    secret_version: int | None = None,
    delivery_id_header: str | None = None,
    enabled: bool = True,
    managed_by: str = "api",
    definition_path: str | None = None,
    description: str | None = None,
) -> Webhook:
    """A live webhook. ``secret_version`` is the captured version of ``secret_name`` (None: not supplied
    yet); a ``managed_by="definitions"`` webhook's ``definition_path`` defaults to
    ``webhooks/<name>.yaml``."""
    if definition_path is None and managed_by == "definitions":
        definition_path = f"webhooks/{name}.yaml"
    now = clock.now()
    row = Webhook(
        uid=ids.new_id(ids.WEBHOOK),
        team_id=team_id,
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
        definition_path=definition_path,
        spec_digest=None,
        created_at=now,
        updated_at=now,
        deleted_at=None,
    )
    session.add(row)
    await session.flush()
    return row


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
    now = clock.now()
    row = Automation(
        uid=ids.new_id(ids.AUTOMATION),
        team_id=team_id,
        factory_uid=factory_uid,
        name=name,
        definition_path=definition_path,
        spec_digest=None,
        created_at=now,
        updated_at=now,
        **spec.fields(),
    )
    session.add(row)
    await session.flush()
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
    if definition_path is None and managed_by == "definitions":
        definition_path = f"environments/{name}.yaml"
    now = clock.now()
    row = Environment(
        uid=ids.new_id(ids.ENVIRONMENT),
        team_id=team_id,
        factory_uid=factory_uid,
        name=name,
        spec=dict(spec),
        managed_by=managed_by,
        definition_path=definition_path,
        spec_digest=None,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    await session.flush()
    return row


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
    row = Delivery(
        team_id=team_id,
        webhook_uid=webhook_uid,
        delivery_id=delivery_id,
        status=status,
        size=len(payload or b"") if size is None else size,
        received_at=received_at,
        payload=payload,
        detail=detail,
    )
    session.add(row)
    await session.flush()
    return row


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
    row = await create_run(
        session,
        clock,
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
    for name, value in columns.items():
        setattr(row, name, value)
    if columns:
        await session.flush()
    return row
