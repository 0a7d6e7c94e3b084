"""``GET /api/v1/agent/runs/{run_id}/events``: a run's event log as Server-Sent Events (docs/events.md).

A stream replays the run's events after ``Last-Event-ID`` (or ``?after=``), then follows new ones until it
has sent everything up to a terminal state. Delivery is "poll by id": the stream reads ``id > last`` for its
run whenever this app's :class:`EventHub` wakes it. The hub wakes streams at once after a commit in this
process that wrote events (:func:`notify_events`), and otherwise when one cheap ``max(id)`` probe, run every
``poll_seconds`` while any stream is open, sees the log grow — that is how an event committed by another
replica (or by a path that does not notify) arrives within ``poll_seconds`` (docs/events.md, "Ordering and
delivery"). Open streams are capped per API key and closed when the app shuts down ("Bounds").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import func, select

from api.auth import require
from api.context import SESSIONS
from api.errors import BadRequest, RateLimited
from api.http.paths import API_V1
from api.periodic import periodic
from api.runs import events
from api.runs import records as runs
from api.runs.claim_signal import ClaimSignal
from store.models import Run, RunEvent

log = logging.getLogger("factoryctl.events")
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class StreamSettings:
    """docs/events.md, "Bounds": tests shorten the intervals on a live app."""

    heartbeat_seconds: float = 15.0  # a ``: heartbeat`` comment after this long without a write
    poll_seconds: float = 0.25  # how often other replicas' events are looked for (≤ the 1 s promise)
    max_streams_per_key: int = 20  # more open streams of one API key answer 429
    batch: int = 500  # events read per query
    retry_ms: int = 2000  # the ``retry:`` hint: how long a client waits before reconnecting
    shutdown_grace_seconds: float = 5.0  # streams still running after this are cancelled


class EventHub:
    """One app's open event streams: their wake-up, their count per key, their tasks."""

    def __init__(self, settings: StreamSettings | None = None) -> None:
        self.settings = settings or StreamSettings()
        self.signal = ClaimSignal()
        self.closing = False
        self.open_by_key: collections.Counter[str] = collections.Counter()
        self.tasks: set[asyncio.Task[object]] = set()
        self._last_seen: int | None = None

    @contextlib.contextmanager
    def stream(self, key_id: str) -> Iterator[None]:
        """Count one open stream of ``key_id`` (429 beyond the cap) and track its task until it ends."""
        if self.closing:
            raise RateLimited("the server is shutting down; reconnect to another replica")
        if self.open_by_key[key_id] >= self.settings.max_streams_per_key:
            raise RateLimited(
                f"at most {self.settings.max_streams_per_key} event streams may be open per API key"
            )
        self.open_by_key[key_id] += 1
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            yield
        finally:
            self.open_by_key[key_id] -= 1
            if not self.open_by_key[key_id]:
                del self.open_by_key[key_id]
            if task is not None:
                self.tasks.discard(task)

    async def probe(self, app: web.Application) -> None:
        """Wake the streams when the event log grew since the last probe (any writer, any replica)."""
        if not self.tasks:
            self._last_seen = None
            return
        async with app[SESSIONS]() as session:
            newest = await session.scalar(select(func.max(RunEvent.id)))
        if newest is not None and newest != self._last_seen:
            self._last_seen = newest
            self.signal.wake()

    async def close(self) -> None:
        """End every open stream (they finish their current write and return), then cancel stragglers."""
        self.closing = True
        self.signal.wake()
        pending = {t for t in self.tasks if t is not asyncio.current_task()}
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=self.settings.shutdown_grace_seconds)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)


EVENT_HUB = web.AppKey("event_hub", EventHub)


def notify_events(app: web.Application) -> None:
    """Wake this process's streams after a commit that wrote events (call after the commit)."""
    hub = app.get(EVENT_HUB)
    if hub is not None:
        hub.signal.wake()


def _after(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID")
    source = "Last-Event-ID"
    if raw is None:
        raw, source = request.query.get("after", "0"), "after"
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequest(f"{source} must be a non-negative integer (an event id)")
    return int(raw)


def _frame(event: RunEvent) -> bytes:
    data = json.dumps(events.event_json(event), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()


async def _follow(
    app: web.Application, hub: EventHub, resp: web.StreamResponse, run_id: str, after: int
) -> None:
    """Replay, then follow, until caught up with a terminal run (or the run is gone, or the app stops).

    The run's state is read *before* its events: if it was terminal then, its terminal event is already
    committed and this read returns it, so the stream never ends before sending it.
    """
    settings, last, last_write = hub.settings, after, time.monotonic()
    while not hub.closing:
        wake = hub.signal.current()
        async with app[SESSIONS]() as session:
            state = await session.scalar(select(Run.state).where(Run.run_id == run_id))
            rows = await events.read_after(session, run_id, last, settings.batch)
        for row in rows:
            await resp.write(_frame(row))
            last, last_write = row.id, time.monotonic()
        if len(rows) == settings.batch:
            continue
        if state is None or events.is_terminal(state):
            return
        idle = time.monotonic() - last_write
        if idle >= settings.heartbeat_seconds:
            await resp.write(b": heartbeat\n\n")
            last_write = time.monotonic()
            continue
        await ClaimSignal.wait(wake, settings.heartbeat_seconds - idle)


async def run_events(request: web.Request) -> web.StreamResponse:
    who = await require(request, "member")
    hub = request.app[EVENT_HUB]
    run_id = request.match_info["run_id"]
    after = _after(request)
    async with request.app[SESSIONS]() as session:
        await runs.get_run(session, who.team_id, run_id)  # 404 for a missing or another team's run
    with hub.stream(who.key_id):
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        try:
            await resp.write(f"retry: {hub.settings.retry_ms}\n\n".encode())
            await _follow(request.app, hub, resp, run_id, after)
            await resp.write_eof()
        except ConnectionResetError:  # the client went away; nothing to finish
            log.debug("event stream of %s: the client disconnected", run_id)
    return resp


async def _close_streams(app: web.Application) -> None:
    await app[EVENT_HUB].close()


def setup(app: web.Application) -> None:
    app[EVENT_HUB] = EventHub()
    app.router.add_get(API_V1 + "/agent/runs/{run_id}/events", run_events)
    # The probe: one cheap max(id) per poll interval while streams are open (a no-op otherwise).
    app.cleanup_ctx.append(
        periodic(
            "run-events-probe",
            lambda app: app[EVENT_HUB].settings.poll_seconds,
            lambda app: app[EVENT_HUB].probe(app),
            log=log,
        )
    )
    app.on_shutdown.append(_close_streams)
