"""The maintenance job: one loop that applies every retention policy in bounded batches, then keeps the SQLite
file and its WAL small, or vacuums PostgreSQL's churned tables (docs/operations.md, "Retention" and "SQLite
file and WAL size").

Only one replica prunes at a time: a pass first takes (or renews) the ``job:maintenance`` row of the
``locks`` table as a lease for :data:`LEASE_SECONDS`; a replica that finds another holder's lease unexpired
skips the pass. A replica that dies simply lets its lease run out.

Batches are short transactions with a pause between them at least as long as the batch took
(:func:`~api.periodic.rest_after`), so the ingress writer and the workers (one SQLite writer at a time)
hold the lock at least half the time while a pass runs; a pass stops after :data:`MAX_BATCHES` batches
per table and the rest waits for the next pass.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web
from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.context import CLOCK, ENGINE, SESSIONS
from api.periodic import Lifecycle, periodic, rest_after
from api.runs.retention import RetentionSettings, TablePolicy, policies
from store.db import is_sqlite, release_free_pages, vacuum_churned, wal_bytes, wal_checkpoint
from store.models import AppliedLock

log = logging.getLogger("factoryctl.maintenance")

LEASE_NAME = "job:maintenance"
DEFAULT_INTERVAL_SECONDS = 300.0
FIRST_DELAY_SECONDS = 60.0  # the first pass, after start (docs/operations.md, "Retention")
LEASE_SECONDS = 900.0  # longer than a pass; a dead holder's lease lapses after this
MAX_BATCHES = 200  # per table per pass
PAUSE_SECONDS = 0.02  # between batches: the writer lock goes back to ingress
TRUNCATE_ABOVE = 4 * 1024 * 1024  # a WAL bigger than this is emptied, not just checkpointed
FREE_PAGES_PER_PASS = 50_000  # 200 MB of 4 KiB pages per pass; the rest goes on the next one
FREE_PAGES_PER_STEP = 1_000  # one incremental vacuum is one write transaction: 4 MB keeps it short


@dataclass
class PassReport:
    """What one pass did: rows (runs for ``runs``) deleted per table, and whether it held the lease."""

    leader: bool = False
    deleted: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


async def take_lease(
    sessions: async_sessionmaker[AsyncSession], holder: str, now: dt.datetime, seconds: float = LEASE_SECONDS
) -> bool:
    """Take or renew the maintenance lease for ``holder``; False while another holder's is unexpired.

    One upsert whose update applies only to an expired or own row, then a read of the holder: the same
    two statements on both backends, and the database's row lock decides a race."""
    expires = now + dt.timedelta(seconds=seconds)
    async with sessions() as session, session.begin():
        dialect = sqlite if session.get_bind().dialect.name == "sqlite" else postgresql
        stmt = dialect.insert(AppliedLock).values(name=LEASE_NAME, holder=holder, expires_at=expires)
        stmt = stmt.on_conflict_do_update(
            index_elements=[AppliedLock.name],
            set_={"holder": holder, "expires_at": expires},
            where=(AppliedLock.expires_at < now) | (AppliedLock.holder == holder),
        )
        await session.execute(stmt)
        current = await session.scalar(select(AppliedLock.holder).where(AppliedLock.name == LEASE_NAME))
    return current == holder


async def release_lease(sessions: async_sessionmaker[AsyncSession], holder: str) -> None:
    """Give the lease up if ``holder`` has it."""
    async with sessions() as session, session.begin():
        await session.execute(
            delete(AppliedLock).where(AppliedLock.name == LEASE_NAME, AppliedLock.holder == holder)
        )


