"""The run queue: claims, leases, heartbeats, worker state reports and lease reaping (a run's log lines:
:mod:`api.claims.run_logs`).

The claim is one statement per backend, kept here and nowhere else:

- PostgreSQL: ``UPDATE runs SET ... WHERE run_id = (SELECT run_id ... WHERE state = 'QUEUED' AND
  worker_host IN (...) ORDER BY queued_at LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED) AND state = 'QUEUED'
  RETURNING ...``: concurrent claimers skip each other's locked rows instead of queueing on them.
- SQLite: the same ``UPDATE ... RETURNING`` without row locks. SQLite has one writer at a time and
  the statement is the transaction's first, so the pick and the update happen under the write
  lock and no two claimers can take the same run (needs SQLite >= 3.35 for RETURNING).

Functions that read a run and then change it first lock it (:func:`locked_run`): ``SELECT ... FOR
UPDATE`` on PostgreSQL; on SQLite a no-op ``UPDATE`` that takes the database write lock before the
read, so the read cannot go stale. Every state change goes through :mod:`api.runs.states` and records
its event in the same transaction (:mod:`api.runs.events`, docs/events.md).
The caller owns the session and the transaction: for a worker's call that is
:mod:`api.claims.protocol`, the one path of the HTTP routes and the service-hosted workers.
"""

from __future__ import annotations

import datetime as dt
import hmac
import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from api.claims.errors import NotLeaseHolder
from api.runs import events
from api.runs.config import PRESET_HARNESSES
from api.runs.states import (
    LEASED,
    TERMINAL,
    WORKER_REPORTS,
    IllegalTransition,
    RunEvent,
    RunState,
    transition,
)
from store import NotFound
from store.clock import Clock
from store.models import Run, RunFollowup

SQLITE_RETURNING = (3, 35, 0)
# What a worker may report (by state name), and the state machine event each report is.
REPORT_EVENTS: dict[str, RunEvent] = {state.value: event for state, event in WORKER_REPORTS.items()}
LEASE_TOKEN_BYTES = 24  # 32 URL-safe characters


@dataclass(frozen=True)
class Heartbeat:
    state: str
    cancel_requested: bool
    lease_expires_at: dt.datetime
    followups: list[RunFollowup] = field(default_factory=list)


def _scope(
    worker_hosts: Sequence[str], team_id: str | None, harnesses: Sequence[str] | None = None
) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = [Run.state == RunState.QUEUED.value]
    conds.append(
        Run.worker_host == worker_hosts[0] if len(worker_hosts) == 1 else Run.worker_host.in_(worker_hosts)
    )
    if team_id is not None:
        conds.append(Run.team_id == team_id)
    if harnesses is not None:  # the last column of ix_runs_queue: filtered inside the index scan
        conds.append(Run.harness_type.in_(claimable_presets(harnesses)))
    return conds


def claimable_presets(harnesses: Sequence[str]) -> list[str]:
    """The ``runs.harness_type`` values a worker offering ``harnesses`` claims: ``""`` (any worker's runs)
    and the agent CLI presets it offers (docs/workers.md, "Harnesses")."""
    return ["", *sorted({h for h in harnesses if h in PRESET_HARNESSES})]


