"""Run records in the database: create, read, list (keyset pages), cancel, follow up, read logs.

Queries and writes only; the caller owns the session and the transaction (claims and leases are in
:mod:`api.claims.queue`).

Every state change goes through :func:`api.runs.states.transition` (via :func:`apply_event`) and
bumps ``updated_at``. Reads and writes are always scoped to a team: another team's run is
:class:`store.NotFound`, exactly like a missing one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    false,
    insert,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from api.http.pagination import Cursor, InvalidCursor, parse_timestamp_key, split_page, timestamp_key
from api.runs import events
from api.runs.config import preset_of, worker_host_of
from api.runs.followup_limits import DEFAULT_FOLLOWUP_LIMITS, FollowupLimits, check_pending
from api.runs.new_run import NewAttachment, NewRun
from api.runs.states import TERMINAL, RunEvent, RunState, Transition, transition
from store import NotFound, ids
from store.bulk import insert_rows
from store.clock import Clock, first_shown_after, first_shown_at_or_after
from store.models import Run, RunAttachment, RunFollowup, RunLog

TITLE_MAX = 80
SORT_COLUMNS = {"updated_at": Run.updated_at, "created_at": Run.created_at, "title": Run.title}


@dataclass(frozen=True)
class RunFilters:
    """The list filters of ``GET /agent/runs``; all given filters must hold (AND)."""

    states: tuple[str, ...] = ()
    config_name: str | None = None
    model_id: str | None = None
    creator: str | None = None
    source: str | None = None
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    updated_after: dt.datetime | None = None
    factory_uid: str | None = None
    automation_id: str | None = None
    schedule_id: str | None = None
    q: str | None = None

    def params(self) -> dict[str, Any]:
        """The filters as plain values, for cursor fingerprints (unset filters leave no trace, so adding a
        filter keeps the cursors of queries that do not use it valid)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, dt.datetime):
                value = timestamp_key(value)
            if value not in (None, ()):
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class PageRequest:
    limit: int = 20
    sort_by: str = "updated_at"
    sort_order: str = "desc"
    after: Cursor | None = None


@dataclass
class RunPage:
    runs: list[Run]
    next_position: Cursor | None  # where the next page starts; None on the last page
    attachments: dict[str, list[str]] = field(default_factory=dict)
    scan_stopped: bool = False  # a bounded scan (list_runs' scan_limit) ended the page early


def default_title(prompt: str | None, fallback: str = "Untitled run") -> str:
    """The first non-empty line of the prompt, at most 80 characters."""
    for line in (prompt or "").splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1].rstrip() + "…"
    return fallback


def build_run_row(now: dt.datetime, new: NewRun) -> dict[str, Any]:
    """The attribute values of ``new`` as a QUEUED run (``Run(**row)``), without touching a session.

    Lets a caller that creates many runs at once insert them with one statement (:func:`insert_runs`).
    """
    config = dict(new.agent_config)
    host = new.worker_host if new.worker_host is not None else config.get("worker_host")
    fallback = str(config.get("skill_spec") or "Untitled run")
    title = new.title
    return {
        "run_id": ids.new_id(ids.RUN),
        "team_id": new.team_id,
        "title": (title.strip() if title and title.strip() else default_title(new.prompt, fallback))[:500],
        "prompt": new.prompt,
        "state": RunState.QUEUED.value,
        "created_at": now,
        "updated_at": now,
        "queued_at": now,
        "agent_config": config,
        "config_name": _short(config.get("name")),
        "model_id": _short(config.get("model_id")),
        "source": new.source,
        "creator_type": new.creator.type,
        "creator_uid": new.creator.uid,
        "creator_display_name": new.creator.display_name,
        "run_metadata": dict(new.metadata or {}),
        "factory_uid": new.factory_uid,
        "automation_id": new.automation_id,
        "agent": new.agent,
        "webhook_uid": new.webhook_uid,
        "delivery_id": new.delivery_id,
        "conversation_id": new.conversation_id,
        "parent_run_id": new.parent_run_id,
        "schedule_id": new.schedule_id,
        "schedule": dict(new.schedule) if new.schedule is not None else None,
        "worker_host": worker_host_of(host if isinstance(host, str) else None),
        "attempt": 0,
        "cancel_requested": False,
        "log_lines": 0,
        "log_bytes": 0,
        "log_dropped": 0,
        "harness_type": preset_of(config),
    }


