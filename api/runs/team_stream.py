"""``GET /api/v1/agent/events``: the team's run events as Server-Sent Events (docs/events.md, "Team stream").

Dashboards follow every run of a team on one connection. The stream reads the team's events in (txid, id)
order below the commit horizon (:func:`api.runs.events.read_ordered`), so an event that commits after one
with a higher id is still delivered, once and in order; the SSE id is that position as an opaque cursor.
The team's streams in this process share one reader (:mod:`api.runs.team_feed`).
Filters (``factory_uid``, ``state``, ``logs``) are applied here, after the read, and the scan position moves
past every row read — matching or not — so a filtered-out firehose is read once, never again; when the
rows after the last sent event were all filtered out, an id-only frame tells the client where the scan
stands, and a reconnect does not read them again either. The stream never ends by itself: heartbeats keep
it open until the client leaves or the app shuts down. The hub, cap and wake-ups are shared with a run's
stream (:mod:`api.runs.event_hub`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from multidict import MultiMapping

from api.auth import require
from api.context import SESSIONS
from api.errors import BadRequest
from api.runs import events
from api.runs.event_hub import SseWriter, event_frame, resume_from, serve_sse
from api.runs.states import RunState
from api.runs.stream_grants import Grant
from store.models import RunEvent

_BOOLEANS: Final = {"true": True, "1": True, "false": False, "0": False}
_BIGINT_MAX: Final = 2**63 - 1  # both halves of a position are BIGINT columns
_LOG_KINDS: Final = events.OUTPUT  # log lines and the agent's transcript


@dataclass(frozen=True)
class TeamFilter:
    """Which of the team's events a stream sends (docs/events.md, "Team stream")."""

    factory_uids: frozenset[str] = frozenset()  # empty: every run, with a factory or not
    states: frozenset[str] = frozenset()  # non-empty: only ``state`` events entering one of them
    logs: bool = False  # ``log``, ``truncated`` and transcript events too

    def matches(self, event: RunEvent) -> bool:
        if self.factory_uids and event.factory_uid not in self.factory_uids:
            return False
        if self.states:
            return event.kind == events.STATE and event.data.get("state") in self.states
        return self.logs or event.kind not in _LOG_KINDS


def _values(query: MultiMapping[str], name: str) -> Iterator[str]:
    """Every value of a repeatable, comma-separated query parameter; an empty one is a 400."""
    for raw in query.getall(name, []):
        for part in raw.split(","):
            part = part.strip()
            if not part:
                raise BadRequest(f"{name} must not be empty")
            yield part


def parse_filter(query: MultiMapping[str]) -> TeamFilter:
    states: set[str] = set()
    for part in _values(query, "state"):
        if part.upper() not in RunState.__members__:
            raise BadRequest(f"state {part!r} is not one of {', '.join(RunState.__members__)}")
        states.add(part.upper())
    raw_logs = query.get("logs", "false").strip().lower()
    if raw_logs not in _BOOLEANS:
        raise BadRequest("logs must be true or false")
    logs = _BOOLEANS[raw_logs]
    if states and logs:
        raise BadRequest("state selects state events only; it cannot be combined with logs=true")
    return TeamFilter(frozenset(_values(query, "factory_uid")), frozenset(states), logs)


def parse_resume(request: web.Request) -> events.Position | None:
    """The position to resume after (``Last-Event-ID``, else ``?after=``), or None to start live."""
    raw, source = resume_from(request)
    if raw is None:
        return None
    try:
        position = events.parse_position(raw) if raw.isascii() else None  # no Unicode digits
    except ValueError:
        position = None
    if position is None:
        raise BadRequest(f"{source} must be an event cursor (the id of a team stream event)")
    if max(position) > _BIGINT_MAX:
        raise BadRequest(f"{source} is not a cursor this server wrote")
    return position


def _frame(event: RunEvent, cursor: str) -> bytes:
    """The run stream's JSON plus ``factory_uid`` and ``cursor`` (the SSE id, kept for stored events)."""
    body = {**events.event_json(event), "factory_uid": event.factory_uid, "cursor": cursor}
    return event_frame(cursor, event.kind, body)


def _position_frame(position: events.Position) -> bytes:
    """An id without data: moves the client's ``Last-Event-ID`` without delivering an event."""
    return f"id: {events.format_position(position)}\n\n".encode()


Frame = Callable[[RunEvent, str], bytes]
"""``frame(event, cursor)``: the SSE frame of one event a stream sends."""


async def follow_team(
    app: web.Application,
    writer: SseWriter,
    team_id: str,
    wanted: TeamFilter,
    position: events.Position,
    resumed: bool,
    *,
    frame: Frame = _frame,
) -> None:
    """Read on from ``position`` until the app stops; every read starts after the last row read. The API's
    team stream and the console's runs feed (``frame``: each one's body) follow the team this one way.

    A stream that starts live first tells the client its starting position, so a reconnect before the
    first event resumes there instead of starting live again (and missing what happened in between)."""
    hub, told = writer.hub, position  # told: the position the client would resume from
    if not resumed:
        await writer.send(_position_frame(position))
    with hub.team_feed(team_id) as feed:  # the team's events are read once for all its streams
        while writer.open:
            wake = hub.signal.current()
            batch = await feed.after(app[SESSIONS], position, hub.signal, wake)
            for row in batch.rows:
                position = events.position_of(row)
                if wanted.matches(row):
                    told = position
                    await writer.send(frame(row, events.format_position(position)))
            if batch.more:
                continue
            if told != position:  # only filtered-out rows since the last event: move the client past them
                told = position
                await writer.send(_position_frame(position))
            await writer.pause(wake)


async def team_events(request: web.Request) -> web.StreamResponse:
    who = await require(request, "member")
    wanted = parse_filter(request.query)
    resume = parse_resume(request)
    start = resume
    if start is None:
        async with request.app[SESSIONS]() as session:
            start = await events.latest_position(session, team_id=who.team_id)

    async def follow(writer: SseWriter) -> None:
        await follow_team(request.app, writer, who.team_id, wanted, start, resume is not None)

    return await serve_sse(request, Grant(who.key_id), follow, f"team {who.team_id}")


__all__ = ["TeamFilter", "follow_team", "parse_filter", "parse_resume", "team_events"]
