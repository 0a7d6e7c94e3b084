"""Run events: a worker's log line → the open event stream, same replica and across replicas.

    .venv/bin/python bench/events.py [--lines 100] [--database-url URL]

Serves two instances of the real app (``create_app`` with every route module) in this process on two
loopback ports, on one SQLite file (and then, with ``--database-url``, on a scratch PostgreSQL database made
next to the one named and dropped afterwards). A member key creates a run through the API, a worker key
claims and starts it (``/api/v1/workers``), and ``GET /api/v1/agent/runs/{id}/events`` is held open with an
aiohttp client. Then ``--lines`` times, after a random pause (0.02-0.52 s: two probe cycles, so a line lands
at a uniformly random point of the probe's cycle), one log line is written, timed from just before the write
to the moment its ``log`` event is read from the stream. Three scenarios, each on a fresh run:

- ``same replica``: ``POST /workers/runs/{id}/logs`` and the stream on replica A (the handler wakes A's
  streams after its commit);
- ``cross replica``: the POST on A, the stream on replica B, which learns of the event from its probe of
  the event log (every ``poll_seconds``, 0.25 s): bounded by the probe interval;
- ``service-hosted``: the line stored the way ``serve --workers N`` stores it (``StoreChannel.send_logs``,
  in process on A), the stream on A.

Baseline, in the same run: the round trip of the ``POST /logs`` itself (the durable write). Prints p50/p95/
p99 of each, the ratio stream/baseline at p50, and whether the same-replica p50 is under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientResponse, ClientSession, ClientTimeout, web
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from bench.claims import scratch_database
from bench.pickup import free_port
from factoryctl.serve.local_workers import store_channel
from store import apikeys
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.teams import ensure_team

WORKERS = "/api/v1/workers"
HOST = "host-a"


@dataclass(frozen=True)
class Keys:
    member: str
    worker: str
    worker_owner: str  # the lease owner the worker key claims as (key id, empty worker id)
    lease_tokens: dict[str, str] = field(default_factory=dict)  # run id -> its claim's lease token


async def seed_keys(engine: AsyncEngine) -> Keys:
    """A member key and a worker key (for :data:`HOST`) of the default team."""
    async with session_factory(engine)() as s, s.begin():
        team = await ensure_team(s)
        _, member = await apikeys.create_key(s, SystemClock(), team.id, "bench member", "member")
        row, worker = await apikeys.create_key(s, SystemClock(), team.id, "bench worker", "worker", [HOST])
    return Keys(member, worker, f"{row.id}:")


async def serve(db_url: str, key: str, data_dir: Path) -> tuple[web.AppRunner, AsyncEngine, str]:
    """One replica: the real app with its own engine on a free port; (runner, engine, base URL)."""
    engine, port = create_engine(db_url), free_port()
    app = create_app(
        ServerSettings(data_dir=data_dir, port=port), engine, SecretBox.from_setting(key),
        route_modules=ROUTE_MODULES,
    )  # fmt: skip
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, engine, f"http://127.0.0.1:{port}"


async def call(http: ClientSession, url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as r:
        if r.status not in (200, 204):
            raise RuntimeError(f"{url}: HTTP {r.status}: {await r.text()}")
        return await r.json() if r.status == 200 else {}


async def started_run(http: ClientSession, base: str, keys: Keys) -> str:
    """A run created through the API, claimed and marked INPROGRESS by the worker key."""
    body = {"prompt": "bench", "config": {"worker_host": HOST}}
    run_id = str((await call(http, f"{base}/api/v1/agent/run", keys.member, body))["run_id"])
    claim = {"worker_host": HOST, "wait_seconds": 0}
    claimed = await call(http, f"{base}{WORKERS}/claim", keys.worker, claim)
    assert claimed["run"]["run_id"] == run_id, claimed
    keys.lease_tokens[run_id] = token = str(claimed["lease_token"])
    start = {"state": "INPROGRESS", "lease_token": token}
    await call(http, f"{base}{WORKERS}/runs/{run_id}/heartbeat", keys.worker, start)
    return run_id


async def read_stream(resp: ClientResponse, arrivals: dict[str, asyncio.Future[float]]) -> None:
    """Resolve ``arrivals[text]`` with the read time of each ``log`` event as its frame completes."""
    kind = data = None
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line:
            if kind == "log" and data is not None:
                waiter = arrivals.get(json.loads(data)["data"]["text"])
                if waiter is not None and not waiter.done():
                    waiter.set_result(time.perf_counter())
            kind = data = None


Write = Callable[[str, str], Awaitable[None]]  # (run id, line): store one log line


def over_http(http: ClientSession, base: str, keys: Keys) -> Write:
    """What a self-hosted worker does: ``POST /workers/runs/{id}/logs`` (the handler wakes local streams)."""

    async def write(run_id: str, text: str) -> None:
        lines = [{"stream": "stdout", "text": text}]
        body = {"worker_id": "", "lease_token": keys.lease_tokens[run_id], "lines": lines}
        await call(http, f"{base}{WORKERS}/runs/{run_id}/logs", keys.worker, body)

    return write


def in_process(runner: web.AppRunner, keys: Keys) -> Write:
    """What a service-hosted worker (``serve --workers N``) does: ``StoreChannel.send_logs`` on the store."""

    async def write(run_id: str, text: str) -> None:
        channel = store_channel(runner.app, run_id, keys.worker_owner, 30.0, keys.lease_tokens[run_id])
        await channel.send_logs([("stdout", text)])

    return write


async def scenario(
    http: ClientSession, base: str, reader: str, keys: Keys, write: Write, lines: int
) -> tuple[list[float], list[float]]:
    """(log write round trips, write → event read latencies) in seconds, warm-up excluded."""
    run_id = await started_run(http, base, keys)
    arrivals: dict[str, asyncio.Future[float]] = {}
    loop = asyncio.get_running_loop()
    posts, streams = [], []
    headers = {"Authorization": f"Bearer {keys.member}"}
    async with http.get(f"{reader}/api/v1/agent/runs/{run_id}/events", headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.content.readline()).startswith(b"retry:")  # the stream is open
        task = asyncio.create_task(read_stream(resp, arrivals))
        for n in range(-5, lines):  # five warm-up lines
            await asyncio.sleep(random.uniform(0.02, 0.52))  # two probe cycles: a uniform phase
            text = f"line {n} {uuid.uuid4().hex}"
            arrivals[text] = loop.create_future()
            began = time.perf_counter()
            await write(run_id, text)
            posted = time.perf_counter()
            read = await asyncio.wait_for(arrivals[text], 20)
            del arrivals[text]
            if n >= 0:
                posts.append(posted - began)
                streams.append(read - began)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return posts, streams


def pcts(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49] * 1000, "p95": cuts[94] * 1000, "p99": cuts[98] * 1000}


def show(label: str, values: list[float]) -> dict[str, float]:
    p = pcts(values)
    print(f"  {label:<34} p50 {p['p50']:7.2f} ms   p95 {p['p95']:7.2f} ms   p99 {p['p99']:7.2f} ms")
    return p


async def bench(db_url: str, label: str, lines: int, data_dir: Path) -> None:
    engine = create_engine(db_url)
    await migrate(engine)
    keys = await seed_keys(engine)
    await engine.dispose()
    secret_key = Fernet.generate_key().decode()
    a = await serve(db_url, secret_key, data_dir)
    b = await serve(db_url, secret_key, data_dir)
    try:
        async with ClientSession(timeout=ClientTimeout(total=None, sock_read=60)) as http:
            posting = over_http(http, a[2], keys)
            runs = {
                "same replica": await scenario(http, a[2], a[2], keys, posting, lines),
                "cross replica": await scenario(http, a[2], b[2], keys, posting, lines),
                "service-hosted": await scenario(http, a[2], a[2], keys, in_process(a[0], keys), lines),
            }
    finally:
        for runner, eng, _ in (a, b):
            await runner.cleanup()
            await eng.dispose()
    print(f"\n{label}: {lines} log lines per scenario, one at a time after a random 20-520 ms pause")
    base = show("POST /logs round trip (baseline)", runs["same replica"][0] + runs["cross replica"][0])
    show("service-hosted: send_logs commit", runs["service-hosted"][0])
    p50 = {name: show(f"{name}: write → event read", got[1])["p50"] for name, got in runs.items()}
    print(
        "  ratio stream/baseline at p50: " + ", ".join(f"{n} {v / base['p50']:.2f}x" for n, v in p50.items())
    )
    verdict = {n: "met" if p50[n] < 100 else "missed" for n in ("same replica", "service-hosted")}
    print(
        f"  target p50 < 100 ms on the same replica: HTTP worker {verdict['same replica']}, "
        f"service-hosted worker {verdict['service-hosted']} (cross replica: bounded by the 0.25 s probe)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100, help="measured log lines per scenario")
    parser.add_argument("--database-url", help="a PostgreSQL URL: a scratch database is made beside it")
    args = parser.parse_args()
    print(
        f"events bench: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        await bench(f"sqlite+aiosqlite:///{tmp}/events.db", "SQLite", args.lines, Path(tmp))
        if args.database_url:
            async with scratch_database(args.database_url) as url:
                await bench(url, "PostgreSQL", args.lines, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
