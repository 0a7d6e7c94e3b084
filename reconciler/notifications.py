"""Notification endpoints in the store: the rows a plan compares with ``notifications/<name>.yaml``, and
what apply writes.

An endpoint row holds the sender's state next to the file's fields: ``failing``,
``consecutive_failures``, ``failing_since`` and ``last_success_at`` (docs/notifications.md, "Retries").
Apply writes only the file's fields (and the definition path, digest and ``updated_at``); it never
writes the sender's columns, so an update keeps an endpoint's health, and a created row starts healthy
(the columns' defaults). Delete removes the row and, by cascade, its messages and their attempts.

Kept apart from the loader and the rules, which must not import the store's models: an offline
``factoryctl validate`` loads no SQLAlchemy (docs/cli.md, "Start-up").
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import RowMapping, select
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.plan import StoredObject
from reconciler.specs import NotificationSpec, digest
from store.models import NotificationEndpoint

# The compared columns, named as :meth:`NotificationSpec.fields` names them.
COLUMNS = (
    NotificationEndpoint.url,
    NotificationEndpoint.secret_name,
    NotificationEndpoint.events,
    NotificationEndpoint.filter,
    NotificationEndpoint.enabled,
    NotificationEndpoint.description,
)


def stored_fields(row: RowMapping) -> dict[str, Any]:
    """A row's compared columns under the names of :meth:`NotificationSpec.fields`."""
    return {column.key: row[column.key] for column in COLUMNS}


async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
    """The factory's endpoints by name, in one query (no ORM objects); API-created ones too, which the
    next apply prunes unless a file declares them (docs/reconcile.md, "Pruning")."""
    stmt = select(
        NotificationEndpoint.uid, NotificationEndpoint.name, NotificationEndpoint.spec_digest, *COLUMNS
    ).where(NotificationEndpoint.factory_uid == factory_uid)
    out = {}
    for row in await session.execute(stmt):
        m = row._mapping
        out[m["name"]] = StoredObject(m["uid"], m["name"], stored_fields(m), m["spec_digest"])
    return out


def values(spec: NotificationSpec, now: dt.datetime) -> dict[str, Any]:
    """The columns apply writes for a create, replace or update of ``spec``: never the sender's."""
    fields = spec.fields()
    return dict(fields, definition_path=spec.path, spec_digest=digest(fields), updated_at=now)
