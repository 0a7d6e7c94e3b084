"""What every event stream of an app shares (docs/events.md, "Ordering and delivery" and "Bounds").

Both stream kinds — a run's (:mod:`api.runs.stream`) and the team's (:mod:`api.runs.team_stream`) — are
served by :func:`serve_sse`: one :class:`EventHub` per app counts their open streams per API key (one cap
for both kinds), tracks their tasks so shutdown can end them, and wakes them. A stream wakes at once after a
commit in this process that wrote events (:func:`notify_events`), and otherwise when the probe, run every
``poll_seconds`` while any stream is open, sees the event log change: that is how an event committed by
another replica, or by a path that does not notify, arrives within ``poll_seconds``. The same probe re-checks
the credentials of every open stream every ``auth_check_seconds`` (:mod:`api.runs.stream_grants`) and ends
the streams of a revoked key or an ended console session (docs/events.md, "Revocation and sign-out").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from api.context import CLOCK, SESSIONS
from api.errors import RateLimited
from api.periodic import periodic
from api.runs import events, stream_grants
from api.runs.claim_signal import ClaimSignal, wake_claimers
from api.runs.stream_grants import Grant
from api.runs.team_feed import TeamFeed

log = logging.getLogger("factoryctl.events")
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class StreamSettings:
    """docs/events.md, "Bounds": tests shorten the intervals on a live app."""

    heartbeat_seconds: float = 15.0  # a ``: heartbeat`` comment after this long without a write
    poll_seconds: float = 0.25  # how often other replicas' events are looked for (≤ the 1 s promise)
    max_streams_per_key: int = 20  # more open streams of one API key (both kinds together) answer 429
    batch: int = 500  # events read per query
    retry_ms: int = 2000  # the ``retry:`` hint: how long a client waits before reconnecting
    shutdown_grace_seconds: float = 5.0  # streams still running after this are cancelled
    auth_check_seconds: float = 2.0  # how often open streams' keys and console sessions are re-checked
    # A stream reads at most this often: a burst of commits (every ingress batch and worker write wakes every
    # stream) costs one read per stream, not one per commit.
    min_read_interval: float = 0.1


@dataclass(eq=False)
class Ticket:
    """One open stream: what it was opened with, its task, and since when it must end (monotonic seconds;
    None while its grant holds)."""

    grant: Grant
    task: asyncio.Task[object] | None
    ended_at: float | None = None


class EventHub:
    """One app's open event streams: their wake-up, their count per key, their tasks."""

    def __init__(self, settings: StreamSettings | None = None) -> None:
        self.settings = settings or StreamSettings()
        self.signal = ClaimSignal()
        self.closing = False
        self.open_by_key: collections.Counter[str] = collections.Counter()
        self.tickets: set[Ticket] = set()
        self._last_seen: tuple[int | None, int | None] | None = None
        self.team_feeds: dict[str, TeamFeed] = {}
        self._next_grant_check = 0.0

    @property
    def tasks(self) -> set[asyncio.Task[object]]:
        """The tasks of the open streams (what :meth:`close` waits for)."""
        return {t.task for t in self.tickets if t.task is not None}

    @contextlib.contextmanager
    def stream(self, grant: Grant) -> Iterator[Ticket]:
        """Count one open stream of ``grant``'s key (429 beyond the cap) and track it until it ends."""
        key_id = grant.key_id
        if self.closing:
            raise RateLimited("the server is shutting down; reconnect to another replica")
        if self.open_by_key[key_id] >= self.settings.max_streams_per_key:
            raise RateLimited(
                f"at most {self.settings.max_streams_per_key} event streams may be open per API key"
            )
        self.open_by_key[key_id] += 1
        ticket = Ticket(grant, asyncio.current_task())
        self.tickets.add(ticket)
        try:
            yield ticket
        finally:
            self.tickets.discard(ticket)
            self.open_by_key[key_id] -= 1
            if not self.open_by_key[key_id]:
                del self.open_by_key[key_id]

    @contextlib.contextmanager
    def team_feed(self, team_id: str) -> Iterator[TeamFeed]:
        """The team's shared reader (:mod:`api.runs.team_feed`) while one of its streams is open."""
        feed = self.team_feeds.get(team_id)
        if feed is None:
            feed = self.team_feeds[team_id] = TeamFeed(team_id, self.settings.batch)
        feed.users += 1
        try:
            yield feed
        finally:
            feed.users -= 1
            if not feed.users:
                del self.team_feeds[team_id]

    async def probe(self, app: web.Application) -> None:
        """Wake the streams when the event log changed since the last probe (any writer, any replica).

        One statement, two index lookups (:func:`api.runs.events.change_marks`): ``max(id)`` grows when
        any event commits (what a run's stream reads), and the newest event below the commit horizon
        changes exactly when an event becomes readable in (txid, id) order (what the team stream reads) —
        including one that committed after a higher id, or that a running transaction held back, which
        leaves ``max(id)`` unchanged (docs/events.md, "Team stream").
        """
        if not self.tickets:
            self._last_seen = None
            return
        async with app[SESSIONS]() as session:
            marks = await events.change_marks(session)
        if marks != self._last_seen:
            self._last_seen = marks
            self.signal.wake()
        if time.monotonic() >= self._next_grant_check:
            await self.check_grants(app)

    async def check_grants(self, app: web.Application) -> None:
        """End the streams whose key was revoked or whose console session ended, on any replica: one query
        per 500 distinct keys and sessions of this app's open streams, at most every
        ``auth_check_seconds``. An ended stream finishes its current write and returns; one still running
        ``shutdown_grace_seconds`` later (a client that stopped reading) is cancelled."""
        now = time.monotonic()
        self._next_grant_check = now + self.settings.auth_check_seconds
        holding = [t for t in self.tickets if t.ended_at is None]
        if holding:
            async with app[SESSIONS]() as session:
                gone = await stream_grants.ended(session, app[CLOCK].now(), {t.grant for t in holding})
            for ticket in holding:
                if ticket.grant in gone:
                    ticket.ended_at = now
            if gone:
                self.signal.wake()
        grace = self.settings.shutdown_grace_seconds
        for ticket in self.tickets:
            late = ticket.ended_at is not None and now - ticket.ended_at > grace
            if late and ticket.task is not None:
                ticket.task.cancel()

    async def close(self) -> None:
        """End every open stream (they finish their current write and return), then cancel stragglers."""
        self.closing = True
        self.signal.wake()
        pending = self.tasks - {asyncio.current_task()}
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


