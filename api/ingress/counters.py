"""Rate counters behind the ingress limits: shared rows on PostgreSQL, process memory on SQLite.

With PostgreSQL several replicas serve one store, so the per-webhook limits must hold across them: each
hit is one upsert into ``rate_counters`` (``INSERT ... ON CONFLICT DO UPDATE SET count = count + 1
RETURNING count``) that also reads the previous window's count, sent as a single-statement autocommit
transaction: one round trip, and a counter row is never locked for longer than one statement. Those
transactions commit with ``synchronous_commit = off``: a counter needs no durability (a crash forgets a
few hits at worst), and without the WAL flush the hot counter row of a busy webhook is locked for
microseconds instead of a disk flush.

SQLite is a single-node deployment (one process owns the database file), so the in-process
:class:`~api.ingress.ratelimit.MemoryCounter` is exact there - and it keeps rate accounting off SQLite's
single write lock, which every accepted delivery already needs.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from api.ingress import ratelimit
from api.ingress.ratelimit import DEFAULT_WINDOW_SECONDS, Decision, MemoryCounter, window_position

# Old windows are pruned by the retention job; keep the current and the previous one.
_KEEP_WINDOWS = 2

_HIT = text(
    """
    WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
    up AS (
        INSERT INTO rate_counters (key, window_start, count) VALUES (:key, :start, 1)
        ON CONFLICT (key, window_start) DO UPDATE SET count = rate_counters.count + 1
        RETURNING count
    )
    SELECT (SELECT count FROM up),
           COALESCE((SELECT count FROM rate_counters WHERE key = :key AND window_start = :prev), 0),
           (SELECT v FROM relaxed)
    """
)
_UNDO = text(
    """
    WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS v)
    UPDATE rate_counters SET count = count - 1
    WHERE key = :key AND window_start = :start AND count > 0 AND (SELECT v FROM relaxed) IS NOT NULL
    """
)
_PEEK = text(
    """
    SELECT COALESCE((SELECT count FROM rate_counters WHERE key = :key AND window_start = :start), 0),
           COALESCE((SELECT count FROM rate_counters WHERE key = :key AND window_start = :prev), 0)
    """
)


class PeekCounter(ratelimit.Counter, Protocol):
    """A counter that can also read (current, previous) without counting (for the failed-request budget)."""

    async def peek(self, key: str, now_epoch: float) -> tuple[int, int]: ...


class StoreCounter:
    """:class:`~api.ingress.ratelimit.Counter` over the ``rate_counters`` table (PostgreSQL)."""

    def __init__(self, engine: AsyncEngine, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        # Each statement is its own transaction: one round trip per hit, no BEGIN/COMMIT exchange.
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._window = window_seconds

    @property
    def window_seconds(self) -> int:
        return self._window

    def _params(self, key: str, now_epoch: float) -> dict[str, object]:
        start, _ = window_position(now_epoch, self._window)
        return {"key": key, "start": start, "prev": start - self._window}

    async def hit(self, key: str, now_epoch: float) -> tuple[int, int]:
        async with self._engine.connect() as conn:
            row = (await conn.execute(_HIT, self._params(key, now_epoch))).one()
        return int(row[0]), int(row[1])

    async def undo(self, key: str, now_epoch: float) -> None:
        async with self._engine.connect() as conn:
            await conn.execute(_UNDO, self._params(key, now_epoch))

    async def peek(self, key: str, now_epoch: float) -> tuple[int, int]:
        async with self._engine.connect() as conn:
            row = (await conn.execute(_PEEK, self._params(key, now_epoch))).one()
        return int(row[0]), int(row[1])


def counter_for(engine: AsyncEngine, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> PeekCounter:
    """Store-backed counters on PostgreSQL (shared by replicas); in-process ones on SQLite."""
    if engine.dialect.name == "sqlite":
        return MemoryCounter(window_seconds)
    return StoreCounter(engine, window_seconds)


async def over_budget(counter: PeekCounter, key: str, limit: int, now_epoch: float) -> Decision:
    """Whether one more event for ``key`` would exceed ``limit``, without counting it.

    Used for the failed-request budget: every request is checked, only failures are counted (``consume``).
    """
    current, previous = await counter.peek(key, now_epoch)
    _, elapsed = window_position(now_epoch, counter.window_seconds)
    return ratelimit.decide(limit, counter.window_seconds, current + 1, previous, elapsed)


async def prune_counters(
    engine: AsyncEngine, now_epoch: float, window_seconds: int = DEFAULT_WINDOW_SECONDS
) -> int:
    """Delete windows older than the previous one; returns the number of rows removed."""
    start, _ = window_position(now_epoch, window_seconds)
    oldest_kept = start - (_KEEP_WINDOWS - 1) * window_seconds
    async with engine.begin() as conn:
        result = await conn.execute(
            text("DELETE FROM rate_counters WHERE window_start < :oldest"), {"oldest": oldest_kept}
        )
    return int(getattr(result, "rowcount", 0) or 0)
