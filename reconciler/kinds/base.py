"""What every kind's store module builds on: the apply-time :class:`Writer` and stored-row reading.

A kind's store module (docs/architecture.md, "Adding a definition kind") gives a :class:`KindStore`:
``read`` returns the factory's live objects of that kind by name, as the plan compares them, and
``write`` writes one planned change through the :class:`Writer`, which mints UIDs with the kind's
prefix (:mod:`reconciler.registry`) and keeps them for the plan shown after apply.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import RowMapping, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.plan import UID_PREFIX, Change, StoredObject, StoreState
from reconciler.registry import Kind
from store import ids
from store.models import AutomationWebhook, Factory

MANAGED_BY = "definitions"


async def read_stored(
    session: AsyncSession,
    model: Any,
    columns: tuple[Any, ...],
    *where: Any,
    fields: Callable[[RowMapping], dict[str, Any]] | None = None,
    captured: bool = False,
) -> dict[str, StoredObject]:
    """A factory's rows of ``model`` matching ``where``, by name, in one query that builds no ORM object
    (a no-op plan of a large factory builds no ORM state at all). ``columns`` are the compared ones;
    ``fields`` names them as the spec's ``fields()`` does (default: by column name); ``captured`` reads
    the secret version the row captured."""
    extra = (model.secret_version,) if captured else ()
    stmt = select(model.uid, model.name, model.spec_digest, *extra, *columns).where(*where)
    out = {}
    for row in await session.execute(stmt):
        m = row._mapping
        values = fields(m) if fields else {c.key: m[c.key] for c in columns}
        version = m["secret_version"] if captured else None
        out[m["name"]] = StoredObject(m["uid"], m["name"], values, m["spec_digest"], version)
    return out


class Writer:
    """Writes one plan's changes; keeps the new UIDs it mints, keyed by (kind, name)."""

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

    async def write(
        self, model: Any, change: Change, name: str, values: dict[str, Any], **create: Any
    ) -> str:
        """Update the stored row named by ``change`` or create a new one (minting its UID); return the UID."""
        if change.action == "update":
            assert change.uid is not None  # an update names a stored object
            await self.session.execute(update(model).where(model.uid == change.uid).values(**values))
            return change.uid
        uid = ids.new_id(UID_PREFIX[change.kind])
        self.assigned[(change.kind, name)] = uid
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

    async def sync(
        self, model: Any, change: Change, spec: Any, values: Callable[[Any], dict[str, Any]], **create: Any
    ) -> None:
        """One change of a kind whose stored row is simply deleted or written: a delete or replace removes
        the stored row (what hangs off it goes by ``ON DELETE CASCADE``), then a create, replace or update
        writes ``values(spec)`` (:meth:`write`)."""
        if change.action in ("delete", "replace"):
            uid = change.uid if change.action == "delete" else change.old_uid
            await self.session.execute(delete(model).where(model.uid == uid))
        if spec is None or change.action == "delete":
            return
        await self.write(model, change, spec.name, values(spec), **create)

    def webhook_uids(self) -> dict[str, str | None]:
        """Webhook name -> UID: the store's, then those minted by this apply (new and renamed files)."""
        stored: dict[str, str | None] = {name: obj.uid for name, obj in self.state.objects("webhook").items()}
        return stored | {name: uid for (kind, name), uid in self.assigned.items() if kind == "webhook"}


@dataclass(frozen=True)
class KindStore:
    """A kind's store side: read the factory's stored objects, write one planned change (``spec`` is
    None for a delete)."""

    kind: Kind
    read: Callable[[AsyncSession, str], Awaitable[dict[str, StoredObject]]]
    write: Callable[[Writer, Change, Any], Awaitable[None]]