_RUNS: Table = Run.__table__  # type: ignore[assignment]
_ATTACHMENTS: Table = RunAttachment.__table__  # type: ignore[assignment]
_RUN_COLUMN_KEYS = {attr.key: attr.columns[0].key for attr in Run.__mapper__.column_attrs}
_INSERT_RUNS = insert(_RUNS)
_INSERT_ATTACHMENTS = insert(_ATTACHMENTS)


def insert_runs(conn: Connection, runs: Sequence[tuple[Mapping[str, Any], Sequence[NewAttachment]]]) -> None:
    """Insert runs built by :func:`build_run_row`, each with its attachments: one executemany per table
    (unique-index violations raise here). ``conn`` is a synchronous Core connection."""
    if not runs:
        return
    insert_rows(
        conn, _INSERT_RUNS, [{_RUN_COLUMN_KEYS[key]: value for key, value in row.items()} for row, _ in runs]
    )
    attachments = [
        {"run_id": row["run_id"], "file_name": a.file_name, "mime_type": a.mime_type, "data": a.data}
        for row, atts in runs
        for a in atts
    ]
    if attachments:
        insert_rows(conn, _INSERT_ATTACHMENTS, attachments)
    events.insert_created(conn, [row for row, _ in runs])


async def create_run(session: AsyncSession, clock: Clock, new: NewRun) -> Run:
    """Insert ``new`` as a QUEUED run with its attachments and flush (unique-index violations raise here)."""
    run = Run(**build_run_row(clock.now(), new))
    session.add(run)
    events.add_event(run, events.STATE, events.state_data(run.state, None, None, False), run.created_at)
    await session.flush()
    for att in new.attachments:
        session.add(
            RunAttachment(run_id=run.run_id, file_name=att.file_name, mime_type=att.mime_type, data=att.data)
        )
    if new.attachments:
        await session.flush()
    return run


def _short(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) and value else None


async def get_run(session: AsyncSession, team_id: str, run_id: str, *, for_update: bool = False) -> Run:
    """The team's run, or NotFound (also for another team's run).

    ``for_update`` locks the run until the transaction ends: ``SELECT ... FOR UPDATE`` on
    PostgreSQL; on SQLite a no-op UPDATE first takes the database write lock, so the read cannot go
    stale before the change is written (the same rule as :mod:`api.claims.queue`).
    """
    conds = (Run.run_id == run_id, Run.team_id == team_id)
    stmt = select(Run).where(*conds)
    if for_update:
        if session.get_bind().dialect.name == "sqlite":
            await session.execute(
                update(Run)
                .where(*conds)
                .values(updated_at=Run.updated_at)
                .execution_options(synchronize_session=False)
            )
        else:
            stmt = stmt.with_for_update(key_share=True)  # rows referencing the run may still be added
        stmt = stmt.execution_options(populate_existing=True)
    run = (await session.execute(stmt)).scalar_one_or_none()
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def apply_event(run: Run, event: RunEvent, now: dt.datetime) -> Transition:
    """Move ``run`` by ``event`` through the state machine (raises IllegalTransition) and stamp it; the
    change's ``state`` event joins the run's transaction (docs/events.md, "What is recorded")."""
    previous, previous_cancel = run.state, run.cancel_requested
    result = transition(RunState(run.state), event, cancel_requested=run.cancel_requested)
    run.state = result.to.value
    run.cancel_requested = result.cancel_requested
    if result.status_message is not None:
        run.status_message = dict(result.status_message)
    if result.to in TERMINAL:
        run.finished_at = now
        run.lease_owner = None
        run.lease_expires_at = None
    run.updated_at = now
    events.record_state(run, previous, previous_cancel, result.status_message, now)
    return result


async def cancel_run(session: AsyncSession, clock: Clock, team_id: str, run_id: str) -> Run:
    """QUEUED/PENDING/BLOCKED runs cancel at once; CLAIMED/INPROGRESS ones get ``cancel_requested``.

    A terminal run raises :class:`api.runs.states.IllegalTransition` (``invalid_request``).
    """
    run = await get_run(session, team_id, run_id, for_update=True)
    apply_event(run, RunEvent.CANCEL, clock.now())
    await session.flush()
    return run


