"""Apply: read what the store holds for a factory, and write a plan into it.

Both functions take the caller's session and never commit: :func:`reconciler.service.reconcile`
runs read, checks, plan and apply in one transaction, so an apply is all or nothing.

Reading is a fixed number of queries per factory (factory, webhooks, automations, environments,
schedules, notification endpoints, secrets), whatever its size, and builds no ORM objects; writing
touches only the rows the plan names (one UPDATE per changed object, INSERTs for created ones).

What each change does:

- webhook create: a new ``wh_`` UID; it captures its secret's current version (docs/reconcile.md, "Secret
rotation").
- webhook update: every definition field, the definition path and digest are rewritten, and the secret
  version is re-captured (a plain rotation is itself an update, shown as ``secret_version``).
- webhook delete: soft delete (``deleted_at``) so the UID is never reused and ingress answers 404.
- automation create/update: its routing rows (:class:`AutomationWebhook`) are rebuilt from its triggers;
  webhook names (``filter.webhooks``) resolve to the UIDs the store holds or this apply just minted
  (webhooks are written first), and the stored triggers carry them as ``filter.resolved_webhook_ids``.
- automation and environment delete: the row (and its routing rows) is removed.
- schedule create/update: the file's fields (``config`` as ``agent_config``); ``next_fire_at`` only on
  create and when cron, time zone or ``enabled`` change (:mod:`reconciler.schedules`). Delete removes
  the row and, by cascade, its fires. The automation it names is stored by name: the scheduler
  resolves it when the schedule fires.
- notification create/update: the file's fields (``events`` and ``filter`` canonical); the sender's
  columns (``failing``, ``consecutive_failures``, ``failing_since``, ``last_success_at``) are never
  written (:mod:`reconciler.notifications`). Delete removes the row and, by cascade, its messages.
- replace (rename): a delete of the old name plus a create of the new one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler import notifications, schedules
from reconciler.errors import ReconcileError
from reconciler.plan import Change, Plan, StoredObject, StoreState, factory_fields
from reconciler.specs import (
    KNOWN_AFTER_APPLY,
    AutomationSpec,
    EnvironmentSpec,
    FactoryDefinition,
    NotificationSpec,
    ScheduleSpec,
    WebhookSpec,
    digest,
)
from store import ids
from store.models import (
    Automation,
    AutomationWebhook,
    Environment,
    Factory,
    NotificationEndpoint,
    Schedule,
    Secret,
    Webhook,
)

MANAGED_BY = "definitions"


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_S = TypeVar("_S", bound=_Named)


# Columns compared with each spec's ``fields()`` (same names). Reads are plain column tuples, not ORM
# objects: a no-op plan of a large factory builds no ORM state at all.
WEBHOOK_FIELDS = (
    Webhook.auth_mode,
    Webhook.signature_scheme,
    Webhook.secret_name,
    Webhook.delivery_id_header,
    Webhook.enabled,
    Webhook.description,
)
AUTOMATION_FIELDS = (
    Automation.enabled,
    Automation.agent,
    Automation.title,
    Automation.config,
    Automation.prompt,
    Automation.triggers,
)


def _objects(rows: Any, fields: tuple[Any, ...], *, captured: bool = False) -> dict[str, StoredObject]:
    out = {}
    for row in rows:
        m = row._mapping
        values = {c.key: m[c.key] for c in fields}
        version = m["secret_version"] if captured else None
        out[m["name"]] = StoredObject(m["uid"], m["name"], values, m["spec_digest"], version)
    return out


async def find_factory(session: AsyncSession, team_id: str, name: str) -> Factory | None:
    stmt = select(Factory).where(Factory.team_id == team_id, Factory.name == name)
    return (await session.execute(stmt)).scalar_one_or_none()


async def read_state(session: AsyncSession, team_id: str | None, factory_name: str) -> StoreState:
    """Everything a plan compares against, in seven queries; ``team_id`` None (no such team) is empty."""
    if team_id is None:
        return StoreState()
    secrets_stmt = select(Secret.name, Secret.current_version).where(Secret.team_id == team_id)
    secrets: dict[str, int] = {name: version for name, version in await session.execute(secrets_stmt)}
    envs_stmt = select(
        Environment.uid, Environment.name, Environment.factory_uid, Environment.spec, Environment.spec_digest
    ).where(Environment.team_id == team_id)
    envs = (await session.execute(envs_stmt)).all()
    factory_stmt = select(
        Factory.uid,
        Factory.description,
        Factory.worker_host,
        Factory.agents,
        Factory.spec_digest,
        Factory.managed_by,
    ).where(Factory.team_id == team_id, Factory.name == factory_name)
    factory = (await session.execute(factory_stmt)).one_or_none()
    uid = factory.uid if factory is not None else None
    taken = {
        e.name: f"factory {e.factory_uid}" if e.factory_uid else "the API"
        for e in envs
        if e.factory_uid != uid
    }
    if factory is None:
        return StoreState(secret_versions=secrets, taken_environments=taken)
    hooks = await session.execute(
        select(Webhook.uid, Webhook.name, Webhook.spec_digest, Webhook.secret_version, *WEBHOOK_FIELDS).where(
            Webhook.factory_uid == uid, Webhook.deleted_at.is_(None)
        )
    )
    autos = await session.execute(
        select(Automation.uid, Automation.name, Automation.spec_digest, *AUTOMATION_FIELDS).where(
            Automation.factory_uid == uid
        )
    )
    fields = {
        "description": factory.description,
        "worker_host": factory.worker_host,
        "agents": factory.agents,
    }
    return StoreState(
        factory=StoredObject(factory.uid, factory_name, fields, factory.spec_digest),
        managed_by=factory.managed_by,
        webhooks=_objects(hooks, WEBHOOK_FIELDS, captured=True),
        automations=_objects(autos, AUTOMATION_FIELDS),
        environments={
            e.name: StoredObject(e.uid, e.name, {"spec": e.spec}, e.spec_digest)
            for e in envs
            if e.factory_uid == uid
        },
        schedules=await schedules.read(session, factory.uid),
        notifications=await notifications.read(session, factory.uid),
        secret_versions=secrets,
        taken_environments=taken,
    )


def routing_rows(
    automation_uid: str, spec: AutomationSpec, uids: Mapping[str, str | None] | None = None
) -> list[AutomationWebhook]:
    """The routing index of one automation: a row per (webhook trigger, selected webhook UID).

    ``uids`` maps webhook name -> UID for the names in ``filter.webhooks``; the index only ever holds
    UIDs, so every named webhook must have one by now (apply writes webhooks first).
    """
    rows: list[AutomationWebhook] = []
    for index, trigger in enumerate(spec.triggers):
        if trigger.provider != "webhook":
            continue
        resolved = trigger.resolved_webhook_ids(uids or {})
        if KNOWN_AFTER_APPLY in resolved:
            raise ReconcileError(
                f"automation {spec.name!r} names a webhook without a UID: {trigger.webhooks}"
            )
        for uid in resolved:  # de-duplicated, order kept
            rows.append(
                AutomationWebhook(
                    automation_uid=automation_uid,
                    trigger_index=index,
                    webhook_uid=uid,
                    payload_filter=trigger.payload_filter,
                )
            )
    return rows


class _Writer:
    """Writes one plan; keeps the new UIDs it mints, keyed by (kind, name)."""

    def __init__(
        self, session: AsyncSession, team_id: str, factory: Factory, state: StoreState, now: dt.datetime
    ):
        self.session = session
        self.team_id = team_id
        self.factory = factory
        self.state = state
        self.now = now
        self.assigned: dict[tuple[str, str], str] = {}
        self.routing: list[AutomationWebhook] = []  # added after the automation rows are flushed

    def _mint(self, kind: str, name: str, prefix: str) -> str:
        uid = ids.new_id(prefix)
        self.assigned[(kind, name)] = uid
        return uid

    async def _write(
        self,
        model: Any,
        change: Change,
        kind: str,
        prefix: str,
        name: str,
        values: dict[str, Any],
        **create: Any,
    ) -> str:
        """Update the stored row named by ``change`` or create a new one (minting its UID); return the UID."""
        if change.action == "update":
            assert change.uid is not None  # an update names a stored object
            await self.session.execute(update(model).where(model.uid == change.uid).values(**values))
            return change.uid
        uid = self._mint(kind, name, prefix)
        self.session.add(
            model(
                uid=uid,
                team_id=self.team_id,
                factory_uid=self.factory.uid,
                name=name,
                created_at=self.now,
                **create,
                **values,
            )
        )
        return uid

    async def _sync(
        self,
        model: Any,
        change: Change,
        prefix: str,
        spec: _S | None,
        values: Callable[[_S], dict[str, Any]],
        **create: Any,
    ) -> None:
        """One change of a kind whose stored row is simply deleted or written (environments, schedules,
        notifications): a delete or replace removes the stored row (what hangs off it goes by ``ON DELETE
        CASCADE``), then a create, replace or update writes ``values(spec)`` (:meth:`_write`)."""
        if change.action in ("delete", "replace"):
            uid = change.uid if change.action == "delete" else change.old_uid
            await self.session.execute(delete(model).where(model.uid == uid))
        if spec is None or change.action == "delete":
            return
        await self._write(model, change, change.kind, prefix, spec.name, values(spec), **create)

    async def webhook(self, change: Change, spec: WebhookSpec | None) -> None:
        if change.action in ("delete", "replace"):
            uid = change.uid if change.action == "delete" else change.old_uid
            await self.session.execute(
                update(Webhook).where(Webhook.uid == uid).values(deleted_at=self.now, updated_at=self.now)
            )
        if spec is None or change.action == "delete":
            return
        fields = spec.fields()
        values: dict[str, Any] = dict(
            fields,
            secret_version=self.state.secret_versions.get(spec.secret_name),
            definition_path=spec.path,
            spec_digest=digest(fields),
            updated_at=self.now,
        )
        await self._write(
            Webhook, change, "webhook", ids.WEBHOOK, spec.name, values, managed_by=MANAGED_BY, deleted_at=None
        )

    async def environment(self, change: Change, spec: EnvironmentSpec | None) -> None:
        def values(spec: EnvironmentSpec) -> dict[str, Any]:
            return {
                "spec": spec.spec,
                "definition_path": spec.path,
                "spec_digest": digest(spec.fields()),
                "updated_at": self.now,
            }

        await self._sync(Environment, change, ids.ENVIRONMENT, spec, values, managed_by=MANAGED_BY)

    async def schedule(self, change: Change, spec: ScheduleSpec | None) -> None:
        # A deleted schedule's fires (schedule_fires) go with it: ON DELETE CASCADE.
        def values(spec: ScheduleSpec) -> dict[str, Any]:
            return schedules.values(spec, change, self.now)

        await self._sync(Schedule, change, ids.SCHEDULE, spec, values, managed_by=MANAGED_BY)

    async def notification(self, change: Change, spec: NotificationSpec | None) -> None:
        if change.action in ("delete", "replace"):
            uid = change.uid if change.action == "delete" else change.old_uid
            # Its messages and their attempts go with it: ON DELETE CASCADE.
            await self.session.execute(delete(NotificationEndpoint).where(NotificationEndpoint.uid == uid))
        if spec is None or change.action == "delete":
            return
        values = notifications.values(spec, self.now)
        await self._write(
            NotificationEndpoint,
            change,
            "notification",
            ids.NOTIFICATION,
            spec.name,
            values,
            managed_by=MANAGED_BY,
        )

    def webhook_uids(self) -> dict[str, str | None]:
        """Webhook name -> UID: the store's, then those minted by this apply (new and renamed files)."""
        stored: dict[str, str | None] = {name: obj.uid for name, obj in self.state.webhooks.items()}
        return stored | {name: uid for (kind, name), uid in self.assigned.items() if kind == "webhook"}

    async def automation(self, change: Change, spec: AutomationSpec | None) -> None:
        stale = change.uid if change.action in ("delete", "update") else change.old_uid
        if stale is not None:
            await self.session.execute(
                delete(AutomationWebhook).where(AutomationWebhook.automation_uid == stale)
            )
        if change.action in ("delete", "replace"):
            await self.session.execute(delete(Automation).where(Automation.uid == stale))
        if spec is None or change.action == "delete":
            return
        uids = self.webhook_uids()  # webhooks precede automations in a plan (reconciler.plan.diff)
        fields = spec.fields(uids)
        values: dict[str, Any] = dict(
            fields, definition_path=spec.path, spec_digest=digest(fields), updated_at=self.now
        )
        uid = await self._write(Automation, change, "automation", ids.AUTOMATION, spec.name, values)
        self.routing += routing_rows(uid, spec, uids)


