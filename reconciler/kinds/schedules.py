"""Schedules in the store: the rows a plan compares with ``schedules/<name>.yaml``, and what apply writes.

A schedule row holds the scheduler's state next to the file's fields: ``next_fire_at`` (the scheduler
selects due schedules on it and moves it on after each fire), ``last_fired_at``, ``last_spawn_error``.
Apply writes the file's fields and touches ``next_fire_at`` only when the timing changes
(docs/definitions.md, "Schedules"):

- create, or an update of ``cron``, ``timezone`` or ``enabled``: the first fire after the apply
  (None while disabled, or when the expression never fires);
- any other update (``prompt``, ``config``, ``automation``): kept, so an edit neither moves the next
  fire nor fires again a time that has fired already.

The automation a schedule names is stored by name: the scheduler resolves it when the schedule fires.
Delete removes the row and, by cascade, its fires. Kept apart from the loader and the rules, which must
not import the store's models: an offline ``factoryctl validate`` loads no SQLAlchemy (docs/cli.md,
"Start-up").
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.kinds.base import MANAGED_BY, KindStore, Writer, read_stored
from reconciler.plan import Change, StoredObject
from reconciler.registry import BY_NAME
from reconciler.specs import ScheduleSpec, digest
from store.models import Schedule
from store.rules import cron

# The compared columns; ``agent_config`` is the spec's ``config``.
COLUMNS = (
    Schedule.cron,
    Schedule.timezone,
    Schedule.automation,
    Schedule.prompt,
    Schedule.agent_config,
    Schedule.enabled,
)
TIMING = frozenset({"cron", "timezone", "enabled"})  # the fields whose change recomputes next_fire_at


def stored_fields(row: RowMapping) -> dict[str, Any]:
    """A row's columns under the names of :meth:`ScheduleSpec.fields`."""
    return {
        "cron": row["cron"],
        "timezone": row["timezone"],
        "automation": row["automation"],
        "prompt": row["prompt"],
        "config": row["agent_config"],
        "enabled": row["enabled"],
    }


async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
    """The factory's schedules by name."""
    where = Schedule.factory_uid == factory_uid
    return await read_stored(session, Schedule, COLUMNS, where, fields=stored_fields)


def next_fire_at(spec: ScheduleSpec, now: dt.datetime) -> dt.datetime | None:
    """The first fire strictly after ``now`` (aware UTC); None while disabled or if it never fires.

    The rules have checked the expression and the zone (FC070, FC071) before anything is applied.
    """
    if not spec.enabled:
        return None
    return cron.next_fire(cron.parse(spec.cron), cron.zone(spec.timezone), now)


def values(spec: ScheduleSpec, change: Change, now: dt.datetime) -> dict[str, Any]:
    """The columns apply writes for ``change`` (a create, replace or update of ``spec``)."""
    fields = spec.fields()
    out: dict[str, Any] = dict(fields, definition_path=spec.path, spec_digest=digest(fields), updated_at=now)
    out["agent_config"] = out.pop("config")
    out["inline_of"] = spec.inline_of
    if change.action != "update" or TIMING.intersection(change.fields):
        out["next_fire_at"] = next_fire_at(spec, now)
    return out


async def write(writer: Writer, change: Change, spec: ScheduleSpec | None) -> None:
    # A deleted schedule's fires (schedule_fires) go with it: ON DELETE CASCADE.
    def columns(spec: ScheduleSpec) -> dict[str, Any]:
        return values(spec, change, writer.now)

    await writer.sync(Schedule, change, spec, columns, managed_by=MANAGED_BY)


STORE = KindStore(BY_NAME["schedule"], read, write)
