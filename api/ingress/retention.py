"""Delivery log retention: keep at least the newest N entries and the last D days of each webhook.

An entry is pruned only when it is older than ``delivery_retention_days`` *and* not among the newest
``delivery_retention_count`` entries of its webhook (defaults 7 days and 50). Deduplication lives in the
Accepted entries, so it holds exactly as long as the log does: a delivery ID pruned from the log is
accepted again, though automations that already ran for it are not started twice (see
:mod:`api.ingress.pipeline`).

Each webhook is pruned by ``DELETE`` statements of at most :data:`BATCH_ROWS` entries whose threshold
(the seq of the N-th newest entry) and pick are subqueries: each is a single write statement, so on SQLite
it never has to upgrade a read snapshot (which could fail under concurrent accepts), and on PostgreSQL
replicas pruning at the same time just delete nothing twice. The same job drops rate-counter windows that
no limit reads any more.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from aiohttp import web
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.context import CLOCK, ENGINE, SETTINGS
from api.periodic import Lifecycle, periodic, rest_after
from api.ratelimit.counters import prune_counters
from store.models import Delivery

log = logging.getLogger("factoryctl.ingress.retention")

DEFAULT_INTERVAL_SECONDS = 300.0
BATCH_ROWS = 500  # entries per DELETE (docs/operations.md, "Retention")
PAUSE_SECONDS = 0.02


async def prune_deliveries(
    engine: AsyncEngine, *, now: dt.datetime, keep_days: float, keep_count: int, batch: int = BATCH_ROWS
) -> int:
    """Delete entries older than ``keep_days`` beyond the newest ``keep_count`` per webhook; returns count."""
    cutoff = now - dt.timedelta(days=keep_days)
    async with engine.connect() as conn:
        stale = select(Delivery.webhook_uid).where(Delivery.received_at < cutoff).distinct()
        webhook_uids = list((await conn.execute(stale)).scalars())
    removed = 0
    for uid in webhook_uids:
        newest_kept = (
            select(Delivery.seq)
            .where(Delivery.webhook_uid == uid)
            .order_by(Delivery.seq.desc())
            .offset(max(keep_count, 1) - 1)
            .limit(1)
            .scalar_subquery()
        )
        oldest = (
            select(Delivery.seq)
            .where(Delivery.webhook_uid == uid, Delivery.received_at < cutoff, Delivery.seq < newest_kept)
            .order_by(Delivery.seq)
            .limit(batch)
        )
        stmt = delete(Delivery).where(Delivery.seq.in_(oldest))
        while True:  # bounded batches: a webhook with a large backlog never holds the writer for long
            started = time.monotonic()
            async with engine.begin() as conn:
                result = await conn.execute(stmt)
            count = result.rowcount or 0
            removed += count
            if count < batch:
                break
            await rest_after(started, PAUSE_SECONDS)  # ingress commits between batches
    return removed


async def run_once(app: web.Application) -> int:
    """One retention pass over the whole store with the app's settings and clock."""
    settings, engine, now = app[SETTINGS], app[ENGINE], app[CLOCK].now()
    removed = await prune_deliveries(
        engine,
        now=now,
        keep_days=settings.delivery_retention_days,
        keep_count=settings.delivery_retention_count,
    )
    await prune_counters(engine, now.timestamp())
    if removed:
        log.info("delivery retention pruned %d entries", removed)
    return removed


def retention_job(interval_seconds: float = DEFAULT_INTERVAL_SECONDS) -> Lifecycle:
    """A ``cleanup_ctx`` lifecycle that prunes now and then every ``interval_seconds`` until shutdown."""
    return periodic("delivery-retention", interval_seconds, run_once, log=log)
