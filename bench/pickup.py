"""Delivery accepted → run picked up by a service-hosted worker, with and without waking claimers.

    .venv/bin/python bench/pickup.py [--deliveries 40] [--database-url postgresql://.../test]

Serves the real app in this process (SQLite, and with ``--database-url`` also PostgreSQL in a scratch
database made beside the one named; one service-hosted worker with the ``echo`` harness, a
token webhook with one matching automation) and posts deliveries one at a time, each after the previous
run was picked up and a random pause, so arrivals fall at random points of the worker's poll cycle. The
latency of one delivery is ``started_at - queued_at`` of its run: from the accept transaction that
queued it to the worker marking it INPROGRESS (claim, claim answer, first heartbeat), both stamped by the
server's clock.

Two modes run back to back: ``poll only`` is the behaviour before ingress woke claimers (the claim signal
is replaced by one whose ``wake`` does nothing, so the worker finds the run at its next 0.5 s poll) and
``woken`` is today's (the accept path calls ``wake_claimers``). The ratio is poll-only p50 / woken p50.
Targets (issue "ingress at production speed"): woken p50 < 50 ms and p99 < 200 ms, on each store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientSession, web
from cryptography.fernet import Fernet
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import create_app
from api.claims.reaper import lease_reaper
from api.context import ServerSettings
from api.runs.claim_signal import CLAIM_SIGNAL, ClaimSignal
from bench.claims import scratch_database
from bench.ingress import BODY, TOKEN, seed_webhook
from factoryctl.serve.local_workers import service_workers
from store.crypto import SecretBox
from store.db import create_engine
from store.models import Run


class DeafSignal(ClaimSignal):
    """The claim signal as it behaved for webhook runs before: nobody woke the claimers."""

    def wake(self) -> None:
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def measure(mode: str, deliveries: int, workdir: Path, db_url: str) -> list[float]:
    key = Fernet.generate_key().decode()
    hook_uid = await seed_webhook(db_url, key, 1)
    engine = create_engine(db_url)
    port = free_port()
    settings = ServerSettings(data_dir=workdir / "data", port=port, delivery_rate_limit=100_000)
    app = create_app(
        settings,
        engine,
        SecretBox.from_setting(key),
        lifecycles=[service_workers(1, "echo", None, workdir / "ws"), lease_reaper()],
    )
    if mode == "poll only":
        app[CLAIM_SIGNAL] = DeafSignal()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    try:
        async with ClientSession() as http:
            for n in range(deliveries):
                await asyncio.sleep(random.uniform(0.05, 0.3))
                headers["X-Factory-Delivery-Id"] = f"pickup-{mode}-{n}"
                async with http.post(
                    f"http://127.0.0.1:{port}/webhooks/w/{hook_uid}", data=BODY, headers=headers
                ) as r:
                    assert r.status == 202, await r.text()
                    delivery_id = (await r.json())["delivery_id"]
                latencies.append(await picked_up(engine, delivery_id))
    finally:
        await runner.cleanup()
        await engine.dispose()
    return latencies


async def picked_up(engine: AsyncEngine, delivery_id: str, within: float = 10.0) -> float:
    """Seconds from queued to started for the run of ``delivery_id``, once a worker started it."""
    deadline = time.monotonic() + within
    stmt = select(Run.queued_at, Run.started_at).where(Run.delivery_id == delivery_id)
    while time.monotonic() < deadline:
        async with engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        if row is not None and row.started_at is not None:
            return float((row.started_at - row.queued_at).total_seconds())
        await asyncio.sleep(0.005)
    raise TimeoutError(f"no worker started the run of {delivery_id} within {within}s")


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[round(q * (len(ordered) - 1))] * 1000, 1)

    return {"p50_ms": round(statistics.median(ordered) * 1000, 1), "p90_ms": at(0.9), "p99_ms": at(0.99)}


async def bench_store(
    label: str, database: Callable[[str], AbstractAsyncContextManager[str]], n: int
) -> None:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("poll only", "woken"):
            async with database(mode) as db_url:
                results[mode] = summary(await measure(mode, n, Path(tmp), db_url))
            print(f"{label:>10} {mode:>10}: {json.dumps(results[mode])}", flush=True)
    woken = results["woken"]
    ratio = results["poll only"]["p50_ms"] / max(woken["p50_ms"], 0.1)
    met = woken["p50_ms"] < 50 and woken["p99_ms"] < 200
    print(
        f"{label:>10} ratio poll-only p50 / woken p50: {ratio:.1f}x; "
        f"target woken p50 < 50 ms, p99 < 200 ms: {'met' if met else 'missed'}",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=40)
    parser.add_argument("--database-url", help="a PostgreSQL URL: scratch databases are made beside it")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; deliveries per mode: {args.deliveries}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="factory-pickup-"))

    @contextlib.asynccontextmanager
    async def sqlite(mode: str) -> AsyncIterator[str]:
        yield f"sqlite+aiosqlite:///{workdir / mode.replace(' ', '-')}.db"

    def postgres(mode: str) -> AbstractAsyncContextManager[str]:
        assert args.database_url
        return scratch_database(args.database_url, "factory_pickup")

    try:
        await bench_store("SQLite", sqlite, args.deliveries)
        if args.database_url:
            await bench_store("PostgreSQL", postgres, args.deliveries)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