async def add_followup(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    run_id: str,
    message: str,
    mode: str | None,
    *,
    limits: FollowupLimits = DEFAULT_FOLLOWUP_LIMITS,
) -> tuple[RunFollowup, str]:
    """Store a follow-up; returns it and the outcome the state machine decided.

    ``delivered``: the run is CLAIMED or INPROGRESS; the worker's next heartbeat receives it.
    ``queued``: the run has not been claimed; the follow-up goes out with the claim.
    ``requeued``: the run was BLOCKED or finished; it goes back to QUEUED as a continuation
    (times, status message and lease cleared; ``attempt`` counts claims, so the next claim bumps
    it) and the follow-up travels with the next claim. A CANCELLED run, or one being cancelled, raises
    :class:`api.runs.states.IllegalTransition` (``conflict``); one past ``limits`` of pending
    follow-ups raises :class:`api.runs.followup_limits.TooManyFollowups` (``409``).
    """
    run = await get_run(session, team_id, run_id, for_update=True)
    await check_pending(session, run.run_id, message, limits)
    now = clock.now()
    result = apply_event(run, RunEvent.FOLLOWUP, now)
    outcome = result.followup or "queued"
    if outcome == "requeued":
        run.queued_at = now
        run.started_at = None
        run.finished_at = None
        run.status_message = None
        run.lease_owner = None
        run.lease_expires_at = None
    followup = RunFollowup(
        id=ids.new_id(ids.FOLLOWUP),
        run_id=run.run_id,
        message=message,
        mode=mode,
        outcome=outcome,
        created_at=now,
        delivered_at=None,
    )
    session.add(followup)
    events.add_event(
        run, events.FOLLOWUP, {"followup_id": followup.id, "outcome": outcome, "message": message}, now
    )
    await session.flush()
    return followup, outcome


# Equality filters with a (team, column, created_at, run_id) index, in the order a bounded scan prefers them
# to drive its read (docs/console.md, "Runs at scale").
_INDEXED = ("state", "source", "factory_uid", "config_name", "creator")


def _shown_after(column: Any, bound: dt.datetime) -> ColumnElement[bool]:
    """``column`` as the API shows it (milliseconds) is after ``bound`` (docs/api.md, "Runs"); a range on
    the stored value, so the created-order index still serves it."""
    least = first_shown_after(bound)
    return false() if least is None else column >= least


def _shown_before(column: Any, bound: dt.datetime) -> ColumnElement[bool]:
    """``column`` as the API shows it is before ``bound``."""
    limit = first_shown_at_or_after(bound)
    return true() if limit is None else column < limit


def _conditions(
    team_id: str, filters: RunFilters
) -> tuple[list[ColumnElement[bool]], list[ColumnElement[bool]]]:
    """The filters as SQL conditions, split into those a runs index serves in created order (the team, the
    first indexed equality filter, the created range) and the rest."""
    indexed: list[ColumnElement[bool]] = [Run.team_id == team_id]
    rest: list[ColumnElement[bool]] = []
    equal: dict[str, ColumnElement[bool]] = {}
    if len(filters.states) == 1:
        equal["state"] = Run.state == filters.states[0]
    elif filters.states:
        rest.append(Run.state.in_(filters.states))
    for name, column, value in (
        ("config_name", Run.config_name, filters.config_name),
        ("model_id", Run.model_id, filters.model_id),
        ("creator", Run.creator_uid, filters.creator),
        ("source", Run.source, filters.source),
        ("factory_uid", Run.factory_uid, filters.factory_uid),
        ("automation_id", Run.automation_id, filters.automation_id),
        ("schedule_id", Run.schedule_id, filters.schedule_id),
    ):
        if value is not None:
            equal[name] = column == value
    driving = next((name for name in _INDEXED if name in equal), None)
    for name, cond in equal.items():
        (indexed if name == driving else rest).append(cond)
    if filters.created_after is not None:
        indexed.append(_shown_after(Run.created_at, filters.created_after))
    if filters.created_before is not None:
        indexed.append(_shown_before(Run.created_at, filters.created_before))
    if filters.updated_after is not None:
        rest.append(_shown_after(Run.updated_at, filters.updated_after))
    if filters.q:
        rest.append(
            or_(
                Run.title.icontains(filters.q, autoescape=True),
                Run.prompt.icontains(filters.q, autoescape=True),
            )
        )
    return indexed, rest


