"""Periodic background jobs as app lifecycles: one implementation for every "every N seconds" task.

A job runs once at start-up and then every ``interval_seconds`` until the app stops; a failing
tick is logged and retried on the next one (a database that is down or full is one warning line, without a
traceback), and on shutdown
the task is cancelled and awaited, so no job outlives the app (docs/architecture.md, "Rules the
code keeps").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from api.problems import store_unavailable

Lifecycle = Callable[[web.Application], AsyncIterator[None]]
Tick = Callable[[web.Application], Awaitable[object]]
Interval = float | Callable[[web.Application], float]


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

    async def loop(app: web.Application) -> None:
        if first_delay_seconds > 0:
            await asyncio.sleep(first_delay_seconds)
        while True:
            try:
                await tick(app)
            except Exception as exc:  # retried on the next tick
                reason = store_unavailable(exc)
                if reason is None:
                    log.exception("%s failed; retrying in %gs", name, interval(app))
                else:  # expected while the database is down: one line, no traceback
                    log.warning("%s: store unavailable (%s); retrying in %gs", name, reason, interval(app))
            await asyncio.sleep(interval(app))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(loop(app), name=name)
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifecycle
