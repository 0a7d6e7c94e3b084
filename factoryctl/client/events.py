"""The live event streams (docs/events.md) as iterators: a run's, and the team's.

``client.runs.events(run_id, after=None)`` yields :class:`RunStreamEvent` from ``GET
/agent/runs/{id}/events`` and ends after the terminal state event. ``client.events.stream(factory_uid=None,
state=None, logs=False, after=None)`` yields :class:`TeamStreamEvent` from ``GET /agent/events`` and never
ends on its own. Both are generators in the sync client and async generators in the async one. A dropped
connection (or a server that closes the stream, e.g. a replica shutting down) reconnects with
``Last-Event-ID`` after the server's ``retry:`` hint, so no event is lost or repeated. Problems (401, 404,
429...) raise the client's usual errors (docs/client.md).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar, overload

import httpx

from factoryctl.client._endpoints import V1, Async, Mode, Resource, Sync
from factoryctl.client._modelbase import Model
from factoryctl.client._transport import ClientOptions, RequestSpec, build_request, path, query
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


@dataclass(frozen=True)
class TeamStreamEvent(RunStreamEvent):
    """An event of the team stream: also its run's ``factory_uid`` and its ``cursor`` (the SSE id; pass it
    as ``after`` to resume after this event)."""

    factory_uid: str | None = None
    cursor: str = ""


E = TypeVar("E", bound=RunStreamEvent)
E_co = TypeVar("E_co", bound=RunStreamEvent, covariant=True)


class _Parser(Generic[E]):
    """Server-Sent Events lines -> events (``data:`` JSON); comments and ``retry:`` are noted, not yielded.

    ``last_id`` is the stream's position as the SSE rules keep it: set by an ``id:`` field when its frame
    ends, with or without data (the team stream sends id-only frames), and sent back on reconnect.
    """

    def __init__(self, model: type[E], last_id: str | None) -> None:
        self.model, self.retry = model, RECONNECT_SECONDS
        self.data: list[str] = []
        self.last_id = self._id = last_id

    def line(self, line: str) -> E | None:
        if line == "":
            self.last_id = self._id
            if not self.data:
                return None
            payload, self.data = "\n".join(self.data), []
            return self.model.from_json(json.loads(payload))
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry = int(value) / 1000
        return None


class _Stream(Protocol[E_co]):
    """One kind of stream: what it asks for, and when it is over."""

    @property
    def model(self) -> type[E_co]: ...

    @property
    def done(self) -> bool: ...

    def spec(self) -> RequestSpec[None]: ...

    def seen(self, event: RunStreamEvent) -> None: ...

    def dropped(self, got_any: bool, connected: bool, error: Exception | None) -> None: ...


@dataclass
class _RunStream:
    """A run's stream: over after its terminal state, or when reconnects keep bringing nothing."""

    run_id: str
    done: bool = False
    idle: int = 0
    model: ClassVar[type[RunStreamEvent]] = RunStreamEvent

    def spec(self) -> RequestSpec[None]:
        return RequestSpec(
            "GET", path(f"{V1}/agent/runs/{{}}/events", self.run_id), lambda _: None, timeout=READ_TIMEOUT
        )

    def seen(self, event: RunStreamEvent) -> None:
        self.idle, self.done = 0, event.terminal

    def dropped(self, got_any: bool, connected: bool, error: Exception | None) -> None:
        """After a connection ended without a terminal state: count it, give up when nothing comes."""
        self.idle = 0 if got_any else self.idle + 1
        if self.idle > MAX_IDLE_RECONNECTS:
            if error is not None:
                raise APIConnectionError(f"event stream of {self.run_id}: {error}") from error
            self.done = True  # the server keeps closing with nothing new: nothing more will come


@dataclass
class _TeamStream:
    """The team's stream: never over; only connections that keep failing raise."""

    params: Sequence[tuple[str, str]]
    done: bool = False
    failures: int = 0
    model: ClassVar[type[TeamStreamEvent]] = TeamStreamEvent

    def spec(self) -> RequestSpec[None]:
        return RequestSpec("GET", f"{V1}/agent/events", lambda _: None, self.params, timeout=READ_TIMEOUT)

    def seen(self, event: RunStreamEvent) -> None:
        """Nothing to note: no event ends the team stream."""

    def dropped(self, got_any: bool, connected: bool, error: Exception | None) -> None:
        self.failures = 0 if connected or got_any else self.failures + 1
        if self.failures > MAX_IDLE_RECONNECTS and error is not None:
            raise APIConnectionError(f"team event stream: {error}") from error


