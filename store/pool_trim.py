"""Give a quiet pool's connections back: descriptors and threads return to their idle count after load.

SQLAlchemy's queue pool keeps every connection it ever opened (up to its size, 20) until the process
stops: after one burst of load a SQLite store kept 15 more connections, each with a thread (aiosqlite) and
three descriptors (database, WAL, shared memory), and PostgreSQL 10 more sockets (docs/benchmarks.md,
"Sustained load"). :func:`trim_when_quiet` disposes of the pool once no connection has been checked out
for ``quiet_seconds``: a fresh empty pool takes the engine's next checkout and the old pool's connections
close (it is trimmed only while none is checked out). The next request after
a quiet minute pays one connect (a file open for SQLite, a TCP connect and authentication for PostgreSQL).

A pool that is not a queue pool (an in-memory SQLite database's single static connection, which *is* the
database) is never trimmed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool
from sqlalchemy.util import greenlet_spawn

QUIET_SECONDS = 60.0


class PoolUse:
    """When a connection of ``engine`` was last checked out or returned (engine-level pool events, so
    they keep firing for the fresh pool a dispose installs)."""

    def __init__(self, engine: AsyncEngine, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last = clock()
        sync = engine.sync_engine
        event.listen(sync, "checkout", self._touch)
        event.listen(sync, "checkin", self._touch)

    def _touch(self, *_args: Any) -> None:
        self.last = self.clock()


def trimmable(engine: AsyncEngine) -> bool:
    return isinstance(engine.sync_engine.pool, QueuePool)


async def trim_when_quiet(
    engine: AsyncEngine,
    *,
    quiet_seconds: float = QUIET_SECONDS,
    check_seconds: float | None = None,
    use: PoolUse | None = None,
    on_trim: Callable[[], None] = lambda: None,
) -> None:
    """Run until cancelled: dispose of ``engine``'s pool whenever it has connections, none checked out,
    and none was used for ``quiet_seconds``."""
    if not trimmable(engine):
        return
    use = use or PoolUse(engine)
    step = check_seconds if check_seconds is not None else max(0.05, quiet_seconds / 4)
    while True:
        await asyncio.sleep(step)
        pool = engine.sync_engine.pool
        if not isinstance(pool, QueuePool) or pool.checkedout() or not pool.checkedin():
            continue
        if use.clock() - use.last >= quiet_seconds:
            # A fresh pool first (no await before it, so no checkout can slip in between), then the old
            # pool's idle connections close: a checkout during the closing opens a connection in the new
            # pool, never one in the pool being emptied.
            await engine.dispose(close=False)
            await greenlet_spawn(pool.dispose)
            on_trim()
