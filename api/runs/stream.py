"""``GET /api/v1/agent/runs/{run_id}/events``: a run's event log as Server-Sent Events (docs/events.md).

A stream replays the run's events after ``Last-Event-ID`` (or ``?after=``), then follows new ones until it
has sent everything up to a terminal state; a finished run with nothing after that id answers ``204``.
Delivery is "poll by id": the stream reads ``id > last`` for its run whenever the app's
:class:`~api.runs.event_hub.EventHub` wakes it (docs/events.md, "Ordering and delivery"). The hub, the
per-key cap, heartbeats and shutdown are shared with the team stream (:mod:`api.runs.team_stream`);
:func:`setup` registers both.
"""

from __future__ import annotations

from aiohttp import web
from sqlalchemy import select

from api.auth import require
from api.context import SESSIONS
from api.errors import BadRequest
from api.http.paths import API_V1
from api.runs import events, team_stream
from api.runs import records as runs
from api.runs.event_hub import SseWriter, event_frame, install, resume_from, serve_sse
from api.runs.stream_grants import Grant
from store.models import Run, RunEvent


def _after(request: web.Request) -> int:
    raw, source = resume_from(request)
    raw = ("0" if raw is None else raw).strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequest(f"{source} must be a non-negative integer (an event id)")
    return int(raw)


def _frame(event: RunEvent) -> bytes:
    return event_frame(str(event.id), event.kind, events.event_json(event))


async def _follow(app: web.Application, writer: SseWriter, run_id: str, after: int) -> None:
    """Replay, then follow, until caught up with a terminal run (or the run is gone, or the app stops).

    The run's state is read *before* its events: if it was terminal then, its terminal event is already
    committed and this read returns it, so the stream never ends before sending it.
    """
    hub, last = writer.hub, after
    while writer.open:
        wake = hub.signal.current()
        async with app[SESSIONS]() as session:
            state = await session.scalar(select(Run.state).where(Run.run_id == run_id))
            rows = await events.read_after(session, run_id, last, hub.settings.batch)
        for row in rows:
            await writer.send(_frame(row))
            last = row.id
        if len(rows) == hub.settings.batch:
            continue
        if state is None or events.is_terminal(state):
            return
        await writer.pause(wake)


async def stream_run(request: web.Request, team_id: str, grant: Grant) -> web.StreamResponse:
    """The event stream of the request's ``{run_id}`` for a caller already authenticated as a member of
    ``team_id`` with ``grant`` (counted against its key's stream cap, ended when it no longer holds): the
    API (:func:`run_events`) and the console (``/console/runs/{run_id}/events``, a session and its key)
    differ only in how they authenticate."""
    run_id = request.match_info["run_id"]
    after = _after(request)
    async with request.app[SESSIONS]() as session:
        run = await runs.get_run(session, team_id, run_id)  # 404 for a missing or another team's run
        # Read after the run, as _follow does: a terminal run's terminal event is already readable.
        over = events.is_terminal(run.state) and not await events.read_after(session, run_id, after, 1)
    if over:
        # Nothing will ever follow: 204 is what stops a browser's EventSource from reconnecting (a stream that
        # ends with a 200 is reconnected to every retry interval; docs/events.md, "Ordering and delivery").
        return web.Response(status=204, headers={"Cache-Control": "no-cache"})

    async def follow(writer: SseWriter) -> None:
        await _follow(request.app, writer, run_id, after)

    return await serve_sse(request, grant, follow, run_id)


async def run_events(request: web.Request) -> web.StreamResponse:
    who = await require(request, "member")
    return await stream_run(request, who.team_id, Grant(who.key_id))


def setup(app: web.Application) -> None:
    install(app)
    app.router.add_get(API_V1 + "/agent/runs/{run_id}/events", run_events)
    app.router.add_get(API_V1 + "/agent/events", team_stream.team_events)


__all__ = ["run_events", "setup", "stream_run"]
