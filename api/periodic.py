"""Periodic background jobs as app lifecycles: one implementation for every "every N seconds" task.

A job runs once at start-up and then every ``interval_seconds`` until the app stops; a failing
tick is logged and retried on the next one (a database that is down or full is one warning line, without a
traceback). On shutdown a sleeping job stops at once and a tick in progress may finish (up to
:data:`STOP_GRACE_SECONDS`) before the task is cancelled: a tick cancelled inside a database call leaves
a pooled connection cut off in its rollback (a traceback in the log at every restart under load). Either
way the task is awaited, so no job outlives the app (docs/architecture.md, "Rules the code keeps").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from api.problems import store_unavailable
from store.clock import stopped

Lifecycle = Callable[[web.Application], AsyncIterator[None]]
Tick = Callable[[web.Application], Awaitable[object]]
Interval = float | Callable[[web.Application], float]
STOP_GRACE_SECONDS = 5.0


def periodic(
    name: str,
    interval_seconds: Interval,
    tick: Tick,
    *,
    log: logging.Logger,
    first_delay_seconds: float = 0.0,
) -> Lifecycle:
    """A ``cleanup_ctx`` lifecycle calling ``tick(app)`` now (or after ``first_delay_seconds``: a job that
    should not compete with start-up traffic) and then every ``interval_seconds``.

    ``interval_seconds`` may be a function of the app, read before each sleep: a job whose interval is a
    setting of a live app (tests shorten it) follows a change without a restart.
    """
    if not callable(interval_seconds) and interval_seconds <= 0:
        raise ValueError("interval_seconds must be positive")

    def interval(app: web.Application) -> float:
        return interval_seconds(app) if callable(interval_seconds) else interval_seconds

    async def loop(app: web.Application, stop: asyncio.Event) -> None:
        if first_delay_seconds > 0 and await stopped(stop, first_delay_seconds):
            return
        while not stop.is_set():
            try:
                await tick(app)
            except Exception as exc:  # retried on the next tick
                reason = store_unavailable(exc)
                if reason is None:
                    log.exception("%s failed; retrying in %gs", name, interval(app))
                else:  # expected while the database is down: one line, no traceback
                    log.warning("%s: store unavailable (%s); retrying in %gs", name, reason, interval(app))
            if await stopped(stop, interval(app)):
                return

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(loop(app, stop), name=name)
        try:
            yield
        finally:
            stop.set()
            await finish(task)

    return lifecycle


async def finish(*tasks: asyncio.Task[None]) -> None:
    """Await background tasks that were told to stop; cancel those still running after
    :data:`STOP_GRACE_SECONDS`. A task should stop between database calls: cancelled inside one, it leaves a
    pooled connection cut off in its rollback (SQLAlchemy logs that with a traceback). Never raises: a task
    that failed reported it when it did (a periodic job logs each failing tick, the reconciler its loop's
    death)."""
    _, late = await asyncio.wait(tasks, timeout=STOP_GRACE_SECONDS)
    for task in late:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def rest_after(busy_since: float, minimum: float) -> None:
    """Between two batches of a bulk job (retention, incremental vacuum): sleep at least ``minimum`` and at
    least as long as the batch that started at ``busy_since`` (``time.monotonic()``) took. On SQLite each
    batch holds the one write lock, so the job takes at most half of it and ingress, claims and the
    workers' reports (another process: no in-process gate orders them) get the other half, however slow
    the machine; a pass takes longer instead."""
    await asyncio.sleep(max(minimum, time.monotonic() - busy_since))
