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

from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.kinds.base import MANAGED_BY, KindStore, Writer, read_stored
from reconciler.plan import Change, StoredObject
from reconciler.registry import BY_NAME
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


async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
    """The factory's endpoints by name; API-created ones too, which the next apply prunes unless a file
    declares them (docs/reconcile.md, "Pruning")."""
    where = NotificationEndpoint.factory_uid == factory_uid
    return await read_stored(session, NotificationEndpoint, COLUMNS, where)


def values(spec: NotificationSpec, now: dt.datetime) -> dict[str, Any]:
    """The columns apply writes for a create, replace or update of ``spec``: never the sender's."""
    fields = spec.fields()
    return dict(fields, definition_path=spec.path, spec_digest=digest(fields), updated_at=now)


async def write(writer: Writer, change: Change, spec: NotificationSpec | None) -> None:
    # Its messages and their attempts go with it: ON DELETE CASCADE.
    def columns(spec: NotificationSpec) -> dict[str, Any]:
        return values(spec, writer.now)

    await writer.sync(NotificationEndpoint, change, spec, columns, managed_by=MANAGED_BY)


STORE = KindStore(BY_NAME["notification"], read, write)
