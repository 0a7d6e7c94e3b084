"""What every scripted model server shares: the script, the request log, and a loopback server thread.

A test plays the model. It writes a :class:`Script` — the model's replies in order, each made of
:class:`Text` and :class:`ToolCall` parts — and a provider module (``anthropic_server.py`` ...) turns the
next reply into that provider's streamed wire format whenever the CLI asks the model for a turn. Every
request the CLI sends, to any path, lands in a :class:`Recorder`, so a test can assert what the model was
shown (the earlier turns on a resume, the tool results) and that the CLI called nothing unexpected
(:attr:`Recorder.unknown`: paths the provider app does not serve are answered 404 and listed there).

:class:`ScriptedServer` runs an aiohttp app on ``127.0.0.1`` in a background thread with its own event
loop, so it serves a CLI started by a synchronous ``subprocess`` call, a ``factoryctl worker`` process, or
an async test alike::

    script = Script([ToolCall("Bash", {"command": "echo hi"}), Text("done")])
    with ScriptedServer(anthropic_app(script)) as server:
        subprocess.run([...], env={"ANTHROPIC_BASE_URL": server.url, ...})
    assert "hi" in transcript_text(model_requests(server.recorder)[1])  # anthropic_server helpers

A reply is taken by one model request; when the script runs out, :attr:`Script.fallback` answers (so a CLI
that asks once more than the test expected gets an answer rather than a hang, and the test sees it in the
recorder). Nothing here knows a provider's wire format.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Text:
    """The model says ``text``."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """The model calls tool ``name`` with ``arguments``; ``call_id`` is generated when empty."""

    name: str
    arguments: dict[str, Any]
    call_id: str = ""


@dataclass(frozen=True)
class Failure:
    """The model endpoint answers an HTTP error instead of a reply (``status``; 5xx makes the CLIs retry
    with backoff), to ``times`` requests in a row: a CLI may retry even a 400 (Claude Code 2.1.332 sends
    a request 6 times before it gives up). Alone in its reply."""

    status: int
    message: str
    times: int = 1


Part = Text | ToolCall | Failure


@dataclass(frozen=True)
class Reply:
    """One model turn: its parts in order (text, then tool calls, as models usually answer)."""

    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    @property
    def failure(self) -> Failure | None:
        return next((p for p in self.parts if isinstance(p, Failure)), None)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCall))


def reply(turn: Part | Reply | Sequence[Part]) -> Reply:
    """A script entry as a :class:`Reply`: a single part is a one-part reply."""
    if isinstance(turn, Reply):
        return turn
    if isinstance(turn, Text | ToolCall | Failure):
        return Reply((turn,))
    return Reply(tuple(turn))


class Script:
    """The model's replies, taken in order by successive model requests (thread-safe)."""

    def __init__(self, turns: Iterable[Part | Reply | Sequence[Part]], fallback: str = "(script ended)"):
        self._turns = [reply(t) for t in turns]
        self._next = 0
        self._failing: tuple[Reply, int] | None = None  # a Failure reply and how many answers it has left
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.fallback = Reply((Text(fallback),))

    def extend(self, turns: Iterable[Part | Reply | Sequence[Part]]) -> None:
        """More replies after the current ones (the next CLI invocation of a test, e.g. a follow-up)."""
        with self._lock:
            self._turns.extend(reply(t) for t in turns)

    def take(self) -> Reply:
        """The next reply (tool calls given an id when they had none), or :attr:`fallback`."""
        with self._lock:
            if self._failing is not None:
                failing, left = self._failing
                self._failing = (failing, left - 1) if left > 1 else None
                return failing
            if self._next >= len(self._turns):
                return self.fallback
            turn = self._turns[self._next]
            self._next += 1
            if turn.failure is not None:
                self._failing = (turn, turn.failure.times - 1) if turn.failure.times > 1 else None
                return turn
            parts = tuple(
                ToolCall(p.name, p.arguments, p.call_id or f"call_{next(self._ids):04d}")
                if isinstance(p, ToolCall)
                else p
                for p in turn.parts
            )
            return Reply(parts)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns) - self._next


@dataclass(frozen=True)
class Request:
    """One request the CLI sent: method, path with its query, headers, and the body (parsed JSON when it
    was JSON, else text; None when empty)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Recorder:
    """Every request received, in order; ``unknown`` the ones no route served."""

    requests: list[Request] = field(default_factory=list)
    unknown: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    async def record(self, request: web.Request) -> Request:
        raw = await request.read()
        body: Any = None
        if raw:
            text = raw.decode("utf-8", "replace")
            try:
                body = json.loads(text)
            except ValueError:
                body = text
        entry = Request(request.method, request.path_qs, dict(request.headers), body)
        with self._lock:
            self.requests.append(entry)
        return entry

    def add_unknown(self, entry: Request) -> None:
        with self._lock:
            self.unknown.append(entry)

    def matching(self, predicate: Callable[[Request], bool]) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if predicate(r)]

    def paths(self) -> list[str]:
        """``"METHOD /path"`` of every request, in order (what a test prints when something is off)."""
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]


Handler = Callable[[web.Request, Request], Awaitable[web.StreamResponse]]


def recording_app(recorder: Recorder, routes: Sequence[tuple[str, str, Handler]]) -> web.Application:
    """An app serving ``routes`` (method, path, handler taking the request and its :class:`Request`), which
    records every request first and answers any other path 404, listing it in ``recorder.unknown``."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    handlers = {(m.upper(), p): h for m, p, h in routes}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        entry = await recorder.record(request)
        handler = handlers.get((request.method, request.path))
        if handler is None and request.method == "HEAD":
            handler = handlers.get(("GET", request.path))
        if handler is None:
            recorder.add_unknown(entry)
            return web.Response(status=404, text=f"not scripted: {request.method} {request.path}")
        return await handler(request, entry)

    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app


class ScriptedServer:
    """Serve ``app`` on 127.0.0.1 (a free port) from a daemon thread until :meth:`stop` (or the ``with``
    block ends). ``recorder`` is the app's :class:`Recorder` when it was built with one."""

    def __init__(self, app: web.Application, recorder: Recorder | None = None) -> None:
        self.app = app
        self.recorder = recorder if recorder is not None else app.get(RECORDER_KEY) or Recorder()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-model", daemon=True)

    def start(self) -> ScriptedServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.url = future.result(timeout=30)
        return self

    async def _start(self) -> str:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
            self._runner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        self._loop.close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


RECORDER_KEY = web.AppKey("recorder", Recorder)
SCRIPT_KEY = web.AppKey("script", Script)
