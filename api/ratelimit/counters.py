"""The counters behind every limit (ingress's per-webhook limits, the per-address failed-authentication
budget): capacity leased from shared rows on PostgreSQL, process memory on SQLite.

With PostgreSQL several replicas serve one store, so a limit must hold across them
without every delivery writing one shared row. :class:`LeasedCounter` admits from tokens it leased in
chunks (the policy, pure, is :mod:`api.ratelimit.leases`); a lease is one statement on the key's
``rate_counters`` row for the current window, which counts the tokens all replicas have leased there.
The statement locks that row (``SELECT ... FOR UPDATE``, so concurrent leases are serialised and each
sees the count the previous one left), adds the grant clamped so that the sliding-window estimate stays
within the limit, and returns the count before and after and the previous window's count: one round
trip, no give-back, and the row is never counted past the limit even for an instant. It runs as a
single-statement autocommit transaction committed with ``synchronous_commit = off``: a lease needs no
durability (a crash forgets a few leases at worst, which can only admit a few more in that window), and
without the WAL flush the row is locked for microseconds instead of a disk flush. Leases of one key are
single-flight within a replica: concurrent requests wait for the lease in progress and share its chunk.

SQLite is a single-node deployment (one process owns the database file), so the in-process
:class:`~api.ratelimit.policy.MemoryCounter` is exact there - and it keeps rate accounting off SQLite's
single write lock, which every accepted delivery already needs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from api.ratelimit.leases import Lease, LeaseBook, LeaseRequest
from api.ratelimit.policy import DEFAULT_WINDOW_SECONDS, Decision, Limiter, MemoryCounter, window_position

# Old windows are pruned by the retention job; keep the current and the previous one.
_KEEP_WINDOWS = 2
# rate_counters.count is a 32-bit integer; leased counts never exceed the limit, so cap the limit there.
_MAX_COUNT = 2**31 - 1
# A lease finds its row in neither branch only when another replica inserted it after this statement's
# snapshot was taken; the next statement sees it.
_LEASE_ATTEMPTS = 3

# ``ins`` creates the window's row when this statement's snapshot has none; ``upd`` otherwise locks the
# row (FOR UPDATE waits for a concurrent lease and then reads the count it left) and adds the grant.
# ``room`` is api.ratelimit.leases.room(): floor((limit + epsilon) - previous * remaining).
_LEASE = text(
    """
    WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
    prev AS (
        SELECT COALESCE(
            (SELECT count FROM rate_counters WHERE key = CAST(:key AS text) AND window_start = :prev), 0
        ) AS n
    ),
    room AS (
        SELECT floor(CAST(:limit_eps AS double precision) - n * CAST(:remaining AS double precision)) AS r,
               CAST(:want AS integer) AS want
        FROM prev
    ),
    ins AS (
        INSERT INTO rate_counters (key, window_start, count)
        SELECT CAST(:key AS text), CAST(:start AS bigint), CAST(LEAST(want, GREATEST(0, r)) AS integer)
        FROM room
        ON CONFLICT (key, window_start) DO NOTHING
        RETURNING 0 AS before, count AS after
    ),
    upd AS (
        UPDATE rate_counters AS c
        SET count = cur.count + CAST(LEAST(room.want, GREATEST(0, room.r - cur.count)) AS integer)
        FROM (
            SELECT count FROM rate_counters
            WHERE key = CAST(:key AS text) AND window_start = :start
            FOR UPDATE
        ) AS cur, room
        WHERE c.key = CAST(:key AS text) AND c.window_start = :start
        RETURNING cur.count AS before, c.count AS after
    )
    SELECT before, after, (SELECT n FROM prev), (SELECT v FROM relaxed) FROM ins
    UNION ALL
    SELECT before, after, (SELECT n FROM prev), (SELECT v FROM relaxed) FROM upd
    """
)


@dataclass
class _Flight:
    """The lease in progress for one key, and how many requests wait on it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class LeasedCounter:
    """:class:`~api.ratelimit.policy.Limiter` over leases from ``rate_counters`` (PostgreSQL).

    Statements per key and window, per replica: one per lease (a few dozen at most with a large limit,
    one per admitted event below a limit of 80 - those are the ones where it is exact) plus one refused
    lease per ``Retry-After``; a request refused from memory, or admitted from a held token, makes none.
    """

    def __init__(self, engine: AsyncEngine, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        # Each statement is its own transaction: one round trip per lease, no BEGIN/COMMIT exchange.
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._book = LeaseBook(window_seconds)
        self._flights: dict[str, _Flight] = {}

    async def consume(self, key: str, limit: int, now_epoch: float) -> Decision:
        """Admit one event from a held token, or lease; refused while the window is known to be full."""
        return await self._take(key, limit, now_epoch, keep=False)

    async def check(self, key: str, limit: int, now_epoch: float) -> Decision:
        """Whether one more event fits: a held token says yes, a known-full window no, else a lease into
        the reserve answers (nothing is counted that was not leased anyway)."""
        return await self._take(key, limit, now_epoch, keep=True)

    async def _take(self, key: str, limit: int, now_epoch: float, *, keep: bool) -> Decision:
        limit = min(limit, _MAX_COUNT)
        step = self._book.take(key, limit, now_epoch, keep=keep)
        if isinstance(step, Decision):
            return step
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = _Flight()
        flight.users += 1
        try:
            async with flight.lock:
                step = self._book.take(key, limit, now_epoch, keep=keep)  # the lease we waited for may do
                if isinstance(step, Decision):
                    return step
                # Shielded: a cancelled request must not lose tokens the store already granted.
                return await asyncio.shield(self._settle(step))
        finally:
            flight.users -= 1
            if flight.users == 0:
                del self._flights[key]

    async def _settle(self, request: LeaseRequest) -> Decision:
        return self._book.settle(request, await self.lease(request))

    async def lease(self, request: LeaseRequest) -> Lease:
        """Run one lease against the store (no local bookkeeping)."""
        params = {
            "key": request.key,
            "start": request.window_start,
            "prev": request.previous_start,
            "want": request.want,
            "limit_eps": request.limit_with_tolerance,
            "remaining": request.remaining,
        }
        async with self._engine.connect() as conn:
            for _ in range(_LEASE_ATTEMPTS):
                row = (await conn.execute(_LEASE, params)).first()
                if row is not None:
                    return Lease(before=int(row[0]), after=int(row[1]), previous=int(row[2]))
        raise RuntimeError(f"rate counter {request.key!r} changed under {_LEASE_ATTEMPTS} leases")


def counter_for(engine: AsyncEngine, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> Limiter:
    """Leases from shared rows on PostgreSQL (limits shared by replicas); exact process memory on SQLite."""
    if engine.dialect.name == "sqlite":
        return MemoryCounter(window_seconds)
    return LeasedCounter(engine, window_seconds)


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