def _apply_factory_fields(row: Factory, definition: FactoryDefinition) -> None:
    fields = factory_fields(definition)
    row.description = fields["description"]
    row.worker_host = fields["worker_host"]
    row.agents = fields["agents"]
    row.spec_digest = digest(definition.factory.fields())


async def apply_plan(
    session: AsyncSession,
    team_id: str,
    definition: FactoryDefinition,
    state: StoreState,
    plan: Plan,
    *,
    now: dt.datetime,
    source: str | None = None,
) -> tuple[Factory, dict[tuple[str, str], str]]:
    """Write ``plan`` (computed from ``state``) in the caller's transaction.

    Returns the factory row (created on first apply, ``managed_by="definitions"``) and the UIDs
    minted for created objects, keyed by ``(kind, name)``; the caller records revision and conditions.
    """
    assigned: dict[tuple[str, str], str] = {}
    if state.factory is None:
        uid = ids.new_id(ids.FACTORY)
        assigned[("factory", plan.factory_name)] = uid
        factory = Factory(
            uid=uid,
            team_id=team_id,
            name=plan.factory_name,
            managed_by=MANAGED_BY,
            source=source,
            conditions=[],
            created_at=now,
            updated_at=now,
        )
        _apply_factory_fields(factory, definition)
        session.add(factory)
        await session.flush()  # the factory row before rows that reference it
    else:
        found = await session.get(Factory, state.factory.uid)
        assert found is not None
        factory = found
        if any(c.kind == "factory" for c in plan.changes):
            _apply_factory_fields(factory, definition)
        if source is not None:
            factory.source = source
    writer = _Writer(session, team_id, factory, state, now)
    # kind -> (its writer, its specs by name); the factory's own change was written above.
    kinds: dict[str, tuple[Callable[[Change, Any], Awaitable[None]], Mapping[str, Any]]] = {
        "webhook": (writer.webhook, {w.name: w for w in definition.webhooks}),
        "environment": (writer.environment, {e.name: e for e in definition.environments}),
        "automation": (writer.automation, {a.name: a for a in definition.automations}),
        "schedule": (writer.schedule, {s.name: s for s in definition.schedules}),
        "notification": (writer.notification, {n.name: n for n in definition.notifications}),
    }
    for change in plan.changes:
        if change.kind in kinds:
            write, specs = kinds[change.kind]
            await write(change, specs.get(change.name))
    if plan.has_changes:
        factory.updated_at = now
    if writer.routing:  # after their automations exist (foreign key)
        await session.flush()
        session.add_all(writer.routing)
    return factory, assigned | writer.assigned
