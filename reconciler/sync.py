"""Sync checks of a followed source (docs/reconcile.md, "Sync status", "Self-heal").

:func:`check` plans the source's current snapshot against the store (the planner ``plan`` uses, so a
drift is exactly what the next apply would change) and records the result on the factory as its ``sync``
record, renewing the ``serve``'s manager claim in the same small transaction. ``serve`` calls it every
sync interval; it decides on self-heal from the answer (:mod:`factoryctl.serve.reconcile`).
:func:`release` drops the claim when ``serve`` stops, so ``factoryctl apply`` is accepted again at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from reconciler.apply import MANAGED_BY, find_factory
from reconciler.loadcache import LoadCache
from reconciler.service import first_error, reconcile
from reconciler.sources import Snapshot
from reconciler.syncstate import OUT_OF_SYNC, SYNCED, UNKNOWN, Manager, drift_of, status, with_heal
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Factory, Team


@dataclass(frozen=True)
class Checked:
    """The record written, and the factory it was written on."""

    factory_name: str
    record: dict[str, Any]

    @property
    def out_of_sync(self) -> bool:
        return bool(self.record["status"] == OUT_OF_SYNC)

    @property
    def drift(self) -> list[dict[str, Any]]:
        return list(self.record["drift"])


async def _factory(session: AsyncSession, team: str, name: str) -> Factory | None:
    team_id = (await session.execute(select(Team.id).where(Team.name == team))).scalar_one_or_none()
    row = await find_factory(session, team_id, name) if team_id else None
    return row if row is not None and row.managed_by == MANAGED_BY else None


async def check(
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    clock: Clock,
    *,
    team: str,
    snapshot: Snapshot,
    source: str,
    factory_name: str | None,
    manager: Manager | None = None,
    cache: LoadCache | None = None,
    allow_empty: bool = False,
) -> Checked | None:
    """Compare ``snapshot`` with the store and record it; None when there is no factory to record it on."""
    planned = await reconcile(
        sessions,
        box,
        clock,
        team=team,
        root=snapshot.root,
        revision=snapshot.revision,
        allow_empty=allow_empty,
        dry_run=True,
        source=source,
        cache=cache,
        follow_symlinks=snapshot.follow_symlinks,
    )
    name = planned.factory_name or factory_name
    if not name:
        return None
    async with sessions() as session, session.begin():
        factory = await _factory(session, team, name)
        if factory is None:
            return None
        now = clock.now()
        previous = factory.sync
        if planned.plan is None:
            why = f"the source cannot be planned: {first_error(planned.diagnostics, planned.error)}"
            record = status(UNKNOWN, planned.revision, now, message=why, previous=previous)
        elif planned.plan.has_changes:
            drift = drift_of(planned.plan)
            record = status(OUT_OF_SYNC, planned.revision, now, drift=drift, previous=previous)
        else:
            record = status(SYNCED, planned.revision, now, previous=previous)
        factory.sync = record
        if manager is not None:
            factory.manager = manager.record(now)
    return Checked(name, record)


async def record_heal(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    *,
    team: str,
    factory_name: str,
    drift: list[dict[str, Any]],
) -> None:
    """Note on the factory's ``sync`` record that a self-heal re-applied its source over ``drift``."""
    async with sessions() as session, session.begin():
        factory = await _factory(session, team, factory_name)
        if factory is not None and factory.sync:
            factory.sync = with_heal(dict(factory.sync), drift, clock.now())


async def release(
    sessions: async_sessionmaker[AsyncSession], *, team: str, factory_name: str, manager: Manager
) -> None:
    """Drop ``manager``'s claim on the factory (a claim of another source is left alone)."""
    async with sessions() as session, session.begin():
        factory = await _factory(session, team, factory_name)
        if factory is not None and manager.same(factory.manager):
            factory.manager = None
