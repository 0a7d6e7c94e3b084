"""The per-run event log (docs/events.md, "What is recorded"): writing and reading ``run_events`` rows.

Every writer adds its events in the transaction of the change it records (the caller owns the session
and the commit), so a rolled-back change leaves no event and a committed one always has its event.
The hooks are: :func:`api.runs.records.apply_event` and :func:`api.claims.queue._apply` (state changes of one
loaded run), the claim and the lease reaper (bulk state changes, :func:`state_rows`), run creation,
follow-ups, :func:`api.claims.run_logs.append_logs` (log lines) and
:func:`api.claims.transcript.append_events` (the agent's transcript), both bounded by
:data:`MAX_EVENTS_PER_RUN`.

Ordering: every writer holds the run's row lock (or, on SQLite, the database write lock) from before it
takes an id until it commits, so one run's events commit in id order and a reader polling "id > last"
never skips one (docs/events.md, "Ordering and delivery"). Across runs, ids can commit out of order on
PostgreSQL, so readers of many runs (the team stream, the notification fan-out) use
:func:`read_ordered`: positions are (txid, id), read only below the oldest running transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from sqlalchemy import ColumnElement, Connection, Table, func, insert, literal_column, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import object_session

from api.runs.states import TERMINAL
from store import bulk
from store.clock import rfc3339
from store.models import Run, RunEvent

MAX_EVENTS_PER_RUN: Final = 10_000  # docs/events.md, "Bounds": output events beyond it are dropped
STATE, FOLLOWUP, LOG, TRUNCATED = "state", "followup", "log", "truncated"
# An agent preset's transcript (docs/events.md, "Transcript events"): the run's output, like ``log``.
TRANSCRIPT: Final = ("message", "tool_call", "tool_result", "usage", "session")
# The worker's egress proxy refused a destination (docs/events.md, "Egress refusals"): not output, a
# security signal, so the team stream sends it without logs=true; the worker bounds it per run.
EGRESS_REFUSED: Final = "egress_refused"
OUTPUT: Final = frozenset({LOG, TRUNCATED, *TRANSCRIPT})  # what the team stream sends only with logs=true
_EVENTS: Table = cast("Table", RunEvent.__table__)
_INSERT_EVENTS = insert(_EVENTS)


def state_data(
    state: str, previous: str | None, status_message: Mapping[str, Any] | None, cancel_requested: bool
) -> dict[str, Any]:
    """The ``data`` of a ``state`` event: the new state, where it came from, and why (if known)."""
    message = dict(status_message) if status_message else None
    return {
        "state": state,
        "previous_state": previous,
        "status_message": message,
        "error_code": message.get("error_code") if message else None,
        "cancel_requested": cancel_requested,
    }


def _row(
    run_id: str, team_id: str, factory_uid: str | None, kind: str, data: Mapping[str, Any], now: dt.datetime
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "team_id": team_id,
        "factory_uid": factory_uid,
        "kind": kind,
        "data": dict(data),
        "created_at": now,
    }


def add_event(run: Run, kind: str, data: Mapping[str, Any], now: dt.datetime) -> None:
    """Add one event of a loaded (session-attached) run; flushed with the run's own change."""
    session = object_session(run)
    if session is None:
        raise RuntimeError(f"run {run.run_id} is not attached to a session; its event would be lost")
    session.add(RunEvent(**_row(run.run_id, run.team_id, run.factory_uid, kind, data, now)))


def record_state(
    run: Run,
    previous: str,
    previous_cancel: bool,
    status_message: Mapping[str, Any] | None,
    now: dt.datetime,
) -> None:
    """A ``state`` event when the run's state or its pending cancel changed (follow-ups that leave the
    state alone record only their ``followup`` event)."""
    if run.state == previous and run.cancel_requested == previous_cancel:
        return
    add_event(run, STATE, state_data(run.state, previous, status_message, run.cancel_requested), now)


