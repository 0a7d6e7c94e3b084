"""Each definition kind's store side, by kind name: the one list of :mod:`reconciler.kinds` modules.

The registry (:mod:`reconciler.registry`) stays free of SQLAlchemy for the offline validation path, so
the modules that read and write rows are listed here; ``tests/unit/reconciler/test_registry.py`` fails
when a kind of the registry has no store module.
"""

from __future__ import annotations

from reconciler.kinds import automations, environments, notifications, objects, schedules, webhooks
from reconciler.kinds.base import KindStore

STORES: dict[str, KindStore] = {
    store.kind.name: store
    for store in (
        webhooks.STORE,
        automations.STORE,
        environments.STORE,
        schedules.STORE,
        notifications.STORE,
        objects.AGENTS,
        objects.SKILLS,
        objects.RUNNERS,
        objects.SCORERS,
        objects.BENCHMARKS,
    )
}