async def list_runs(
    session: AsyncSession,
    team_id: str,
    filters: RunFilters,
    page: PageRequest,
    *,
    scan_limit: int | None = None,
) -> RunPage:
    """One page of the team's runs, ordered by (sort key, run_id); raises InvalidCursor.

    With ``scan_limit``, a filter that no index serves in page order (a text search, a second equality
    filter) examines at most that many runs - the next ones in page order that match the indexed filters -
    per page: a page may then hold fewer runs than asked (even none) while ``next_position`` continues the
    search after the last run examined, and ``scan_stopped`` says so. Without it, such a filter scans until
    the page is full or the runs run out (all of them, for a value that matches nothing)."""
    column = SORT_COLUMNS[page.sort_by]
    descending = page.sort_order == "desc"
    keyset: list[ColumnElement[bool]] = []
    if page.after is not None:
        value: Any = page.after.value
        if page.sort_by != "title":
            value = parse_timestamp_key(value)
        elif value is None:
            raise InvalidCursor("cursor is not valid for a title sort")
        key = tuple_(column, Run.run_id)
        bound = tuple_(value, page.after.row_id)
        keyset.append(key < bound if descending else key > bound)
    indexed, rest = _conditions(team_id, filters)
    if scan_limit is None or not rest:
        stmt = select(Run).where(*indexed, *rest, *keyset).order_by(*_order(column, descending))
        rows, last = split_page(
            list((await session.execute(stmt.limit(page.limit + 1))).scalars()), page.limit
        )
        return RunPage(
            runs=rows,
            next_position=_position_of(last, page.sort_by),
            attachments=await attachment_names(session, rows),
        )
    # The runs this page may examine: the next scan_limit in page order that the indexed filters select.
    examined = select(Run.run_id, column).where(*indexed, *keyset).order_by(*_order(column, descending))
    scanned = examined.limit(scan_limit).subquery()
    stmt = select(Run).join(scanned, Run.run_id == scanned.c.run_id).where(*rest)
    stmt = stmt.order_by(*_order(column, descending))
    rows, last = split_page(list((await session.execute(stmt.limit(page.limit + 1))).scalars()), page.limit)
    position, stopped = _position_of(last, page.sort_by), False
    if last is None:  # the page is not full: the last run it could examine, if there were that many
        edge = (await session.execute(examined.offset(scan_limit - 1).limit(1))).first()
        if edge is not None:  # (run_id, the sort column)
            position, stopped = _cursor(page.sort_by, cast(Any, edge[1]), edge[0]), True
    return RunPage(
        runs=rows,
        next_position=position,
        attachments=await attachment_names(session, rows),
        scan_stopped=stopped,
    )


def _order(column: Any, descending: bool) -> tuple[Any, Any]:
    return (column.desc(), Run.run_id.desc()) if descending else (column.asc(), Run.run_id.asc())


def _position_of(last: Run | None, sort_by: str) -> Cursor | None:
    return None if last is None else _cursor(sort_by, getattr(last, sort_by), last.run_id)


def _cursor(sort_by: str, key_value: Any, row_id: str) -> Cursor:
    """The position after the run with ``row_id`` whose sort column holds ``key_value`` (a title, or a
    datetime kept as its timestamp key)."""
    return Cursor(value=key_value if sort_by == "title" else timestamp_key(key_value), row_id=row_id)


async def attachment_names(session: AsyncSession, runs: Sequence[Run]) -> dict[str, list[str]]:
    """File names of the given runs' attachments (one query), keyed by run id."""
    out: dict[str, list[str]] = {r.run_id: [] for r in runs}
    if not runs:
        return out
    stmt = (
        select(RunAttachment.run_id, RunAttachment.file_name)
        .where(RunAttachment.run_id.in_(list(out)))
        .order_by(RunAttachment.run_id, RunAttachment.file_name)
    )
    for run_id, name in (await session.execute(stmt)).all():
        out[run_id].append(name)
    return out


async def list_logs(
    session: AsyncSession, team_id: str, run_id: str, *, after: int, limit: int
) -> tuple[list[RunLog], bool]:
    """Log lines of a run with ``id > after``, oldest first; returns them and whether more exist."""
    await get_run(session, team_id, run_id)
    stmt = (
        select(RunLog).where(RunLog.run_id == run_id, RunLog.id > after).order_by(RunLog.id).limit(limit + 1)
    )
    rows = list((await session.execute(stmt)).scalars())
    return rows[:limit], len(rows) > limit