def state_rows(
    moved: Sequence[Any], previous: str, status_message: Mapping[str, Any] | None, now: dt.datetime
) -> list[dict[str, Any]]:
    """Event rows for runs moved by one bulk UPDATE (``moved``: rows with run_id, team_id, factory_uid,
    state, cancel_requested)."""
    return [
        _row(
            r.run_id,
            r.team_id,
            r.factory_uid,
            STATE,
            state_data(r.state, previous, status_message, r.cancel_requested),
            now,
        )
        for r in moved
    ]


async def insert_rows(session: AsyncSession, rows: list[dict[str, Any]]) -> None:
    if rows:
        await session.execute(insert(_EVENTS), rows)


def insert_created(conn: Connection, runs: Sequence[Mapping[str, Any]]) -> None:
    """``state`` QUEUED events of runs inserted with Core (:func:`api.runs.records.insert_runs`)."""
    rows = [
        _row(
            r["run_id"],
            r["team_id"],
            r.get("factory_uid"),
            STATE,
            state_data(r["state"], None, None, False),
            r["created_at"],
        )
        for r in runs
    ]
    bulk.insert_rows(conn, _INSERT_EVENTS, rows)


async def record_logs(
    session: AsyncSession,
    run: Run,
    lines: Sequence[tuple[str, str]],
    now: dt.datetime,
    *,
    cap: int = MAX_EVENTS_PER_RUN,
) -> int:
    """``log`` events for ``lines`` within the run's cap (:func:`record_capped`); how many were written."""
    return await record_capped(
        session, run, [(LOG, {"stream": s, "text": t}) for s, t in lines], now, cap=cap
    )


async def record_capped(
    session: AsyncSession,
    run: Run,
    items: Sequence[tuple[str, Mapping[str, Any]]],
    now: dt.datetime,
    *,
    cap: int = MAX_EVENTS_PER_RUN,
) -> int:
    """Events ``(kind, data)`` of a worker's output (log lines, transcript) within the run's cap; the first
    one beyond it adds one ``truncated`` marker instead (docs/events.md, "Bounds"). Returns how many
    events were written.

    The count stops at ``cap`` (``LIMIT`` inside it): a run past the cap, whose state events keep coming,
    is never counted further than the cap. The marker is looked for newest first: once written it is
    among the run's last events, so a run that keeps logging past the cap finds it in a few index steps.
    """
    held = select(RunEvent.id).where(RunEvent.run_id == run.run_id).limit(cap).subquery()
    room = max(0, cap - int(await session.scalar(select(func.count()).select_from(held)) or 0))
    kept = items[:room]
    rows = [_row(run.run_id, run.team_id, run.factory_uid, kind, data, now) for kind, data in kept]
    if len(kept) < len(items):
        marked = await session.scalar(
            select(RunEvent.id)
            .where(RunEvent.run_id == run.run_id, RunEvent.kind == TRUNCATED)
            .order_by(RunEvent.id.desc())
            .limit(1)
        )
        if marked is None:
            rows.append(_row(run.run_id, run.team_id, run.factory_uid, TRUNCATED, {"limit": cap}, now))
    await insert_rows(session, rows)
    return len(kept)


async def read_after(session: AsyncSession, run_id: str, after: int, limit: int) -> list[RunEvent]:
    """The run's events with ``id > after``, oldest first (one probe of ``ix_run_events_run_id_id``)."""
    stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.id > after).order_by(RunEvent.id)
    return list((await session.scalars(stmt.limit(limit))).all())


Position = tuple[int, int]  # (txid, id): an order of events across runs that only grows at the end
START: Final[Position] = (0, 0)
_HORIZON: Final[ColumnElement[int]] = literal_column(
    "(SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint)"
)


