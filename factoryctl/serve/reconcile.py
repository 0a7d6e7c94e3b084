"""Wires a definitions source (directory or git branch) into ``serve`` as a cleanup_ctx lifecycle.

The loop (:func:`reconciler.loop.follow`) is the one error boundary; this module gives it what only the
composition root has: the store to record failures in (the factory last reconciled from the source, or
the one whose ``source`` is this label) and the app's :class:`api.context.ReconcileTrigger`, whose
``health`` lets ``/readyz`` see a loop that died or keeps failing (docs/reconcile.md, "The loop's health").

Beside the loop runs the sync check (docs/reconcile.md, "Sync status", "Self-heal"): every sync interval
(the git poll interval; 30 s for a directory) the last snapshot is planned against the store
(:func:`reconciler.sync.check`), which also renews this ``serve``'s claim as the factory's manager. On drift,
self-heal forces the loop to re-apply the source. Check and apply share one lock, so a check never plans
against an apply in progress.
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
from api.periodic import finish
from reconciler.loadcache import LoadCache
from reconciler.loop import LoopHealth, Source, follow
from reconciler.service import ReconcileOutcome, reconcile, record_revision_failure, record_source_failure
from reconciler.sources import Snapshot
from reconciler.sources.git import GitSource
from reconciler.sources.local import DirectorySource
from reconciler.sync import check, record_heal, release
from reconciler.syncstate import Manager
from store.clock import stopped

log = logging.getLogger("factoryctl.reconciler")
DEFAULT_SYNC_INTERVAL = 30.0


def manager_of(source: Source, label: str, interval: float) -> Manager:
    """This serve as a factory's manager; its claim outlives three missed checks (docs/reconcile.md,
    "Who manages a factory"). A git location is shown without credentials."""
    ttl = 3 * interval + 30.0
    if isinstance(source, GitSource):
        return Manager("git", f"{source.shown}@{source.branch}", ttl)
    return Manager("directory", label, ttl)


def make_source(
    *, repo: Path | None, git_url: str | None, branch: str, poll_interval: float, data_dir: Path
) -> tuple[Source, str] | None:
    """The source ``serve`` follows; raises :class:`safegit.UnsafeLocation` for a refused git URL."""
    if repo is not None:
        return DirectorySource(repo), str(repo)
    if git_url is not None:
        return GitSource(git_url, branch, data_dir, poll_interval=poll_interval), f"{git_url}@{branch}"
    return None


def reconciler_lifecycle(
    source: Source,
    label: str,
    team: str,
    *,
    allow_empty: bool = False,
    self_heal: bool = True,
    sync_interval: float | None = None,
) -> Lifecycle:
    """A cleanup_ctx: follow ``source`` and check its sync in background tasks; stop them on shutdown and
    drop the manager claim. ``self_heal`` False only reports drift (``serve --no-self-heal``)."""
    interval = sync_interval or float(getattr(source, "poll_interval", DEFAULT_SYNC_INTERVAL))
    manager = manager_of(source, label, interval)
    label = manager.location  # what is stored and answered: a git URL's credentials hidden

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        cache = LoadCache()  # re-parse only the files that changed since the last snapshot
        health = LoopHealth()
        known: dict[str, str] = {}  # the factory this source last reconciled ("name")
        last: dict[str, Snapshot] = {}  # the last snapshot the loop could read ("snapshot")
        healing: dict[str, list[dict[str, object]]] = {}  # drift a forced re-apply is to correct
        lock = asyncio.Lock()
        trigger = app[RECONCILE]
        trigger.source, trigger.force = label, source.force.set
        trigger.health = lambda: ReconcilerHealth(health.healthy, health.reason, health.running)

        async def apply(snapshot: Snapshot) -> ReconcileOutcome:
            async with lock:
                result = await apply_unlocked(snapshot)
            if snapshot.problem is None and result.reason != "ManagedElsewhere":
                last["snapshot"] = snapshot  # what the sync check compares the store with
            drift = healing.pop("drift", None)
            if result.ok and result.factory_name and drift is not None:
                log.info(json.dumps({"msg": "self-healed", "factory": result.factory_name, "drift": drift}))
                try:
                    await record_heal(
                        app[SESSIONS], app[CLOCK], team=team, factory_name=result.factory_name, drift=drift
                    )
                except Exception as exc:  # a note only: the apply itself succeeded and must not be retried
                    log.error(json.dumps({"msg": "cannot record the self-heal", "error": repr(exc)[:500]}))
            return result

        async def apply_unlocked(snapshot: Snapshot) -> ReconcileOutcome:
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
                commit=snapshot.commit,
                manager=manager,
            )

        async def check_once() -> None:
            snapshot = last.get("snapshot")
            if snapshot is None:
                return
            async with lock:
                checked = await check(
                    app[SESSIONS],
                    app[BOX],
                    app[CLOCK],
                    team=team,
                    snapshot=snapshot,
                    source=label,
                    factory_name=known.get("name"),
                    manager=manager,
                    cache=cache,
                    allow_empty=allow_empty,
                )
            if checked is None or not checked.out_of_sync:
                return
            heal = self_heal and "drift" not in healing
            record = {
                "msg": "out of sync",
                "factory": checked.factory_name,
                "drift": checked.drift,
                "self_heal": heal,
            }
            log.warning(json.dumps(record))
            if heal:
                healing["drift"] = checked.drift
                source.force.set()

        async def watch_sync() -> None:
            while not await stopped(stop, interval):
                try:
                    await check_once()
                except Exception as exc:  # the next interval tries again; the loop is unaffected
                    log.error(json.dumps({"msg": "sync check failed", "error": repr(exc)[:500]}))

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
        syncing = asyncio.create_task(watch_sync(), name="sync-check")
        yield
        stop.set()
        # Both stop between database calls; one still busy after the grace period (a slow git fetch) is
        # cancelled. A loop that died was reported by ``ended`` when it happened: not raised again here.
        await finish(task, syncing)
        if known.get("name"):
            try:
                await release(app[SESSIONS], team=team, factory_name=known["name"], manager=manager)
            except (
                Exception
            ) as exc:  # the claim lapses by itself (docs/reconcile.md, "Who manages a factory")
                log.error(json.dumps({"msg": "cannot release the manager claim", "error": repr(exc)[:500]}))

    return lifecycle
