"""Environments in the store: the rows a plan compares with ``environments/<name>.yaml``, what apply
writes, and which names other factories (or the API) hold already.

An environment's name is unique in its team (docs/definitions.md, "Environments"): a name another
factory or the API owns is reported before anything is applied. Delete removes the row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.kinds.base import MANAGED_BY, KindStore, Writer, read_stored
from reconciler.plan import Change, StoredObject
from reconciler.registry import BY_NAME
from reconciler.specs import EnvironmentSpec, digest
from store.models import Environment


async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
    """The factory's environments by name."""
    return await read_stored(
        session, Environment, (Environment.spec,), Environment.factory_uid == factory_uid
    )


async def taken(session: AsyncSession, team_id: str, factory_uid: str | None) -> dict[str, str]:
    """Environment name -> its owner, for the team's environments this factory does not own."""
    stmt = select(Environment.name, Environment.factory_uid).where(Environment.team_id == team_id)
    return {
        name: f"factory {owner}" if owner else "the API"
        for name, owner in await session.execute(stmt)
        if owner != factory_uid
    }


async def write(writer: Writer, change: Change, spec: EnvironmentSpec | None) -> None:
    def values(spec: EnvironmentSpec) -> dict[str, Any]:
        return {
            "spec": spec.spec,
            "definition_path": spec.path,
            "spec_digest": digest(spec.fields()),
            "updated_at": writer.now,
        }

    await writer.sync(Environment, change, spec, values, managed_by=MANAGED_BY)


STORE = KindStore(BY_NAME["environment"], read, write)
