"""Wires a definitions source (directory or git branch) into ``serve`` as a cleanup_ctx lifecycle.

The loop (:func:`reconciler.loop.follow`) is the one error boundary; this module gives it what only the
composition root has: the store to record failures in (the factory last reconciled from the source, or
the one whose ``source`` is this label) and the app's :class:`api.context.ReconcileTrigger`, whose
``health`` lets ``/readyz`` see a loop that died or keeps failing (docs/reconcile.md, "The loop's health").
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from api.app import Lifecycle
from api.context import BOX, CLOCK, RECONCILE, SESSIONS, ReconcilerHealth
from reconciler.loadcache import LoadCache
from reconciler.loop import LoopHealth, Source, follow
from reconciler.service import ReconcileOutcome, reconcile, record_revision_failure, record_source_failure
from reconciler.sources import Snapshot
from reconciler.sources.git import GitSource
from reconciler.sources.local import DirectorySource

log = logging.getLogger("factoryctl.reconciler")


def make_source(
    *, repo: Path | None, git_url: str | None, branch: str, poll_interval: float, data_dir: Path
) -> tuple[Source, str] | None:
    """The source ``serve`` follows; raises :class:`safegit.UnsafeLocation` for a refused git URL."""
    if repo is not None:
        return DirectorySource(repo), str(repo)
    if git_url is not None:
        return GitSource(git_url, branch, data_dir, poll_interval=poll_interval), f"{git_url}@{branch}"
    return None


def reconciler_lifecycle(source: Source, label: str, team: str, *, allow_empty: bool = False) -> Lifecycle:
    """A cleanup_ctx: follow ``source`` in a background task; cancel and await it on shutdown."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        cache = LoadCache()  # re-parse only the files that changed since the last snapshot
        health = LoopHealth()
        known: dict[str, str] = {}  # the factory this source last reconciled ("name")
        trigger = app[RECONCILE]
        trigger.source, trigger.force = label, source.force.set
        trigger.health = lambda: ReconcilerHealth(health.healthy, health.reason, health.running)

        async def apply(snapshot: Snapshot) -> ReconcileOutcome:
            if snapshot.problem is not None:
                return await record_revision_failure(
                    app[SESSIONS],
                    app[CLOCK],
                    team=team,
                    source=label,
                    revision=snapshot.revision or "unknown",
                    error=snapshot.problem,
                    factory_name=known.get("name"),
                )
            return await reconcile(
                app[SESSIONS],
                app[BOX],
                app[CLOCK],
                team=team,
                root=snapshot.root,
                revision=snapshot.revision,
                allow_empty=allow_empty,
                source=label,
                cache=cache,
                follow_symlinks=snapshot.follow_symlinks,
            )

        async def report(error: str) -> None:
            await record_source_failure(
                app[SESSIONS],
                app[CLOCK],
                team=team,
                source=label,
                error=error,
                factory_name=known.get("name"),
            )

        def remember(result: ReconcileOutcome) -> None:
            if result.factory_name:
                known["name"] = result.factory_name

        def ended(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                health.running, health.last_error = False, repr(task.exception())[:500]
                log.error(json.dumps({"msg": "reconciler loop died", "error": health.last_error}))

        task = asyncio.create_task(
            follow(source, apply, stop, on_result=remember, report=report, health=health), name="reconciler"
        )
        task.add_done_callback(ended)
        yield
        stop.set()
        task.cancel()
        # A loop that died was reported by ``ended`` when it happened; shutdown must not raise it again.
        await asyncio.wait({task})

    return lifecycle
