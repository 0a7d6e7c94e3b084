"""The kinds stored as written (agents, skills, runners, scorers, benchmark suites): one row each in
``factory_objects``, keyed by (factory, kind, name); ``spec`` holds the spec's compared fields.

An agent also keeps the factory's runtime map of agents (``factories.agents``: name -> the resolved run
configuration), the one place webhook ingress, schedules and ``POST /factory/{uid}/runs`` read an agent's
configuration from, in the same transaction as its row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.kinds.base import KindStore, Writer, read_stored
from reconciler.plan import Change, StoredObject
from reconciler.registry import BY_NAME, Kind
from reconciler.specs import digest
from store.models import FactoryObject


def _store(kind: Kind) -> KindStore:
    async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
        return await read_stored(
            session,
            FactoryObject,
            (FactoryObject.spec,),
            FactoryObject.factory_uid == factory_uid,
            FactoryObject.kind == kind.name,
            fields=lambda row: dict(row["spec"]),
        )

    async def write(writer: Writer, change: Change, spec: Any) -> None:
        def values(spec: Any) -> dict[str, Any]:
            fields = spec.fields()
            return {"spec": fields, "definition_path": spec.path, "spec_digest": digest(fields),
                    "updated_at": writer.now}  # fmt: skip

        await writer.sync(FactoryObject, change, spec, values, kind=kind.name)
        if kind.name == "agent":
            agents = dict(writer.factory.agents or {})
            if change.action in ("delete", "replace"):
                agents.pop(change.old_name or change.name, None)
            if spec is not None and change.action != "delete":
                agents[spec.name] = spec.config
            writer.factory.agents = agents

    return KindStore(kind, read, write)


AGENTS, SKILLS, RUNNERS, SCORERS, BENCHMARKS = (
    _store(BY_NAME[name]) for name in ("agent", "skill", "runner", "scorer", "benchmark")
)
