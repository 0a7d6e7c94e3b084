"""Wires a definitions source (directory or git branch) into ``serve`` as a cleanup_ctx lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from api.app import Lifecycle
from api.context import BOX, CLOCK, RECONCILE, SESSIONS
from reconciler.loadcache import LoadCache
from reconciler.loop import Source, follow
from reconciler.service import ReconcileOutcome, reconcile
from reconciler.sources import Snapshot
from reconciler.sources.git import GitSource
from reconciler.sources.local import DirectorySource


def make_source(
    *, repo: Path | None, git_url: str | None, branch: str, poll_interval: float, data_dir: Path
) -> tuple[Source, str] | None:
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
        trigger = app[RECONCILE]
        trigger.source, trigger.force = label, source.force.set

        async def apply(snapshot: Snapshot) -> ReconcileOutcome:
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
            )

        task = asyncio.create_task(follow(source, apply, stop), name="reconciler")
        yield
        stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return lifecycle
