"""What the maintenance job deletes, table by table: each policy is data (an age, a batch size, one batch's
delete), so docs/operations.md, "Retention" and this table say the same thing.

Every ``prune`` callable deletes at most ``batch`` rows (or runs) in the caller's transaction and returns how
many it deleted; the job calls it again in a fresh, short transaction until a batch comes back short, so no
backend holds a write lock for long and ingress commits between batches.

A run's events, logs, artifacts (their bytes are in the database, not on disk), session state, scores,
follow-ups and notification messages (with their attempts) go with it by ``ON DELETE CASCADE``; SQLite
enforces it because every connection turns ``foreign_keys`` on (:func:`store.db.create_engine`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.log_retention import prune_log_batch
from store.models import ConsoleSession, NotificationEndpoint, NotificationMessage, Run, ScheduleFire, Team
from store.rules.vocabulary import RunState

Prune = Callable[[AsyncSession, dt.datetime, int], Awaitable[int]]

# A run takes its events and log lines with it (about 200 rows for a typical run): 10 runs is a transaction
# of ~100 ms on a busy 2-core machine, short enough for ingress to wait (docs/benchmarks.md, "Retention").
RUNS_PER_BATCH = 10
# Runs in these states never change again; BLOCKED can still be followed up, so it is kept.
FINISHED_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.ERROR, RunState.CANCELLED)


@dataclass(frozen=True)
class TablePolicy:
    """Rows of ``table`` older than ``keep`` are deleted, ``batch`` per transaction; ``keep`` None: never."""

    table: str
    keep: dt.timedelta | None
    batch: int
    prune: Prune


@dataclass(frozen=True)
class RetentionSettings:
    """The ages docs/operations.md, "Retention" documents: ``run_days`` is ``serve --run-retention-days``,
    ``run_log_days`` ``FACTORY_RUN_LOG_RETENTION_DAYS`` (a run's log lines may go before the run)."""

    run_days: float = 30  # fractions too (0.25: six hours), for stores that take many runs a day
    run_log_days: int = 30
    notification_days: int = 14
    console_session_days: int = 1
    schedule_fire_days: int = 30

    def __post_init__(self) -> None:
        for name in (
            "run_days",
            "run_log_days",
            "notification_days",
            "console_session_days",
            "schedule_fire_days",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 (keep for ever) or more")


def _days(count: float) -> dt.timedelta | None:
    return dt.timedelta(days=count) if count > 0 else None


async def prune_runs(session: AsyncSession, cutoff: dt.datetime, batch: int) -> int:
    """Delete up to ``batch`` runs that finished before ``cutoff`` (with everything they own).

    The pick walks ``ix_runs_team_state_created`` one (team, state) range at a time with no ORDER BY, so it
    reads index entries, never the whole table; a run created after the cut-off cannot have finished
    before it, which bounds each range."""
    teams = list((await session.scalars(select(Team.id))).all())
    picked: list[str] = []
    for team_id in teams:
        for state in FINISHED_STATES:
            pick = (
                select(Run.run_id)
                .where(
                    Run.team_id == team_id,
                    Run.state == state.value,
                    Run.created_at < cutoff,
                    Run.finished_at < cutoff,
                )
                .limit(batch - len(picked))
            )
            picked += (await session.scalars(pick)).all()
            if len(picked) >= batch:
                break
        if len(picked) >= batch:
            break
    if not picked:
        return 0
    # Guarded again: a run continued by a follow-up since the pick is no longer finished before the cut-off.
    stmt = delete(Run).where(Run.run_id.in_(picked), Run.finished_at < cutoff, Run.state.in_(FINISHED_STATES))
    result = await session.execute(stmt.execution_options(synchronize_session=False))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def prune_notification_messages(session: AsyncSession, cutoff: dt.datetime, batch: int) -> int:
    """Delete up to ``batch`` delivered or failed messages made before ``cutoff`` (attempts cascade);
    pending ones stay however old, the sender still owes them. Walks each endpoint's index range."""
    endpoints = list((await session.scalars(select(NotificationEndpoint.uid))).all())
    picked: list[str] = []
    for uid in endpoints:
        pick = (
            select(NotificationMessage.id)
            .where(
                NotificationMessage.endpoint_uid == uid,
                NotificationMessage.created_at < cutoff,
                NotificationMessage.status != "pending",
            )
            .limit(batch - len(picked))
        )
        picked += (await session.scalars(pick)).all()
        if len(picked) >= batch:
            break
    if not picked:
        return 0
    stmt = delete(NotificationMessage).where(
        NotificationMessage.id.in_(picked), NotificationMessage.status != "pending"
    )
    result = await session.execute(stmt.execution_options(synchronize_session=False))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def prune_console_sessions(session: AsyncSession, cutoff: dt.datetime, batch: int) -> int:
    """Delete up to ``batch`` sessions that expired, or went unused, before ``cutoff``: they can never
    open again (docs/console.md), the row only costs space."""
    stale = or_(ConsoleSession.expires_at < cutoff, ConsoleSession.last_seen_at < cutoff)
    ids = list((await session.scalars(select(ConsoleSession.id).where(stale).limit(batch))).all())
    if not ids:
        return 0
    stmt = delete(ConsoleSession).where(ConsoleSession.id.in_(ids))
    result = await session.execute(stmt.execution_options(synchronize_session=False))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def prune_schedule_fires(session: AsyncSession, cutoff: dt.datetime, batch: int) -> int:
    """Delete up to ``batch`` fire rows for times before ``cutoff``. A fire row only has to outlive the
    moment replicas could race for that fire time (seconds); the run it started keeps its schedule."""
    pick = select(ScheduleFire.schedule_uid, ScheduleFire.fire_time).where(ScheduleFire.fire_time < cutoff)
    rows = (await session.execute(pick.limit(batch))).all()
    removed = 0
    for schedule_uid, fire_time in rows:
        stmt = delete(ScheduleFire).where(
            ScheduleFire.schedule_uid == schedule_uid, ScheduleFire.fire_time == fire_time
        )
        result = await session.execute(stmt.execution_options(synchronize_session=False))
        removed += int(result.rowcount or 0)  # type: ignore[attr-defined]
    return removed


def policies(settings: RetentionSettings) -> tuple[TablePolicy, ...]:
    """The per-table policies, in the order a pass applies them."""
    return (
        TablePolicy("runs", _days(settings.run_days), RUNS_PER_BATCH, prune_runs),
        TablePolicy("run_logs", _days(settings.run_log_days), RUNS_PER_BATCH, prune_log_batch),
        TablePolicy(
            "notification_messages", _days(settings.notification_days), 500, prune_notification_messages
        ),
        TablePolicy("console_sessions", _days(settings.console_session_days), 500, prune_console_sessions),
        TablePolicy("schedule_fires", _days(settings.schedule_fire_days), 500, prune_schedule_fires),
    )
