"""What a factory's ``sync`` and ``manager`` records hold (docs/reconcile.md, "Sync status", "Who manages a
factory").

``sync`` compares the store with what the factory's source would apply, as Argo CD and Flux show it:
``Synced`` (a plan of the source against the store is empty), ``OutOfSync`` (it is not: the drift lists
each object that differs and the names of its differing fields — never values, so no secret can show),
``Unknown`` (the source cannot be planned, or an apply from elsewhere replaced what it applied).

``manager`` names the ``serve`` that follows the factory's source, with the time its claim lapses unless
renewed: a crashed ``serve`` stops blocking ``factoryctl apply`` by itself. The records are plain JSON
written by :mod:`reconciler.service` and :mod:`reconciler.sync`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from reconciler.errors import ReconcileError
from reconciler.plan import Plan
from store.clock import rfc3339

SYNCED = "Synced"
OUT_OF_SYNC = "OutOfSync"
UNKNOWN = "Unknown"
MAX_DRIFT = 200  # objects listed; the count says how many differ in all


class ManagedElsewhere(ReconcileError):
    """An apply to a factory that a running ``serve`` manages, without ``--force``."""


def drift_of(plan: Plan) -> list[dict[str, Any]]:
    """Each object the store holds differently from the source: action, kind, name, field names."""
    out = []
    for change in plan.changes[:MAX_DRIFT]:
        item: dict[str, Any] = {
            "action": change.action,
            "kind": change.kind,
            "name": change.name,
            "uid": change.uid,
            "fields": list(change.fields),
        }
        if change.action == "replace":
            item["old_name"] = change.old_name
        out.append(item)
    return out


def status(
    state: str,
    revision: str | None,
    now: dt.datetime,
    *,
    drift: list[dict[str, Any]] | None = None,
    message: str = "",
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``sync`` record; the last self-heal of ``previous`` is kept (it is history, not state)."""
    out: dict[str, Any] = {
        "status": state,
        "revision": revision,
        "drift": drift or [],
        "checked_at": rfc3339(now),
        "message": message,
    }
    if previous and previous.get("last_heal"):
        out["last_heal"] = previous["last_heal"]
    return out


def with_heal(record: dict[str, Any], drift: list[dict[str, Any]], now: dt.datetime) -> dict[str, Any]:
    """``record`` noting that a self-heal just re-applied the source over ``drift``."""
    return record | {"last_heal": {"at": rfc3339(now), "drift": drift}}


@dataclass(frozen=True)
class Manager:
    """A ``serve`` following a source: ``kind`` is ``git`` or ``directory``, ``location`` what it follows
    (``URL@branch``, credentials hidden, or the directory)."""

    kind: str
    location: str
    ttl_seconds: float

    def record(self, now: dt.datetime) -> dict[str, Any]:
        expires = now + dt.timedelta(seconds=self.ttl_seconds)
        return {
            "kind": self.kind,
            "location": self.location,
            "seen_at": rfc3339(now),
            "expires_at": rfc3339(expires),
        }

    def same(self, record: dict[str, Any] | None) -> bool:
        return bool(record) and (record or {}).get("location") == self.location


def active(record: dict[str, Any] | None, now: dt.datetime) -> dict[str, Any] | None:
    """``record`` while its claim holds (not lapsed), else None."""
    if not isinstance(record, dict):
        return None
    try:
        expires = dt.datetime.fromisoformat(str(record.get("expires_at")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return record if expires > now else None


def describe(record: dict[str, Any]) -> str:
    """``serve following git https://…@main`` — who manages a factory, for messages."""
    return f"serve following {record.get('kind', 'a source')} {record.get('location', '?')}"


def refusal(factory: str, uid: str, record: dict[str, Any]) -> ManagedElsewhere:
    return ManagedElsewhere(
        f"factory {factory!r} ({uid}) is managed by {describe(record)}: it would revert this apply;"
        " change the source instead, or pass --force to apply anyway"
    )
