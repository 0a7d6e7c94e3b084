"""The outbox's first half: committed run state events become one message per subscribed endpoint.

The outbox *is* the run event log (docs/notifications.md, "At least once"): every state change writes its
``state`` event in the change's own transaction (:mod:`api.runs.events`), so a committed change always has
its event and a rolled-back one never does. This module reads those events in commit order
(:func:`api.runs.events.read_ordered`, the same cursor the team stream uses), matches each against the
team's enabled endpoints (:func:`store.rules.notification_rules.matches`) and inserts the messages, freezing
their body. The position read up to is stored in ``notification_cursor`` and moved in the same
transaction as the messages it produced; the unique (endpoint, event) pair makes a second insert of a
message a no-op, so a fan-out repeated after a crash produces nothing twice.

Replicas take turns without locks while reading: a turn moves the cursor with a compare-and-set from the
position it read, so of two replicas reading the same events one writes their messages and the other
writes nothing. An endpoint hears only of events written after
it was created, and a fresh cursor starts at the newest event, never at the start of history.

A scorer's judgement (a ``score`` event) is read past the same cursor and becomes a ``run.scored`` message
(:mod:`api.notifications.scores`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Final

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.notifications.scores import SCORED, is_score, run_part, score_body, score_facts
from api.runs import events
from api.runs.artifacts import artifacts_of
from api.runs.event_cursors import advance_cursor, read_cursor
from store import ids
from store.clock import Clock, rfc3339
from store.models import (
    Automation,
    Factory,
    NotificationEndpoint,
    NotificationMessage,
    Run,
    RunEvent,
)
from store.rules.notification_rules import RunFacts, event_type, is_change, matches

CURSOR: Final = "fanout"
PENDING: Final = "pending"
_MESSAGES: Table = NotificationMessage.__table__  # type: ignore[assignment]


def _insert_messages(dialect: str) -> Any:
    insert_ = sqlite.insert if dialect == "sqlite" else postgresql.insert
    return insert_(_MESSAGES).on_conflict_do_nothing(
        index_elements=[_MESSAGES.c.endpoint_uid, _MESSAGES.c.event_id]
    )


_INSERT: Final = {dialect: _insert_messages(dialect) for dialect in ("sqlite", "postgresql")}


async def _endpoints(session: AsyncSession, teams: Iterable[str]) -> dict[str, list[NotificationEndpoint]]:
    stmt = select(NotificationEndpoint).where(
        NotificationEndpoint.team_id.in_(sorted(set(teams))), NotificationEndpoint.enabled.is_(True)
    )
    out: dict[str, list[NotificationEndpoint]] = defaultdict(list)
    for endpoint in await session.scalars(stmt):
        out[endpoint.team_id].append(endpoint)
    return out


async def _runs(session: AsyncSession, run_ids: Iterable[str]) -> dict[str, Any]:
    """What a message says about each run, with its factory's and automation's names, in one query."""
    stmt = (
        select(
            Run.run_id,
            Run.state,
            Run.title,
            Run.source,
            Run.factory_uid,
            Run.automation_id,
            Run.schedule_id,
            Run.created_at,
            Factory.name.label("factory_name"),
            Automation.name.label("automation_name"),
        )
        .outerjoin(Factory, Factory.uid == Run.factory_uid)
        .outerjoin(Automation, Automation.uid == Run.automation_id)
        .where(Run.run_id.in_(sorted(set(run_ids))))
    )
    return {row.run_id: row for row in await session.execute(stmt)}


def _payload(event: RunEvent, run: Any, artifacts: Sequence[dict[str, Any]] | None = None) -> str:
    """The message body (docs/notifications.md, "The message"), frozen when the message is made; a
    terminal state's carries the run's ``artifacts`` (the run API's ``ArtifactItem`` list)."""
    data = event.data
    body: dict[str, Any] = {
        "type": event_type(data["state"]),
        "timestamp": rfc3339(event.created_at),
        "data": {
            "run_id": event.run_id,
            "state": data["state"],
            "previous_state": data.get("previous_state"),
            "status_message": data.get("status_message"),
            "error_code": data.get("error_code"),
            **run_part(event, run),
        },
    }
    if artifacts is not None:
        body["data"]["artifacts"] = list(artifacts)
    return _encode(body)


def _encode(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _messages(
    changes: Sequence[RunEvent],
    endpoints: dict[str, list[NotificationEndpoint]],
    runs: dict[str, Any],
    now: dt.datetime,
    artifacts: dict[str, list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for event in changes:
        run = runs.get(event.run_id)
        if run is None:
            continue  # deleted since (retention): its events went with it
        facts = _facts(event, run)
        kind = SCORED if is_score(event) else event_type(facts.state)
        body: str | None = None
        for endpoint in endpoints.get(event.team_id, ()):
            if event.created_at < endpoint.created_at:
                continue
            if not matches(endpoint.events, endpoint.filter, endpoint.factory_uid, facts):
                continue
            body = body or _body(event, run, artifacts or {})
            rows.append(
                {
                    "id": ids.new_id(ids.MESSAGE),
                    "team_id": event.team_id,
                    "endpoint_uid": endpoint.uid,
                    "run_id": event.run_id,
                    "event_id": event.id,
                    "event_type": kind,
                    "payload": body,
                    "status": PENDING,
                    "attempts": 0,
                    "manual": False,
                    "next_attempt_at": now,
                    "created_at": now,
                }
            )
    return rows


def _facts(event: RunEvent, run: Any) -> RunFacts:
    """What the endpoints' match looks at: the change, or (a judgement) the run's current state."""
    if is_score(event):
        return score_facts(run)
    return RunFacts(
        state=event.data["state"],
        previous_state=event.data.get("previous_state"),
        factory_uid=run.factory_uid,
        factory_name=run.factory_name,
        automation_name=run.automation_name,
        source=run.source,
    )


def _body(event: RunEvent, run: Any, artifacts: dict[str, list[dict[str, Any]]]) -> str:
    """A message's body: a judgement's, or a state change's (with artifacts when the run ended)."""
    if is_score(event):
        return _encode(score_body(event, run))
    return _payload(event, run, artifacts.get(event.run_id, []) if _ended(event) else None)


def _ended(event: RunEvent) -> bool:
    return event.kind == events.STATE and events.is_terminal(event.data["state"])


def _notifies(event: RunEvent) -> bool:
    """A change of state, or a scorer's judgement."""
    if event.kind == events.STATE:
        return is_change(event.data["state"], event.data.get("previous_state"))
    return is_score(event)


async def fan_out(session: AsyncSession, clock: Clock, *, batch: int = 2000, rounds: int = 5) -> int:
    """One turn: read up to ``rounds`` batches of events past the cursor, make their messages, and — if
    the cursor was still where this turn found it — move it and write them. Returns how many messages
    were written. Reading takes no lock, so ingress is never held up by a fan-out. The caller commits."""
    start = await read_cursor(session, CURSOR, clock.now())
    if start is None:
        return 0
    latest = await events.latest_position(session)  # read before the endpoints, so none is missed
    if latest <= start:
        return 0  # nothing new: every idle turn of every replica ends here, after two reads
    listening = select(NotificationEndpoint.uid).where(NotificationEndpoint.enabled.is_(True)).limit(1)
    if await session.scalar(listening) is None:
        # nobody listens: skip to the newest event without reading the ones in between
        await advance_cursor(session, CURSOR, start, latest, clock.now())
        return 0
    position = start
    messages: list[dict[str, Any]] = []
    for _ in range(rounds):
        rows = await events.read_ordered(session, position, batch)
        if not rows:
            break
        position = events.position_of(rows[-1])
        changes = [e for e in rows if _notifies(e)]
        if changes:
            endpoints = await _endpoints(session, (e.team_id for e in changes))
            if endpoints:
                runs = await _runs(session, (e.run_id for e in changes))
                ended = sorted({e.run_id for e in changes if _ended(e)})
                found = await artifacts_of(session, ended)  # one query for the batch's finished runs
                messages += _messages(changes, endpoints, runs, clock.now(), found)
        if len(rows) < batch:
            break
    if position == start or not await advance_cursor(session, CURSOR, start, position, clock.now()):
        return 0
    if messages:
        await session.execute(_INSERT[session.get_bind().dialect.name], messages)
    return len(messages)


__all__ = ["CURSOR", "fan_out"]
