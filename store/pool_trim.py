"""Give idle pooled connections back: descriptors and threads return to their idle count after load.

SQLAlchemy's queue pool keeps every connection it ever opened (up to its size, 20) until the process
stops: after one burst of load a SQLite store kept 15 more connections, each with a thread (aiosqlite) and
three descriptors (database, WAL, shared memory), and PostgreSQL 10 more sockets (docs/benchmarks.md,
"Sustained load"). :func:`trim_when_quiet` looks at the pool once a window (a minute): when it holds more
idle connections than the window's peak of concurrent use plus :data:`SPARE`, and none is checked out at
that moment, a fresh empty pool takes the engine's next checkouts and the old pool's connections close.
Background pollers (service-hosted workers peek every 0.5 s) use one or two connections, so a quiet
server keeps about that many; the next burst opens connections again.

On SQLite, closing some connections is not enough: a connection closed while another connection of the
process holds a lock on the same file (in WAL mode every open connection holds one for its whole life)
leaves its database descriptor open, parked for reuse by a later open, until the last lock of the
process on that file goes. So a trim also closes the store's connections held outside the pool
(``side``: the ingress writer and reader), and when a checkout opened a connection while the trim was
closing the others, it tries again two seconds later, until one trim closes them all at once
(docs/operations.md, "Descriptors and threads").

The job ends when ``stop`` is set, never in the middle of a trim: a connection cancelled while it closes
is left half closed (SQLAlchemy logs that with a traceback).

A pool that is not a queue pool (an in-memory SQLite database's single static connection, which *is* the
database) is never trimmed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool
from sqlalchemy.util import greenlet_spawn

from store.clock import stopped

WINDOW_SECONDS = 60.0
RETRY_SECONDS = 2.0  # after a trim a checkout got in the way of (SQLite): try again this soon
SPARE = 2  # idle connections kept beyond the window's peak use


class PoolUse:
    """Connections of ``engine`` in use now and the most in use at once since the window began (engine-level
    pool events, so they keep counting for the fresh pool a trim installs and the old one it empties)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.in_use = self.peak = self.checkouts = 0
        sync = engine.sync_engine
        event.listen(sync, "checkout", self._out)
        event.listen(sync, "checkin", self._in)

    def _out(self, *_args: Any) -> None:
        self.in_use += 1
        self.checkouts += 1
        self.peak = max(self.peak, self.in_use)

    def _in(self, *_args: Any) -> None:
        self.in_use = max(0, self.in_use - 1)

    def new_window(self) -> int:
        """The peak of the window that ends now."""
        peak, self.peak = self.peak, self.in_use
        return peak


def trimmable(engine: AsyncEngine) -> bool:
    return isinstance(engine.sync_engine.pool, QueuePool)


async def trim_when_quiet(
    engine: AsyncEngine,
    *,
    window_seconds: float = WINDOW_SECONDS,
    use: PoolUse | None = None,
    side: Sequence[Callable[[], Awaitable[None]]] = (),
    on_trim: Callable[[], None] = lambda: None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run until ``stop`` is set (or cancelled): once a window, empty ``engine``'s pool when it holds more
    than the window's peak use plus :data:`SPARE` idle connections and none is checked out; then await each
    of ``side`` (closers of the store's connections held outside the pool, reopened when next needed)."""
    if not trimmable(engine):
        return
    use = use or PoolUse(engine)
    sqlite = engine.dialect.name == "sqlite"
    settled = True  # False: the last trim could not close every connection of the SQLite file at once
    stop = stop or asyncio.Event()
    while True:
        if await stopped(stop, window_seconds if settled else min(window_seconds, RETRY_SECONDS)):
            return
        peak = use.new_window()
        pool = engine.sync_engine.pool
        if not isinstance(pool, QueuePool) or pool.checkedout():
            continue
        if settled and pool.checkedin() <= peak + SPARE:
            continue
        checkouts = use.checkouts
        # A fresh pool first (no await before it, so no checkout can slip in between), then the old pool's
        # idle connections close: a checkout meanwhile opens a connection in the new pool, never in the
        # pool being emptied.
        await engine.dispose(close=False)
        await greenlet_spawn(pool.dispose)
        for close in side:
            await close()
        settled = not sqlite or use.checkouts == checkouts
        on_trim()