async def claim_next(
    session: AsyncSession,
    clock: Clock,
    *,
    worker_hosts: Sequence[str],
    owner: str,
    lease_seconds: float,
    team_id: str | None = None,
    harnesses: Sequence[str] | None = None,
) -> Run | None:
    """Claim the oldest QUEUED run routed to one of ``worker_hosts`` ("" = service-hosted).

    ``harnesses`` are the harness types the worker offers: a run needing an agent CLI preset
    (``runs.harness_type``) is claimed only by a worker offering it; None (a worker that says nothing)
    claims any run, as before presets existed.

    The run becomes CLAIMED with a lease held by ``owner`` until now + ``lease_seconds``, and its
    ``attempt`` counts the claim. The claim draws a fresh random ``lease_token`` (the claim answer
    carries it): every later call for the run must present it, so a stale holder of an earlier attempt
    under the same ``owner`` is refused (docs/workers.md, "Leases"). ``team_id`` restricts the claim
    to one team's runs (HTTP workers); the in-process service workers serve every team. None when
    nothing is queued.
    """
    if not worker_hosts:
        return None
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite" and sqlite3.sqlite_version_info < SQLITE_RETURNING:
        raise RuntimeError(f"SQLite {sqlite3.sqlite_version} is too old for claims; 3.35 or newer is needed")
    target = transition(RunState.QUEUED, RunEvent.CLAIM).to
    now = clock.now()
    pick = (
        # exactly the ix_runs_queue order: one index probe, no sort
        select(Run.run_id).where(*_scope(worker_hosts, team_id, harnesses)).order_by(Run.queued_at).limit(1)
    )
    if dialect == "postgresql":
        # FOR NO KEY UPDATE: a transaction inserting a row that references the run (an event, a
        # follow-up, a notification) holds FOR KEY SHARE on it, which FOR UPDATE would skip past.
        pick = pick.with_for_update(skip_locked=True, key_share=True)
    stmt = (
        update(Run)
        .where(Run.run_id == pick.scalar_subquery(), Run.state == RunState.QUEUED.value)
        .values(
            state=target.value,
            lease_owner=owner,
            lease_token=secrets.token_urlsafe(LEASE_TOKEN_BYTES),
            lease_expires_at=now + dt.timedelta(seconds=lease_seconds),
            attempt=Run.attempt + 1,
            updated_at=now,
        )
        .returning(Run)
        .execution_options(synchronize_session=False, populate_existing=True)
    )
    run = (await session.scalars(stmt)).one_or_none()
    if run is not None:
        events.record_state(run, RunState.QUEUED.value, False, None, now)
        await session.flush()
    return run


async def queued_exists(
    session: AsyncSession,
    *,
    worker_hosts: Sequence[str],
    team_id: str | None = None,
    harnesses: Sequence[str] | None = None,
) -> bool:
    """A cheap read-only check for idle pollers, so they do not take write locks for nothing."""
    if not worker_hosts:
        return False
    return bool(await session.scalar(select(exists().where(*_scope(worker_hosts, team_id, harnesses)))))


async def locked_run(session: AsyncSession, run_id: str, team_id: str | None) -> Run:
    """The run, locked against concurrent changes until the transaction ends; NotFound otherwise."""
    conds: list[ColumnElement[bool]] = [Run.run_id == run_id]
    if team_id is not None:
        conds.append(Run.team_id == team_id)
    if session.get_bind().dialect.name == "sqlite":
        await session.execute(
            update(Run)
            .where(*conds)
            .values(updated_at=Run.updated_at)
            .execution_options(synchronize_session=False)
        )
        stmt = select(Run).where(*conds)
    else:
        stmt = select(Run).where(*conds).with_for_update(key_share=True)  # see claim_next
    run = (await session.scalars(stmt.execution_options(populate_existing=True))).one_or_none()
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def holds_lease(run: Run, owner: str, lease_token: str | None) -> bool:
    """Whether ``owner`` presenting ``lease_token`` holds ``run``'s current lease: the one rule every
    worker call goes through, over HTTP and in-process (docs/workers.md, "Leases").

    A run leased before lease tokens existed (no token stored) is held by its owner alone.
    """
    if run.lease_owner != owner or RunState(run.state) not in LEASED:
        return False
    if run.lease_token is None:
        return True
    given = (lease_token or "").encode("utf-8", "surrogatepass")
    return hmac.compare_digest(run.lease_token.encode("ascii"), given)


def require_lease(run: Run, owner: str, lease_token: str | None) -> None:
    if not holds_lease(run, owner, lease_token):
        raise NotLeaseHolder(run.run_id, run.state)


async def pending_followups(session: AsyncSession, clock: Clock, run_id: str) -> list[RunFollowup]:
    """Follow-ups not yet handed to a worker, oldest first; marks them delivered."""
    stmt = (
        select(RunFollowup)
        .where(RunFollowup.run_id == run_id, RunFollowup.delivered_at.is_(None))
        .order_by(RunFollowup.created_at, RunFollowup.id)
    )
    rows = list((await session.scalars(stmt)).all())
    now = clock.now()
    for row in rows:
        row.delivered_at = now
    if rows:
        await session.flush()
    return rows


