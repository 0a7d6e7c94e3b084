"""Run log retention: the lines of runs finished more than ``run_log_retention_days`` ago are deleted.

Runs themselves are kept (their state, status message and event log stay); only ``run_logs`` rows
go, and the run's log counters start again at zero, so a run continued by a follow-up later logs
within a fresh cap. ``0`` keeps logs forever (docs/operations.md, "Run log retention").

Each batch (:func:`prune_log_batch`) takes the oldest finished runs that still hold lines (the partial
index ``ix_runs_log_retention``), one short transaction each, so neither backend holds a long write lock;
replicas pruning at the same time delete nothing twice (the run's counters are reset in the same
transaction, guarded by the cut-off). The maintenance job (:mod:`api.runs.maintenance`) applies it as its
``run_logs`` policy.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.models import Run, RunLog

log = logging.getLogger("factoryctl.runs.retention")
DEFAULT_INTERVAL_SECONDS = 300.0
BATCH_RUNS = 100
MAX_BATCHES = 50  # per pass: the rest waits for the next one


async def prune_log_batch(session: AsyncSession, cutoff: dt.datetime, batch: int) -> int:
    """In the caller's transaction: drop the lines of up to ``batch`` runs finished before ``cutoff`` and
    reset their counters; returns how many runs. The maintenance job's ``run_logs`` policy
    (:mod:`api.runs.retention`) is this function."""
    holds_lines = or_(Run.log_lines > 0, Run.log_dropped > 0)
    pick = (
        select(Run.run_id).where(Run.finished_at < cutoff, holds_lines).order_by(Run.finished_at).limit(batch)
    )
    run_ids = list((await session.scalars(pick)).all())
    if not run_ids:
        return 0
    await session.execute(delete(RunLog).where(RunLog.run_id.in_(run_ids)))
    await session.execute(
        update(Run)
        .where(Run.run_id.in_(run_ids), Run.finished_at < cutoff)
        .values(log_lines=0, log_bytes=0, log_dropped=0)
        .execution_options(synchronize_session=False)
    )
    return len(run_ids)


async def prune_run_logs(
    sessions: async_sessionmaker[AsyncSession], *, now: dt.datetime, keep_days: int, batch: int = BATCH_RUNS
) -> int:
    """Delete the log lines of runs finished before ``now - keep_days``; returns how many runs."""
    if keep_days <= 0:
        return 0
    cutoff = now - dt.timedelta(days=keep_days)
    pruned = 0
    for _ in range(MAX_BATCHES):
        async with sessions() as session, session.begin():
            count = await prune_log_batch(session, cutoff, batch)
        pruned += count
        if count < batch:
            break
    return pruned
