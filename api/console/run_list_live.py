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
from api.runs.states import RunState
from api.runs.stream_grants import Grant
from api.runs.team_stream import TeamFilter, follow_team, parse_resume
from store.models import RunEvent

STATE_CHANGES = TeamFilter(states=frozenset(RunState.__members__))  # every state event, nothing else


def _state_frame(event: RunEvent, cursor: str) -> bytes:
    """What ``static/runs.js`` needs of a state event: ``{run_id, state, created_at}``."""
    body = {
        "run_id": event.run_id,
        "state": str((event.data or {}).get("state", "")),
        "created_at": events.event_json(event)["created_at"],
    }
    return event_frame(cursor, events.STATE, body)


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
        await follow_team(
            request.app, writer, user.team_id, STATE_CHANGES, position, resume is not None, frame=_state_frame
        )

    return await serve_sse(request, Grant(user.key_id, user.session_id), follow, f"runs of {user.team_id}")


def setup(app: web.Application) -> None:
    """Register the feed (before ``/console/runs/{run_id}``, which would otherwise take the path)."""
    app.router.add_get("/console/runs/events", runs_events)


__all__ = ["runs_events", "setup"]