def runs_queued(app: web.Application) -> None:
    """After a commit that queued runs: this process's claimers and its event streams look now (a queued
    run is claimable and has its QUEUED event)."""
    wake_claimers(app)
    notify_events(app)


class SseWriter:
    """One open stream's response: frames, and the quiet time that decides when a heartbeat is due."""

    def __init__(self, hub: EventHub, ticket: Ticket, resp: web.StreamResponse) -> None:
        self.hub, self.ticket, self.resp, self.last_write = hub, ticket, resp, time.monotonic()
        self._woken = 0.0  # when the last pause ended (the stream then read)

    @property
    def open(self) -> bool:
        """False once the app is stopping or the stream's key or console session has ended: the stream's
        loop returns and the response ends."""
        return not self.hub.closing and self.ticket.ended_at is None

    async def send(self, frame: bytes) -> None:
        await self.resp.write(frame)
        self.last_write = time.monotonic()

    async def pause(self, wake: asyncio.Event) -> None:
        """Wait for ``wake`` (taken before the read that just caught up), or write a heartbeat when the
        stream has been quiet for ``heartbeat_seconds``; either way the caller reads again next — but not
        sooner than ``min_read_interval`` after its last read, so the wake-ups of a burst of commits
        collapse into one read (what they committed is read then, none of it is lost)."""
        idle = time.monotonic() - self.last_write
        if idle >= self.hub.settings.heartbeat_seconds:
            await self.send(b": heartbeat\n\n")
            return
        await ClaimSignal.wait(wake, self.hub.settings.heartbeat_seconds - idle)
        rest = self._woken + self.hub.settings.min_read_interval - time.monotonic()
        if rest > 0 and self.open:
            await asyncio.sleep(rest)
        self._woken = time.monotonic()


Follow = Callable[[SseWriter], Awaitable[None]]


def resume_from(request: web.Request) -> tuple[str | None, str]:
    """Where a stream resumes, as sent: ``Last-Event-ID`` (a reconnect), else ``?after=``, else None; and
    the name of the one it came from, for the 400 when the caller cannot parse it."""
    raw = request.headers.get("Last-Event-ID")
    if raw is not None:
        return raw, "Last-Event-ID"
    return request.query.get("after"), "after"


def event_frame(event_id: str, kind: str, body: Mapping[str, Any]) -> bytes:
    """One event's SSE frame: its id (what ``Last-Event-ID`` carries back), its kind and its JSON."""
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event_id}\nevent: {kind}\ndata: {data}\n\n".encode()


async def serve_sse(request: web.Request, grant: Grant, follow: Follow, what: str) -> web.StreamResponse:
    """Open an SSE response counted against ``grant``'s key's cap, send the ``retry:`` hint, run ``follow``
    until it returns (caught up with an end, the hub is closing or the grant ended), and end the response
    cleanly.

    Call it after every check that may answer a problem: from here on the status is 200.
    """
    hub = request.app[EVENT_HUB]
    with hub.stream(grant) as ticket:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        try:
            writer = SseWriter(hub, ticket, resp)
            await writer.send(f"retry: {hub.settings.retry_ms}\n\n".encode())
            await follow(writer)
            await resp.write_eof()
        except ConnectionResetError:  # the client went away; nothing to finish
            log.debug("event stream of %s: the client disconnected", what)
    return resp


async def _close_streams(app: web.Application) -> None:
    await app[EVENT_HUB].close()


def install(app: web.Application) -> None:
    """The hub, its probe (one cheap pair of lookups per poll interval while streams are open, a no-op
    otherwise; a ``cleanup_ctx`` task, cancelled and awaited) and its shutdown."""
    app[EVENT_HUB] = EventHub()
    app.cleanup_ctx.append(
        periodic(
            "run-events-probe",
            lambda app: app[EVENT_HUB].settings.poll_seconds,
            lambda app: app[EVENT_HUB].probe(app),
            log=log,
        )
    )
    app.on_shutdown.append(_close_streams)
