"""Retries, timeouts and connection errors against a real local aiohttp server that misbehaves on cue.

The server answers each ``(method, path)`` from a script (the last answer repeats) and counts hits,
so each test can prove how many attempts the client made and how long it waited.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from live_servers import ThreadedApp

from factoryctl.client import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    AsyncFactoryClient,
    ConflictError,
    FactoryClient,
    InternalServerError,
    RateLimitError,
)

RUN = {"run_id": "run_1", "task_id": "run_1", "state": "QUEUED", "prompt": "p"}
CREATED = {"run_id": "run_2", "task_id": "run_2", "state": "QUEUED"}


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=lambda: RUN)
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0
    raw: str | None = None


def problem(status: int, code: str, *, retryable: bool = False) -> dict[str, Any]:
    return {
        "type": f"urn:factoryctl:problem:{code}",
        "title": code,
        "status": status,
        "detail": f"scripted {status}",
        "instance": "/scripted",
        "error": f"scripted {status}",
        "error_code": code,
        "retryable": retryable,
    }


class ScriptedServer(ThreadedApp):
    def __init__(self) -> None:
        self.scripts: dict[tuple[str, str], list[Answer]] = {}
        self.hits: Counter[tuple[str, str]] = Counter()
        super().__init__(self._app)

    async def _app(self, port: int) -> web.Application:
        del port
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        key = (request.method, request.path)
        script = self.scripts.get(key) or [Answer(404, problem(404, "resource_not_found"))]
        answer = script[min(self.hits[key], len(script) - 1)]
        self.hits[key] += 1
        if answer.hang:
            await asyncio.sleep(answer.hang)
        if answer.raw is not None:
            return web.Response(status=answer.status, text=answer.raw, content_type="text/html")
        ctype = "application/problem+json" if answer.status >= 400 else "application/json"
        return web.Response(
            status=answer.status, text=json.dumps(answer.body), content_type=ctype, headers=answer.headers
        )

    def script(self, method: str, path: str, *answers: Answer) -> tuple[str, str]:
        key = (method, path)
        self.scripts[key] = list(answers)
        self.hits[key] = 0
        return key


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    app = ScriptedServer().start()
    try:
        yield app
    finally:
        app.stop()


def client(server: ScriptedServer, **kw: Any) -> tuple[FactoryClient, list[float]]:
    """A client whose waits are recorded (and still really slept)."""
    made = FactoryClient(server.url, "fk_test", **kw)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    made._executor.sleep = sleep
    return made, waits


def test_429_waits_for_retry_after_then_succeeds(server: ScriptedServer) -> None:
    key = server.script(
        "GET",
        "/api/v1/agent/runs/rate",
        Answer(429, problem(429, "budget_exceeded", retryable=True), {"Retry-After": "1"}),
        Answer(),
    )
    api, waits = client(server)
    started = time.monotonic()
    raw = api.with_raw_response.runs.get("rate")
    assert raw.parse().run_id == "run_1" and raw.retries_taken == 1
    assert server.hits[key] == 2 and waits == [1.0] and time.monotonic() - started >= 0.95


def test_503_twice_then_200_with_growing_jittered_backoff(server: ScriptedServer) -> None:
    unavailable = Answer(503, problem(503, "resource_unavailable", retryable=True))
    key = server.script("GET", "/api/v1/agent/runs/busy", unavailable, unavailable, Answer())
    api, waits = client(server)
    assert api.runs.get("busy").state == "QUEUED"
    assert server.hits[key] == 3
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0

    key = server.script("GET", "/api/v1/agent/runs/down", unavailable)
    api, waits = client(server, max_retries=1)
    with pytest.raises(InternalServerError) as err:
        api.runs.get("down")
    assert server.hits[key] == 2 and len(waits) == 1
    assert err.value.status_code == 503 and err.value.problem.error_code == "resource_unavailable"


def test_409_is_retried_only_when_the_problem_says_retryable(server: ScriptedServer) -> None:
    key = server.script("GET", "/api/v1/agent/runs/conflict", Answer(409, problem(409, "conflict")), Answer())
    api, waits = client(server)
    with pytest.raises(ConflictError) as err:
        api.runs.get("conflict")
    assert server.hits[key] == 1 and waits == [] and err.value.retryable is False

    key = server.script(
        "POST",
        "/api/v1/agent/runs",
        Answer(409, problem(409, "conflict", retryable=True)),
        Answer(body=CREATED),
    )
    assert api.runs.create("p").run_id == "run_2"
    assert server.hits[key] == 2  # the server said so: safe even for a create


def test_ambiguous_failures_are_retried_only_for_idempotent_requests(server: ScriptedServer) -> None:
    boom = Answer(500, problem(500, "internal_error", retryable=True))
    get = server.script("GET", "/api/v1/agent/runs/flaky", boom, Answer())
    api, _ = client(server)
    assert api.runs.get("flaky").run_id == "run_1" and server.hits[get] == 2

    create = server.script("POST", "/api/v1/agent/runs", boom, Answer(body=CREATED))
    with pytest.raises(InternalServerError):
        api.runs.create("p")  # the run may exist: never blindly repeated
    assert server.hits[create] == 1

    refused = Answer(503, problem(503, "resource_unavailable", retryable=True))
    create = server.script("POST", "/api/v1/agent/runs", refused, Answer(body=CREATED))
    assert api.runs.create("p").run_id == "run_2" and server.hits[create] == 2  # 503: nothing happened

    test_filter = server.script(
        "POST",
        "/api/v1/factory/fa_1/automations/au_1/test-filter",
        Answer(502, raw="<h1>bad gateway</h1>"),
        Answer(
            body={
                "result": "Would trigger",
                "webhook_check": {"passed": True, "detail": "selected"},
                "payload_check": {"passed": True, "detail": "ok", "failed_path": None},
            }
        ),
    )
    assert api.automations.test_filter("fa_1", "au_1", "d1").would_trigger  # read-only POST: retried
    assert server.hits[test_filter] == 2


def test_retry_after_beyond_the_limit_is_raised_at_once(server: ScriptedServer) -> None:
    key = server.script(
        "GET",
        "/api/v1/agent/runs/later",
        Answer(429, problem(429, "budget_exceeded"), {"Retry-After": "3600"}),
    )
    api, waits = client(server)
    with pytest.raises(RateLimitError) as err:
        api.runs.get("later")
    assert server.hits[key] == 1 and waits == [] and err.value.retry_after == 3600.0


def test_timeouts_raise_api_timeout_error(server: ScriptedServer) -> None:
    get = server.script("GET", "/api/v1/agent/runs/slow", Answer(hang=2.0))
    api, waits = client(server, timeout=0.3, max_retries=1)
    started = time.monotonic()
    with pytest.raises(APITimeoutError):
        api.runs.get("slow")
    assert server.hits[get] == 2 and len(waits) == 1  # a read may be repeated
    assert time.monotonic() - started < 1.9

    post = server.script("POST", "/api/v1/agent/runs/run_1/cancel", Answer(hang=2.0, body="run_1"))
    api, waits = client(server, timeout=0.3, max_retries=2)
    with pytest.raises(APITimeoutError):
        api.runs.cancel("run_1")
    assert server.hits[post] == 1 and waits == []  # it may have been cancelled: not repeated


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_connection_refused_is_retried_then_raised() -> None:
    api = FactoryClient(f"http://127.0.0.1:{closed_port()}", "fk_test", max_retries=2)
    waits: list[float] = []
    api._executor.sleep = waits.append  # nothing listens: no need to really wait
    with pytest.raises(APIConnectionError) as err:
        api.runs.create("p")  # never sent, so even a create is retried
    assert not isinstance(err.value, APITimeoutError) and len(waits) == 2
    assert "connection error" in str(err.value)


def test_unreadable_answers(server: ScriptedServer) -> None:
    server.script("GET", "/api/v1/agent/runs/html", Answer(502, raw="<h1>Bad gateway</h1>"))
    api, _ = client(server, max_retries=0)
    with pytest.raises(InternalServerError) as err:
        api.runs.get("html")
    assert err.value.body == "<h1>Bad gateway</h1>" and err.value.detail == "<h1>Bad gateway</h1>"

    server.script("GET", "/api/v1/agent/runs/odd", Answer(body={"state": 7}))
    with pytest.raises(APIResponseValidationError):
        api.runs.get("odd")


async def test_async_client_retries_and_times_out(server: ScriptedServer) -> None:
    key = server.script(
        "GET",
        "/api/v1/agent/runs/arate",
        Answer(429, problem(429, "budget_exceeded", retryable=True), {"Retry-After": "0.2"}),
        Answer(),
    )
    async with AsyncFactoryClient(server.url, "fk_test", timeout=0.3, max_retries=1) as api:
        raw = await api.with_raw_response.runs.get("arate")
        assert raw.retries_taken == 1 and raw.parse().run_id == "run_1" and server.hits[key] == 2

        slow = server.script("GET", "/api/v1/agent/runs/aslow", Answer(hang=2.0))
        with pytest.raises(APITimeoutError):
            await api.runs.get("aslow")
        assert server.hits[slow] == 2

    async with AsyncFactoryClient(f"http://127.0.0.1:{closed_port()}", "fk_test", max_retries=0) as down:
        with pytest.raises(APIConnectionError):
            await down.factories.list()
