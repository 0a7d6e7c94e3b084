"""The GitOps loop: follow a source and reconcile every snapshot it yields.

A snapshot that fails validation leaves the last good state live: the failure is logged with
file:line diagnostics and recorded on the factory (Ready=False). An unexpected error (the
database going away) is logged and the same snapshot is retried with capped backoff, so a
database outage never turns into a crash loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from reconciler.service import ReconcileOutcome
from reconciler.sources import Snapshot

log = logging.getLogger("factoryctl.reconciler")

ReconcileFn = Callable[[Snapshot], Awaitable[ReconcileOutcome]]


class Source(Protocol):
    force: asyncio.Event

    def snapshots(self, stop: asyncio.Event) -> AsyncIterator[Snapshot]: ...


def _log_outcome(snapshot: Snapshot, result: ReconcileOutcome) -> None:
    record: dict[str, object] = {
        "msg": "reconcile",
        "outcome": result.outcome,
        "factory": result.factory_name,
        "factory_uid": result.factory_uid,
        "revision": result.revision,
        "duration_ms": result.duration_ms,
        "forced": snapshot.forced,
    }
    if result.plan is not None and result.plan.has_changes:
        record["summary"] = result.plan.summary()
    if result.ok:
        log.info(json.dumps(record))
        return
    record["errors"] = [str(d) for d in result.diagnostics] or [result.error or "apply failed"]
    log.error(json.dumps(record))


async def follow(
    source: Source,
    reconcile: ReconcileFn,
    stop: asyncio.Event,
    *,
    on_result: Callable[[ReconcileOutcome], None] | None = None,
    max_backoff: float = 30.0,
) -> None:
    """Reconcile each snapshot until ``stop`` is set."""
    async for snapshot in source.snapshots(stop):
        delay = 0.5
        while not stop.is_set():
            try:
                result = await reconcile(snapshot)
            except Exception as exc:
                log.error(
                    json.dumps(
                        {"msg": "reconcile error; retrying", "error": repr(exc)[:500], "retry_in": delay}
                    )
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                delay = min(delay * 2, max_backoff)
                continue
            _log_outcome(snapshot, result)
            if on_result is not None:
                on_result(result)
            break
        if stop.is_set():
            return
