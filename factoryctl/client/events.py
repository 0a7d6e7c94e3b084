"""A run's live event stream (``GET /agent/runs/{id}/events``, docs/events.md) as an iterator.

``client.runs.events(run_id, after=None)`` yields :class:`RunStreamEvent` from the Server-Sent Events
stream: a generator in the sync client, an async generator in the async one. A dropped connection (or a
server that closes the stream while the run is still live, e.g. a replica shutting down) reconnects with
``Last-Event-ID``, so no event is lost or repeated; the iterator ends after the terminal state event.
Problems (401, 404, 429...) raise the client's usual errors (docs/client.md).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, overload

import httpx

from factoryctl.client._endpoints import V1, Async, Resource, Sync
from factoryctl.client._modelbase import Model
from factoryctl.client._transport import ClientOptions, RequestSpec, build_request, path
from factoryctl.client.errors import APIConnectionError, error_from_response

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"})
READ_TIMEOUT = 60.0  # the server sends a heartbeat every 15 s (docs/events.md, "Bounds")
RECONNECT_SECONDS = 1.0
MAX_IDLE_RECONNECTS = 5  # consecutive reconnects that brought nothing new before giving up


@dataclass(frozen=True)
class RunStreamEvent(Model):
    """One event: ``kind`` is ``state`` | ``followup`` | ``log`` | ``truncated``; ``data`` per kind."""

    id: int
    run_id: str
    kind: str
    created_at: dt.datetime | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str | None:
        value = self.data.get("state") if self.kind == "state" else None
        return value if isinstance(value, str) else None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def text(self) -> str | None:
        value = self.data.get("text") if self.kind == "log" else None
        return value if isinstance(value, str) else None


class _Parser:
    """Server-Sent Events lines -> events (``data:`` JSON); comments and ``retry:`` are noted, not yielded."""

    def __init__(self) -> None:
        self.data: list[str] = []
        self.retry = RECONNECT_SECONDS

    def line(self, line: str) -> RunStreamEvent | None:
        if line == "":
            if not self.data:
                return None
            payload, self.data = "\n".join(self.data), []
            return RunStreamEvent.from_json(json.loads(payload))
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "retry" and value.isdigit():
            self.retry = int(value) / 1000
        return None


@dataclass
class _Cursor:
    """Where the stream stands across reconnects."""

    last: int | None
    done: bool = False
    idle: int = 0

    def request(
        self, http: httpx.Client | httpx.AsyncClient, options: ClientOptions, run_id: str
    ) -> httpx.Request:
        spec: RequestSpec[None] = RequestSpec(
            "GET", path(f"{V1}/agent/runs/{{}}/events", run_id), lambda _: None, timeout=READ_TIMEOUT
        )
        request = build_request(http, options, spec)
        request.headers["Accept"] = "text/event-stream"
        if self.last is not None:
            request.headers["Last-Event-ID"] = str(self.last)
        return request

    def seen(self, event: RunStreamEvent) -> None:
        self.last, self.idle, self.done = event.id, 0, event.terminal

    def dropped(self, run_id: str, got_any: bool, error: Exception | None) -> None:
        """After a connection ended without a terminal state: count it, give up when nothing comes."""
        self.idle = 0 if got_any else self.idle + 1
        if self.idle > MAX_IDLE_RECONNECTS:
            if error is not None:
                raise APIConnectionError(f"event stream of {run_id}: {error}") from error
            self.done = True  # the server keeps closing with nothing new: nothing more will come


def sync_events(
    http: httpx.Client, options: ClientOptions, run_id: str, after: int | None, sleep: Callable[[float], None]
) -> Iterator[RunStreamEvent]:
    cursor, parser = _Cursor(after), _Parser()
    while not cursor.done:
        got_any, error = False, None
        try:
            response = http.send(cursor.request(http, options, run_id), stream=True)
            try:
                if response.status_code >= 400:
                    response.read()
                    raise error_from_response(response)
                for line in response.iter_lines():
                    event = parser.line(line)
                    if event is not None:
                        got_any = True
                        cursor.seen(event)
                        yield event
            finally:
                response.close()
        except httpx.TransportError as exc:
            error = exc
        if not cursor.done:
            cursor.dropped(run_id, got_any, error)
            if not cursor.done:
                sleep(parser.retry if error is None else RECONNECT_SECONDS)


async def async_events(
    http: httpx.AsyncClient, options: ClientOptions, run_id: str, after: int | None
) -> AsyncIterator[RunStreamEvent]:
    cursor, parser = _Cursor(after), _Parser()
    while not cursor.done:
        got_any, error = False, None
        try:
            response = await http.send(cursor.request(http, options, run_id), stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_response(response)
                async for line in response.aiter_lines():
                    event = parser.line(line)
                    if event is not None:
                        got_any = True
                        cursor.seen(event)
                        yield event
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            error = exc
        if not cursor.done:
            cursor.dropped(run_id, got_any, error)
            if not cursor.done:
                await asyncio.sleep(parser.retry if error is None else RECONNECT_SECONDS)


class streamed:
    """``resource.events(run_id, after=None)``: the sync or async iterator, by the client's mode."""

    @overload
    def __get__(self, obj: Resource[Sync], owner: Any) -> Callable[..., Iterator[RunStreamEvent]]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: Any) -> Callable[..., AsyncIterator[RunStreamEvent]]: ...
    def __get__(self, obj: Resource[Any], owner: Any) -> Any:
        executor = getattr(obj._executor, "inner", obj._executor)  # with_raw_response streams the same

        def events(run_id: str, *, after: int | None = None) -> Any:
            if isinstance(executor.http, httpx.AsyncClient):
                return async_events(executor.http, executor.options, run_id, after)
            return sync_events(
                executor.http, executor.options, run_id, after, getattr(executor, "sleep", time.sleep)
            )

        return events


__all__ = ["RunStreamEvent", "async_events", "streamed", "sync_events"]