async def apply_policy(
    sessions: async_sessionmaker[AsyncSession], policy: TablePolicy, now: dt.datetime, *, pause: float
) -> int:
    """Delete what ``policy`` says is too old, one short transaction per batch; returns the count."""
    if policy.keep is None:
        return 0
    cutoff = now - policy.keep
    deleted = 0
    for _ in range(MAX_BATCHES):
        started = time.monotonic()
        async with sessions() as session, session.begin():
            count = await policy.prune(session, cutoff, policy.batch)
        deleted += count
        if count < policy.batch:
            break
        await rest_after(started, pause)  # let queued writers (ingress, claims) commit between batches
    return deleted


async def compact(engine: AsyncEngine, *, pruned: bool) -> None:
    """SQLite only: after a pass that deleted rows, or when the WAL is over :data:`TRUNCATE_ABOVE` (SQLite
    itself trims it only to ``store.db.WAL_SIZE_LIMIT``, and only when it restarts the log), hand free pages
    back and empty the WAL. ``TRUNCATE`` waits for readers and writers on the busy timeout, briefly: it
    copies pages, nothing more. Otherwise a ``PASSIVE`` checkpoint, which never waits (docs/operations.md,
    "SQLite file and WAL size").

    PostgreSQL: every pass vacuums the tables that churn (:func:`store.db.vacuum_churned`), pruned or not:
    runs are updated several times each, and a server whose autovacuum lags (or is off) would otherwise let
    their dead rows pile up under every claim (docs/operations.md, "Retention")."""
    if not is_sqlite(engine):
        failed = await vacuum_churned(engine)
        if failed:
            log.warning("could not vacuum %s (the store's user must own them)", ", ".join(failed))
        return
    if pruned:
        for _ in range(FREE_PAGES_PER_PASS // FREE_PAGES_PER_STEP):
            started = time.monotonic()
            free = await release_free_pages(engine, FREE_PAGES_PER_STEP)
            if not free or free <= FREE_PAGES_PER_STEP:
                break
            await rest_after(started, PAUSE_SECONDS)
    oversized = (wal_bytes(engine) or 0) > TRUNCATE_ABOVE
    result = await wal_checkpoint(engine, "TRUNCATE" if pruned or oversized else "PASSIVE")
    if result is not None and result.busy:
        log.info("WAL checkpoint incomplete (readers busy); the next pass retries")


async def maintenance_pass(
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    settings: RetentionSettings,
    *,
    now: dt.datetime,
    holder: str,
    pause: float = PAUSE_SECONDS,
) -> PassReport:
    """One pass: take the lease, apply every policy, compact. A replica without the lease does nothing."""
    report = PassReport()
    if not await take_lease(sessions, holder, now):
        return report
    report.leader = True
    for policy in policies(settings):
        report.deleted[policy.table] = await apply_policy(sessions, policy, now, pause=pause)
    await compact(engine, pruned=report.total > 0)
    return report


def maintenance_job(
    settings: RetentionSettings,
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
    *,
    holder: str | None = None,
    first_delay_seconds: float = FIRST_DELAY_SECONDS,
) -> Lifecycle:
    """A ``cleanup_ctx`` lifecycle running :func:`maintenance_pass` ``first_delay_seconds`` after start (its
    writes would otherwise meet the start-up's: a restart is often a burst of retried deliveries), then
    every ``interval_seconds``."""
    me = holder or f"maintenance-{uuid.uuid4().hex[:12]}"

    async def tick(app: web.Application) -> PassReport:
        report = await maintenance_pass(app[ENGINE], app[SESSIONS], settings, now=app[CLOCK].now(), holder=me)
        if report.total:
            counts = ", ".join(f"{table} {n}" for table, n in report.deleted.items() if n)
            log.info("retention deleted %s", counts, extra={"deleted": report.deleted})
        return report

    passes = periodic("maintenance", interval_seconds, tick, log=log, first_delay_seconds=first_delay_seconds)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async for _ in passes(app):
            yield
        # A graceful stop hands the lease back, so a restarted server prunes at once rather than in 15 min.
        with contextlib.suppress(Exception):  # the database may be gone already; the lease then lapses
            await release_lease(app[SESSIONS], me)

    return lifecycle
