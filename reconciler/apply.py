"""Apply: read what the store holds for a factory, and write a plan into it.

Both functions take the caller's session and never commit: :func:`reconciler.service.reconcile`
runs read, checks, plan and apply in one transaction, so an apply is all or nothing.

Reading is a fixed number of queries per factory (factory, secrets, the team's environment names, then
one per kind of the registry), whatever its size, and builds no ORM objects; writing touches only the
rows the plan names (one UPDATE per changed object, INSERTs for created ones).

What each change does is the business of its kind's store module (:mod:`reconciler.kinds`: webhooks,
automations, environments, schedules, notifications, and :mod:`reconciler.kinds.objects` for agents,
skills, runners, scorers and benchmark suites); the factory row itself is written here, first.
A replace (rename) is a delete of the old name plus a create of the new one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.kinds import environments
from reconciler.kinds.base import MANAGED_BY, Writer
from reconciler.kinds.stores import STORES
from reconciler.plan import Plan, StoredObject, StoreState, factory_fields
from reconciler.registry import FACTORY, KINDS
from reconciler.specs import FactoryDefinition, digest
from store import ids
from store.models import Factory, Secret

__all__ = ["MANAGED_BY", "apply_plan", "find_factory", "read_state"]  # MANAGED_BY: the factory's too


async def find_factory(session: AsyncSession, team_id: str, name: str) -> Factory | None:
    stmt = select(Factory).where(Factory.team_id == team_id, Factory.name == name)
    return (await session.execute(stmt)).scalar_one_or_none()


async def read_state(session: AsyncSession, team_id: str | None, factory_name: str) -> StoreState:
    """Everything a plan compares against, in a fixed number of queries; ``team_id`` None (no such team)
    is empty."""
    if team_id is None:
        return StoreState()
    secrets_stmt = select(Secret.name, Secret.current_version).where(Secret.team_id == team_id)
    secrets: dict[str, int] = {name: version for name, version in await session.execute(secrets_stmt)}
    factory_stmt = select(
        Factory.uid,
        Factory.description,
        Factory.worker_host,
        Factory.alias,
        Factory.repositories,
        Factory.settings,
        Factory.spec_digest,
        Factory.managed_by,
    ).where(Factory.team_id == team_id, Factory.name == factory_name)
    factory = (await session.execute(factory_stmt)).one_or_none()
    taken = await environments.taken(session, team_id, factory.uid if factory is not None else None)
    if factory is None:
        return StoreState(secret_versions=secrets, taken_environments=taken)
    fields = {
        "description": factory.description,
        "worker_host": factory.worker_host,
        "alias": factory.alias,
        "repositories": factory.repositories,
        "settings": factory.settings,
    }
    return StoreState(
        factory=StoredObject(factory.uid, factory_name, fields, factory.spec_digest),
        managed_by=factory.managed_by,
        stored={kind.name: await STORES[kind.name].read(session, factory.uid) for kind in KINDS},
        secret_versions=secrets,
        taken_environments=taken,
    )


def _apply_factory_fields(row: Factory, definition: FactoryDefinition) -> None:
    fields = factory_fields(definition)
    row.description = fields["description"]
    row.worker_host = fields["worker_host"]
    row.alias = fields["alias"]
    row.repositories = fields["repositories"]
    row.settings = fields["settings"]
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
        uid = ids.new_id(FACTORY.prefix)
        assigned[(FACTORY.name, plan.factory_name)] = uid
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
        if any(c.kind == FACTORY.name for c in plan.changes):
            _apply_factory_fields(factory, definition)
        if source is not None:
            factory.source = source
    writer = Writer(session, team_id, factory, state, now)
    # kind -> its specs by name; the factory's own change was written above.
    specs: dict[str, dict[str, Any]] = {
        kind.name: {spec.name: spec for spec in kind.specs(definition)} for kind in KINDS
    }
    for change in plan.changes:
        if change.kind in STORES:
            await STORES[change.kind].write(writer, change, specs[change.kind].get(change.name))
    if plan.has_changes:
        factory.updated_at = now
    if writer.routing:  # after their automations exist (foreign key)
        await session.flush()
        session.add_all(writer.routing)
    return factory, assigned | writer.assigned
