"""Helpers for self-hosted worker tests: the real app on a fixed port, a proxy that loses answers.

- :class:`LocalServer` serves the real app (run and worker routes) on one 127.0.0.1 port in the
  test's event loop; ``stop()`` and ``start()`` again give a server restart on the same port and
  database, as a deploy does.
- :class:`LossyProxy` sits between a worker and the server and, on cue, answers ``503`` before
  forwarding, or forwards and then drops the connection: the server acted, the worker never hears
  it. That is the ambiguous failure the retry policy is about.
- :func:`wait_until` polls a condition with a deadline (no fixed sleeps).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import builders
from aiohttp import web
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import create_app
from api.claims.reaper import reap_once
from api.context import ServerSettings
from store import apikeys
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import session_factory
from store.models import ApiKey, Run, RunLog

T = TypeVar("T")
ROUTES = ("api.ops", "api.runs.routes", "api.claims.routes")
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_until(
    condition: Callable[[], Awaitable[T | None] | T | None], what: str, within: float = 20.0
) -> T:
    """The first truthy value of ``condition()`` (sync or async), polled until ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)


def gone(pid: int) -> bool:
    """True when the process has exited (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


class Store:
    """Test-side access to the server's database: keys, runs, logs, the lease reaper."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(engine)

    async def key(self, role: str, hosts: list[str] | None = None) -> str:
        """A new key of ``role`` in the default team (plaintext)."""
        async with self.sessions() as s, s.begin():
            team = await builders.team(s)
            return await builders.api_key(s, SystemClock(), team.id, role, worker_hosts=hosts)

    async def revoke(self, key: str) -> None:
        async with self.sessions() as s, s.begin():
            row = await s.scalar(select(ApiKey).where(ApiKey.key_hash == apikeys.hash_key(key)))
            assert row is not None
            await apikeys.revoke_key(s, SystemClock(), row.team_id, row.id)

    async def new_run(self, host: str, prompt: str = "do the thing\n", model: str | None = None) -> str:
        config: dict[str, Any] = {"worker_host": host}
        if model is not None:
            config["model_id"] = model
        async with self.sessions() as s, s.begin():
            team = await builders.team(s)
            run = await builders.run(s, SystemClock(), team.id, prompt=prompt, agent_config=config)
            return run.run_id

    async def run(self, run_id: str) -> Run:
        async with self.sessions() as s:
            run = await s.get(Run, run_id)
            assert run is not None
            return run

    async def state(self, run_id: str) -> str:
        return (await self.run(run_id)).state

    async def wait_state(self, run_id: str, states: set[str], within: float = 20.0) -> Run:
        async def reached() -> Run | None:
            run = await self.run(run_id)
            return run if run.state in states else None

        return await wait_until(reached, f"run {run_id} to reach {sorted(states)}", within)

    async def logs(self, run_id: str) -> list[tuple[str, str]]:
        async with self.sessions() as s:
            rows = await s.scalars(select(RunLog).where(RunLog.run_id == run_id).order_by(RunLog.id))
            return [(r.stream, r.text) for r in rows]

    async def lapse_lease(self, run_id: str) -> int:
        """Expire the run's lease and run the reaper once, as a server does after missed heartbeats."""
        async with self.sessions() as s, s.begin():
            await s.execute(
                update(Run)
                .where(Run.run_id == run_id)
                .values(lease_expires_at=SystemClock().now().replace(year=2000))
            )
        return await reap_once(self.sessions, SystemClock())


async def listen(app: web.Application, port: int) -> web.AppRunner:
    """``app`` served on ``127.0.0.1:port``; ``cleanup()`` the runner to stop it."""
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


class LocalServer:
    """The real app on a fixed port; ``stop()`` then ``start()`` is a restart (same port, same store)."""

    def __init__(self, engine: AsyncEngine, box: SecretBox, data_dir: Path, **settings: Any) -> None:
        self.engine, self.box, self.data_dir, self.settings = engine, box, data_dir, settings
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runner: web.AppRunner | None = None

    async def start(self) -> LocalServer:
        settings = ServerSettings(data_dir=self.data_dir, port=self.port, **self.settings)
        self.runner = await listen(
            create_app(settings, self.engine, self.box, route_modules=ROUTES), self.port
        )
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


class LossyProxy:
    """A reverse proxy to ``upstream`` that misbehaves on cue for request paths ending in a suffix.

    ``refuse(suffix, n)``: the next ``n`` matching requests get ``503`` and never reach the server.
    ``lose_answer(suffix, n)``: the next ``n`` are forwarded, then the connection is dropped before
    the answer. ``hits[suffix]`` counts matching requests that arrived since the last cue.
    ``max_body``: bodies over it get ``413`` from the proxy itself, as a reverse proxy's body limit does.
    """

    def __init__(self, upstream: str, *, max_body: int = 1024**2) -> None:
        self.upstream = upstream
        self.max_body = max_body
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.refusals: Counter[str] = Counter()
        self.losses: Counter[str] = Counter()
        self.hits: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()  # answers actually dropped
        self.runner: web.AppRunner | None = None
        self.http: aiohttp.ClientSession | None = None

    def refuse(self, suffix: str, times: int = 1) -> None:
        """Answer 503 to the next ``times`` matching requests; counting starts again."""
        self.refusals[suffix] = times
        self.hits[suffix] = self.lost[suffix] = 0

    def lose_answer(self, suffix: str, times: int = 1) -> None:
        """Forward the next ``times`` matching requests but drop their answers; counting starts again."""
        self.losses[suffix] = times
        self.hits[suffix] = self.lost[suffix] = 0

    async def start(self) -> LossyProxy:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.http = aiohttp.ClientSession()
        self.runner = await listen(app, self.port)
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.http is not None:
            await self.http.close()

    def _rule(self, path: str, rules: Counter[str]) -> str | None:
        return next((s for s, n in rules.items() if n > 0 and path.endswith(s)), None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        for suffix in {s for s in (*self.refusals, *self.losses) if request.path.endswith(s)}:
            self.hits[suffix] += 1
        refused = self._rule(request.path, self.refusals)
        if refused is not None:
            self.refusals[refused] -= 1
            problem = {"status": 503, "error_code": "resource_unavailable", "detail": "proxy says no"}
            return web.json_response(problem, status=503)
        assert self.http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        try:
            async with self.http.request(
                request.method, self.upstream + request.path_qs, data=await request.read(), headers=headers
            ) as upstream:
                body = await upstream.read()
                status, ctype = upstream.status, upstream.content_type
        except aiohttp.ClientError:  # the server went away (teardown, a restart)
            return web.json_response({"status": 502, "detail": "upstream unreachable"}, status=502)
        lost = self._rule(request.path, self.losses)
        if lost is not None:
            self.losses[lost] -= 1
            self.lost[lost] += 1
            assert request.transport is not None
            request.transport.abort()  # the server acted; its answer never arrives
            return web.Response(status=599)  # written to nobody
        return web.Response(status=status, body=body, content_type=ctype)