async def heartbeat(
    session: AsyncSession,
    clock: Clock,
    run_id: str,
    *,
    owner: str,
    lease_token: str | None,
    lease_seconds: float,
    start: bool = False,
    team_id: str | None = None,
    sandbox: dict[str, str] | None = None,
) -> Heartbeat:
    """Extend ``owner``'s lease; ``start`` also moves a CLAIMED run to INPROGRESS; ``sandbox`` (the
    worker's report of where the run executes, docs/workers.md "Sandbox") is stored on the run.

    Answers whether cancellation was requested and hands over pending follow-ups (once). A claimed
    run cancelled before it started ends CANCELLED on ``start``: the answer then has that state and
    ``cancel_requested`` True, and the worker must not execute it. Raises :class:`NotLeaseHolder` when
    ``owner`` with ``lease_token`` does not hold the run's lease.
    """
    run = await locked_run(session, run_id, team_id)
    require_lease(run, owner, lease_token)
    now = clock.now()
    expires = now + dt.timedelta(seconds=lease_seconds)
    if start and run.state == RunState.CLAIMED.value:
        _apply(run, RunEvent.START, now)
        if run.state not in LEASED:  # cancelled before it started: nothing may run
            await session.flush()
            return Heartbeat(run.state, True, now)
    run.lease_expires_at = expires
    if sandbox is not None:
        run.sandbox = dict(sandbox)
    await session.flush()
    followups = await pending_followups(session, clock, run_id)
    return Heartbeat(run.state, run.cancel_requested, expires, followups)


async def report_state(
    session: AsyncSession,
    clock: Clock,
    run_id: str,
    *,
    owner: str,
    lease_token: str | None,
    state: str,
    status_message: dict[str, Any] | None = None,
    team_id: str | None = None,
) -> Run:
    """Apply a worker's state report through the state machine.

    Raises :class:`~api.claims.errors.NotLeaseHolder` for a non-owner,
    :class:`api.runs.states.IllegalTransition` for a report the state machine refuses, and ValueError for
    a state a worker may not report.
    """
    event = REPORT_EVENTS.get(state)
    if event is None:
        raise ValueError(f"a worker may report {', '.join(REPORT_EVENTS)}; not {state!r}")
    run = await locked_run(session, run_id, team_id)
    require_lease(run, owner, lease_token)
    _apply(run, event, clock.now(), status_message)
    await session.flush()
    return run


def _apply(run: Run, event: RunEvent, now: dt.datetime, status_message: dict[str, Any] | None = None) -> None:
    previous, previous_cancel = run.state, run.cancel_requested
    result = transition(RunState(run.state), event, cancel_requested=run.cancel_requested)
    run.state = result.to.value
    run.cancel_requested = result.cancel_requested
    if status_message is not None:
        run.status_message = dict(status_message)
    elif result.status_message is not None:
        run.status_message = dict(result.status_message)
    if result.to is RunState.INPROGRESS and run.started_at is None:
        run.started_at = now
    if result.to in TERMINAL:
        run.finished_at = now
    if result.to not in LEASED:  # finished, or BLOCKED: the worker has let go of the run
        run.lease_owner = None
        run.lease_token = None
        run.lease_expires_at = None
    run.updated_at = now
    events.record_state(run, previous, previous_cancel, run.status_message, now)


async def reap_expired_leases(session: AsyncSession, clock: Clock) -> int:
    """Apply the lease-lapse rules to every live run whose lease expired; returns how many moved.

    The state machine decides each (state, cancel_requested) case once; each case is one guarded
    UPDATE, so concurrent reapers (several replicas) never move a run twice. A claimed run that
    never started goes back to QUEUED keeping its place (``queued_at``); an in-progress one ends
    ERROR ``resource_unavailable`` (retryable); either ends CANCELLED when a cancel was pending.
    """
    now = clock.now()
    moved = 0
    for state in sorted(LEASED):
        for cancel_requested in (False, True):
            try:
                result = transition(state, RunEvent.LEASE_EXPIRED, cancel_requested=cancel_requested)
            except IllegalTransition:
                continue
            values: dict[str, Any] = {
                "state": result.to.value,
                "cancel_requested": result.cancel_requested,
                "lease_owner": None,
                "lease_token": None,
                "lease_expires_at": None,
                "updated_at": now,
            }
            if result.status_message is not None:
                values["status_message"] = dict(result.status_message)
            if result.to in TERMINAL:
                values["finished_at"] = now
            if result.to is RunState.QUEUED:
                values["started_at"] = None
            stmt = (
                update(Run)
                .where(
                    and_(
                        Run.state == state.value,
                        Run.cancel_requested == cancel_requested,
                        Run.lease_expires_at < now,
                    )
                )
                .values(**values)
                .returning(Run.run_id, Run.team_id, Run.factory_uid, Run.state, Run.cancel_requested)
                .execution_options(synchronize_session=False)
            )
            rows = list((await session.execute(stmt)).all())
            await events.insert_rows(
                session, events.state_rows(rows, state.value, result.status_message, now)
            )
            moved += len(rows)
    return moved