async def read_ordered(
    session: AsyncSession,
    after: Position,
    limit: int,
    *,
    team_id: str | None = None,
) -> list[RunEvent]:
    """Events after ``after`` in (txid, id) order, of one team or of all, at most ``limit``.

    On PostgreSQL only events of transactions older than the oldest running one are read (the
    horizon is taken in the same statement, so from the same snapshot): no transaction can still commit
    an event that sorts before what this returns, so a reader that moves its position to the last row
    never skips one (docs/events.md, "Ordering and delivery"). A long-running transaction anywhere in
    the cluster holds readers back until it ends. SQLite writes one transaction at a time; its txid is 0
    and ids are in commit order.
    """
    stmt = select(RunEvent).where(
        tuple_(RunEvent.txid, RunEvent.id) > tuple_(*after), *_readable(session, team_id)
    )
    stmt = stmt.order_by(RunEvent.txid, RunEvent.id).limit(limit)
    return list((await session.scalars(stmt)).all())


def _readable(session: AsyncSession, team_id: str | None) -> list[ColumnElement[bool]]:
    """The events readable in (txid, id) order now (below the horizon on PostgreSQL), of one team or all."""
    conds: list[ColumnElement[bool]] = []
    if team_id is not None:
        conds.append(RunEvent.team_id == team_id)
    if session.get_bind().dialect.name == "postgresql":
        conds.append(RunEvent.txid < _HORIZON)
    return conds


_NEWEST_FIRST: Final = (RunEvent.txid.desc(), RunEvent.id.desc())


async def latest_position(session: AsyncSession, *, team_id: str | None = None) -> Position:
    """The position of the newest event readable now (:data:`START` when there is none): a reader that
    starts here sees only what happens from now on."""
    stmt = select(RunEvent.txid, RunEvent.id).where(*_readable(session, team_id))
    row = (await session.execute(stmt.order_by(*_NEWEST_FIRST).limit(1))).first()
    return START if row is None else (int(row[0]), int(row[1]))


async def change_marks(session: AsyncSession) -> tuple[int | None, int | None]:
    """What tells a poller that the event log changed, in one statement of two index probes: the highest
    id committed (what a run's stream reads after) and the id of the newest event readable in (txid, id)
    order (what the team stream reads after; an id names one position)."""
    newest = select(func.max(RunEvent.id)).scalar_subquery()
    readable = select(RunEvent.id).where(*_readable(session, None)).order_by(*_NEWEST_FIRST).limit(1)
    row = (await session.execute(select(newest, readable.scalar_subquery()))).one()
    return row[0], row[1]


def position_of(event: RunEvent) -> Position:
    return (event.txid, event.id)


def format_position(position: Position) -> str:
    """The opaque cursor text of a cross-run position (the team stream's SSE id)."""
    return f"{position[0]}-{position[1]}"


def parse_position(text: str) -> Position:
    """The position of :func:`format_position`'s text; ValueError when it is not one."""
    head, sep, tail = text.strip().partition("-")
    if not sep or not head.isdigit() or not tail.isdigit() or len(text) > 60:
        raise ValueError(f"not an event cursor: {text[:60]!r}")
    return (int(head), int(tail))


_TERMINAL_VALUES: Final = frozenset(s.value for s in TERMINAL)


def is_terminal(state: str | None) -> bool:
    return state in _TERMINAL_VALUES


def event_json(event: RunEvent) -> dict[str, Any]:
    """The wire form of one event (docs/events.md, "Wire format")."""
    return {
        "id": event.id,
        "run_id": event.run_id,
        "kind": event.kind,
        "created_at": rfc3339(event.created_at),
        "data": event.data,
    }


__all__ = [
    "EGRESS_REFUSED",
    "FOLLOWUP",
    "LOG",
    "MAX_EVENTS_PER_RUN",
    "OUTPUT",
    "START",
    "STATE",
    "TRANSCRIPT",
    "TRUNCATED",
    "Position",
    "add_event",
    "change_marks",
    "event_json",
    "format_position",
    "insert_created",
    "insert_rows",
    "is_terminal",
    "latest_position",
    "parse_position",
    "position_of",
    "read_after",
    "read_ordered",
    "record_capped",
    "record_logs",
    "record_state",
    "state_data",
    "state_rows",
]
