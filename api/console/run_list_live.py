"""``GET /console/runs/events``: the runs list's live feed (docs/console.md, "Live pages").

The team's run state changes as Server-Sent Events, read from the same ordered event log as the API's team
stream (``GET /api/v1/agent/events``, docs/events.md, "Team stream": :func:`api.runs.events.read_ordered`,
positions as SSE ids, the shared hub, cap and wake-ups), authenticated by the console session and counted
against its key. Only ``state`` events are sent, each as ``{run_id, state, created_at}``: ``static/runs.js``
updates a shown run's pill in place and reloads the list when a run it does not show appears.
"""

from __future__ import annotations

from aiohttp import web

from api.console.security import signed_in
from api.context import SESSIONS
from api.runs import events
from api.runs.event_hub import SseWriter, event_frame, serve_sse
from api.runs.stream_grants import Grant
from api.runs.team_stream import parse_resume


async def _follow(
    app: web.Application, writer: SseWriter, team_id: str, position: events.Position, resumed: bool
) -> None:
    """Send each state event after ``position`` until the stream ends (its session or the app). A stream
    that starts live first sends its position (an id-only frame), so a reconnect before the first event
    resumes there rather than starting live again."""
    hub = writer.hub
    if not resumed:
        await writer.send(f"id: {events.format_position(position)}\n\n".encode())
    while writer.open:
        wake = hub.signal.current()
        async with app[SESSIONS]() as session:
            rows = await events.read_ordered(session, position, hub.settings.batch, team_id=team_id)
        for row in rows:
            position = events.position_of(row)
            if row.kind == events.STATE:
                body = {
                    "run_id": row.run_id,
                    "state": str((row.data or {}).get("state", "")),
                    "created_at": events.event_json(row)["created_at"],
                }
                await writer.send(event_frame(events.format_position(position), events.STATE, body))
        if len(rows) < hub.settings.batch:
            await writer.pause(wake)


async def runs_events(request: web.Request) -> web.StreamResponse:
    """The feed; it resumes after ``Last-Event-ID`` (a reconnecting browser) or starts at the newest event."""
    user = await signed_in(request)
    resume = parse_resume(request)
    start = resume
    if start is None:
        async with request.app[SESSIONS]() as session:
            start = await events.latest_position(session, team_id=user.team_id)
    position = start

    async def follow(writer: SseWriter) -> None:
        await _follow(request.app, writer, user.team_id, position, resume is not None)

    return await serve_sse(request, Grant(user.key_id, user.session_id), follow, f"runs of {user.team_id}")


def setup(app: web.Application) -> None:
    """Register the feed (before ``/console/runs/{run_id}``, which would otherwise take the path)."""
    app.router.add_get("/console/runs/events", runs_events)


__all__ = ["runs_events", "setup"]