class _Connections(Generic[E]):
    """What the sync and async loops share: one stream's parser and, per connection, whether it got
    through and brought anything; after it ends, how long to wait before the next (None: it is over)."""

    def __init__(self, stream: _Stream[E], after: str | None) -> None:
        self.stream, self.parser = stream, _Parser(stream.model, after)
        self.got_any = self.connected = False
        self.over = False  # the server answered 204: nothing will ever follow (docs/events.md)
        self.error: Exception | None = None

    def request(self, http: httpx.Client | httpx.AsyncClient, options: ClientOptions) -> httpx.Request:
        """The next connection's request, resuming after the last id seen; resets the bookkeeping."""
        self.got_any, self.connected, self.error = False, False, None
        request = build_request(http, options, self.stream.spec())
        request.headers["Accept"] = "text/event-stream"
        if self.parser.last_id is not None:
            request.headers["Last-Event-ID"] = self.parser.last_id
        return request

    def line(self, line: str) -> E | None:
        event = self.parser.line(line)
        if event is not None:
            self.got_any = True
            self.stream.seen(event)
        return event

    def pause(self) -> float | None:
        """After a connection ended: the seconds to wait before reconnecting, or None when it is over."""
        if self.over:
            return None
        if not self.stream.done:
            self.stream.dropped(self.got_any, self.connected, self.error)
        if self.stream.done:
            return None
        return self.parser.retry if self.error is None else RECONNECT_SECONDS


def follow_sync(
    http: httpx.Client,
    options: ClientOptions,
    stream: _Stream[E],
    after: str | None,
    sleep: Callable[[float], None],
) -> Generator[E, None, None]:
    conn = _Connections(stream, after)
    while not stream.done and not conn.over:
        try:
            response = http.send(conn.request(http, options), stream=True)
            try:
                if response.status_code >= 400:
                    response.read()
                    raise error_from_response(response)
                conn.connected, conn.over = True, response.status_code == 204
                for line in response.iter_lines():
                    if (event := conn.line(line)) is not None:
                        yield event
            finally:
                response.close()
        except httpx.TransportError as exc:
            conn.error = exc
        if (seconds := conn.pause()) is not None:
            sleep(seconds)


async def follow_async(
    http: httpx.AsyncClient, options: ClientOptions, stream: _Stream[E], after: str | None
) -> AsyncGenerator[E, None]:
    conn = _Connections(stream, after)
    while not stream.done and not conn.over:
        try:
            response = await http.send(conn.request(http, options), stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_response(response)
                conn.connected, conn.over = True, response.status_code == 204
                async for line in response.aiter_lines():
                    if (event := conn.line(line)) is not None:
                        yield event
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            conn.error = exc
        if (seconds := conn.pause()) is not None:
            await asyncio.sleep(seconds)


def _follow(obj: Resource[Any], stream: _Stream[E], after: str | None) -> Any:
    """The sync or async iterator of ``stream``, by the client's mode."""
    executor = getattr(obj._executor, "inner", obj._executor)  # with_raw_response streams the same
    if isinstance(executor.http, httpx.AsyncClient):
        return follow_async(executor.http, executor.options, stream, after)
    return follow_sync(executor.http, executor.options, stream, after, getattr(executor, "sleep", time.sleep))


class streamed:
    """``resource.events(run_id, after=None)``: a run's stream, sync or async by the client's mode."""

    @overload
    def __get__(
        self, obj: Resource[Sync], owner: Any
    ) -> Callable[..., Generator[RunStreamEvent, None, None]]: ...
    @overload
    def __get__(
        self, obj: Resource[Async], owner: Any
    ) -> Callable[..., AsyncGenerator[RunStreamEvent, None]]: ...
    def __get__(self, obj: Resource[Any], owner: Any) -> Any:
        def events(run_id: str, *, after: int | None = None) -> Any:
            return _follow(obj, _RunStream(run_id), None if after is None else str(after))

        return events


def _listed(value: str | Sequence[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or ())


class team_streamed:
    """``client.events.stream(...)``: the team stream, sync or async by the client's mode."""

    @overload
    def __get__(
        self, obj: Resource[Sync], owner: Any
    ) -> Callable[..., Generator[TeamStreamEvent, None, None]]: ...
    @overload
    def __get__(
        self, obj: Resource[Async], owner: Any
    ) -> Callable[..., AsyncGenerator[TeamStreamEvent, None]]: ...
    def __get__(self, obj: Resource[Any], owner: Any) -> Any:
        def stream(
            factory_uid: str | Sequence[str] | None = None,
            state: str | Sequence[str] | None = None,
            logs: bool = False,
            after: str | None = None,
        ) -> Any:
            """Events of the team's runs from now (or after the cursor ``after``), filtered by factory,
            by new state (``state`` events only) and, unless ``logs``, without log lines."""
            params = query(factory_uid=_listed(factory_uid), state=_listed(state), logs=logs or None)
            return _follow(obj, _TeamStream(params), after)

        return stream


class Events(Resource[Mode]):
    """The team-wide event stream (docs/events.md, "Team stream")."""

    stream = team_streamed()


__all__ = [
    "Events",
    "RunStreamEvent",
    "TeamStreamEvent",
    "follow_async",
    "follow_sync",
    "streamed",
    "team_streamed",
]
