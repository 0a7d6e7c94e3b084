"""Benchmark: ``GET /api/v1/agent/runs`` first page vs a deep keyset page, through the real app over HTTP.

Seeds N runs (default 100,000; ``--runs 1000000`` for the full figure) with a bulk insert, serves the
real aiohttp app on a local port, and times sequential requests with a state filter:

- first page: ``?state=SUCCEEDED&limit=20``
- deep page: the same with a cursor positioned after 90% of the matching rows

Keyset pagination should make both cost about the same (ratio deep/first near 1); an OFFSET scan
would grow with depth. Runs on SQLite, and on PostgreSQL when ``--postgres URL`` or
``FACTORY_TEST_POSTGRES_URL`` is given (a temporary database is created there and dropped).

    .venv/bin/python bench/runs_list.py [--runs N] [--requests K] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from sqlalchemy import func, insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import create_app
from api.context import ServerSettings
from api.http.pagination import Cursor, encode_cursor, fingerprint, timestamp_key
from api.runs.records import RunFilters
from store import apikeys, ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, normalize_url, session_factory
from store.models import Run
from store.teams import ensure_team

STATES = ["SUCCEEDED"] * 6 + ["FAILED"] * 2 + ["QUEUED", "CANCELLED"]
FILTER_STATE = "SUCCEEDED"
BATCH = 5000
BENCH_KEY = "bWVkaXVtX2JlbmNoX2tleV8zMl9ieXRlc19sb25nX18="


async def seed(engine: AsyncEngine, count: int) -> tuple[str, str]:
    """Insert ``count`` runs of one team (bulk, batched); returns (team id, member API key)."""
    sessions = session_factory(engine)
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        _row, key = await apikeys.create_key(s, SystemClock(), team.id, "bench", "member")
    rng = random.Random(7)
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    done = 0
    while done < count:
        rows: list[dict[str, Any]] = []
        for i in range(done, min(done + BATCH, count)):
            created = start + dt.timedelta(seconds=i)
            updated = created + dt.timedelta(seconds=rng.randint(0, 3600))
            rows.append(
                {
                    "run_id": ids.new_id(ids.RUN, now_ms=int(created.timestamp() * 1000)),
                    "team_id": team.id,
                    "title": f"run {i}",
                    "prompt": f"benchmark prompt {i}",
                    "state": rng.choice(STATES),
                    "created_at": created,
                    "updated_at": updated,
                    "queued_at": created,
                    "agent_config": {},
                    "source": "API",
                    "creator_type": "service_account",
                    "creator_uid": "key_bench",
                    "metadata": {},
                    "worker_host": "",
                    "attempt": 0,
                    "cancel_requested": False,
                }
            )
        async with engine.begin() as conn:
            await conn.execute(insert(Run), rows)
        done += len(rows)
    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            await conn.exec_driver_sql("ANALYZE runs")
        else:
            await conn.exec_driver_sql("ANALYZE")
    return team.id, key


async def deep_cursor(engine: AsyncEngine, team_id: str, depth: float) -> str:
    """The cursor a client would hold after paging through ``depth`` of the matching rows."""
    filters = RunFilters(states=(FILTER_STATE,))
    async with session_factory(engine)() as s:
        total = await s.scalar(
            select(func.count()).select_from(Run).where(Run.team_id == team_id, Run.state == FILTER_STATE)
        )
        row = (
            await s.execute(
                select(Run.updated_at, Run.run_id)
                .where(Run.team_id == team_id, Run.state == FILTER_STATE)
                .order_by(Run.updated_at.desc(), Run.run_id.desc())
                .offset(int((total or 0) * depth))
                .limit(1)
            )
        ).one()
    fp = fingerprint({"sort_by": "updated_at", "sort_order": "desc", **filters.params()})
    return encode_cursor(Cursor(value=timestamp_key(row[0]), row_id=row[1]), fp)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def timed(
    http: aiohttp.ClientSession, urls: list[str], headers: dict[str, str], n: int
) -> list[list[float]]:
    """Latencies (ms) of ``n`` rounds; each round requests every URL once, so drift hits all alike."""
    out: list[list[float]] = [[] for _ in urls]
    for _ in range(n):
        for i, url in enumerate(urls):
            t0 = time.perf_counter()
            async with http.get(url, headers=headers) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{url}: HTTP {resp.status}: {body[:200]!r}")
            out[i].append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(url: str, label: str, runs: int, requests: int, data_dir: Path) -> None:
    engine = create_engine(url)
    await migrate(engine)
    t0 = time.perf_counter()
    team_id, key = await seed(engine, runs)
    seed_s = time.perf_counter() - t0
    cursor = await deep_cursor(engine, team_id, 0.9)
    port = free_port()
    settings = ServerSettings(data_dir=data_dir, port=port)
    app = create_app(settings, engine, SecretBox.from_setting(BENCH_KEY))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}/api/v1/agent/runs?state={FILTER_STATE}&limit=20"
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with aiohttp.ClientSession() as http:
            urls = [base, f"{base}&cursor={cursor}"]
            await timed(http, urls, headers, 20)  # warm up connections and caches
            first, deep = await timed(http, urls, headers, requests)
    finally:
        await runner.cleanup()
        await engine.dispose()
    print(
        f"\n{label}: {runs:,} runs seeded in {seed_s:.1f}s; {requests} sequential requests each, interleaved"
    )
    print(f"  {'page':<28} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"  {'first (state filter)':<28} {statistics.median(first):8.2f} {pct(first, 0.99):8.2f}")
    print(f"  {'deep, after 90% (cursor)':<28} {statistics.median(deep):8.2f} {pct(deep, 0.99):8.2f}")
    print(
        f"  ratio deep/first: p50 {statistics.median(deep) / statistics.median(first):.2f}, "
        f"p99 {pct(deep, 0.99) / pct(first, 0.99):.2f}"
    )


async def postgres_database(base_url: str, drop: str | None = None) -> str:
    import asyncpg  # type: ignore[import-untyped]

    parsed = make_url(normalize_url(base_url))
    conn = await asyncpg.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        password=parsed.password,
        database=parsed.database or "postgres",
    )
    try:
        if drop:
            await conn.execute(f'DROP DATABASE IF EXISTS "{drop}" WITH (FORCE)')
            return drop
        name = f"bench_runs_{uuid.uuid4().hex[:10]}"
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return parsed.set(database=name).render_as_string(hide_password=False)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--postgres", default=os.environ.get("FACTORY_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    print(
        f"runs_list benchmark — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        await bench(f"sqlite+aiosqlite:///{tmp}/bench.db", "SQLite", args.runs, args.requests, Path(tmp))
        if args.postgres:
            url = await postgres_database(args.postgres)
            try:
                await bench(url, "PostgreSQL", args.runs, args.requests, Path(tmp))
            finally:
                await postgres_database(args.postgres, drop=str(make_url(url).database))


if __name__ == "__main__":
    asyncio.run(main())
