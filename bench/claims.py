"""Claim throughput: N queued runs, C concurrent claimers, on SQLite and PostgreSQL.

Usage::

    python bench/claims.py [--runs 2000] [--claimers 4] [--postgres URL]

PostgreSQL runs when ``--postgres`` or ``FACTORY_TEST_POSTGRES_URL`` is given (a scratch database
is created next to the one named and dropped afterwards). For each backend it prints:

- ``select1/s``: ``SELECT 1`` transactions per second by C concurrent sessions (the floor cost of a
  round trip on this machine), measured in the same run;
- ``write1/s``: committed one-row UPDATE transactions per second by C concurrent sessions, each on
  its own row (the floor cost of a durable write: a claim is one such write plus finding the run);
- ``1 claimer/s``: claims per second by a single claimer;
- ``C claimers/s``: claims per second by C concurrent claimers, and the ratios of that rate to both
  baselines;
- ``double claims``: runs handed out more than once (must be 0), checked both from the claimers'
  answers and from the rows (every run CLAIMED exactly once, ``attempt`` = 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import tempfile
import time
import uuid
from collections.abc import AsyncIterator

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.claims.queue import claim_next
from store import ids
from store.clock import SystemClock
from store.db import create_engine, migrate, normalize_url, session_factory
from store.models import Run
from store.teams import ensure_team

CLOCK = SystemClock()


async def seed(sessions: async_sessionmaker[AsyncSession], n: int) -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await s.execute(delete(Run))
        now = CLOCK.now()
        rows = [
            {
                "run_id": ids.new_id(ids.RUN),
                "team_id": team.id,
                "title": f"run {i}",
                "prompt": "p",
                "state": "QUEUED",
                "created_at": now,
                "updated_at": now,
                "queued_at": now,
                "agent_config": {},
                "source": "API",
                "creator_type": "service_account",
                "creator_uid": "bench",
                "metadata": {},
                "worker_host": "",
                "attempt": 0,
                "cancel_requested": False,
            }
            for i in range(n)
        ]
        for start in range(0, n, 500):
            await s.execute(insert(Run), rows[start : start + 500])


async def select_one_rate(sessions: async_sessionmaker[AsyncSession], total: int, concurrency: int) -> float:
    async def one(count: int) -> None:
        for _ in range(count):
            async with sessions() as s, s.begin():
                await s.execute(text("SELECT 1"))

    started = time.perf_counter()
    await asyncio.gather(*(one(total // concurrency) for _ in range(concurrency)))
    return (total // concurrency * concurrency) / (time.perf_counter() - started)


async def write_one_rate(sessions: async_sessionmaker[AsyncSession], total: int, concurrency: int) -> float:
    """Committed single-row UPDATEs per second (each session its own row): the durable-write floor."""
    await seed(sessions, concurrency)
    async with sessions() as s:
        rows = list((await s.scalars(select(Run.run_id))).all())

    async def one(run_id: str, count: int) -> None:
        for _ in range(count):
            async with sessions() as s, s.begin():
                await s.execute(update(Run).where(Run.run_id == run_id).values(attempt=Run.attempt + 1))

    started = time.perf_counter()
    await asyncio.gather(*(one(run_id, total // concurrency) for run_id in rows))
    return (total // concurrency * concurrency) / (time.perf_counter() - started)


async def claim_rate(sessions: async_sessionmaker[AsyncSession], n: int, claimers: int) -> tuple[float, int]:
    """Claims per second and the number of double claims (answers and rows)."""
    await seed(sessions, n)

    async def claimer(owner: str) -> list[str]:
        got: list[str] = []
        misses = 0
        while misses < 3:  # a PostgreSQL claimer can see a spurious miss while rows are locked
            async with sessions() as s, s.begin():
                run = await claim_next(s, CLOCK, worker_hosts=[""], owner=owner, lease_seconds=300)
                if run is None:
                    misses += 1
                    continue
                misses = 0
                got.append(run.run_id)
        return got

    started = time.perf_counter()
    results = await asyncio.gather(*(claimer(f"bench-{i}") for i in range(claimers)))
    elapsed = time.perf_counter() - started
    answers = [r for got in results for r in got]
    async with sessions() as s:
        claimed_rows = await s.scalar(select(func.count()).where(Run.state == "CLAIMED", Run.attempt == 1))
        queued_rows = await s.scalar(select(func.count()).where(Run.state == "QUEUED"))
    doubles = (len(answers) - len(set(answers))) + (n - int(claimed_rows or 0))
    if queued_rows:
        raise SystemExit(f"{queued_rows} runs were never claimed")
    return len(answers) / elapsed, doubles


async def bench(label: str, engine: AsyncEngine, runs: int, claimers: int) -> int:
    await migrate(engine)
    sessions = session_factory(engine)
    baseline = await select_one_rate(sessions, runs, claimers)
    writes = await write_one_rate(sessions, runs, claimers)
    single, single_doubles = await claim_rate(sessions, runs, 1)
    multi, doubles = await claim_rate(sessions, runs, claimers)
    print(
        f"{label:<10}  select1/s {baseline:6.0f}  write1/s {writes:6.0f}  1 claimer/s {single:6.0f}  "
        f"{claimers} claimers/s {multi:6.0f}  (x{multi / single:.2f} of 1 claimer, x{multi / writes:.2f} of "
        f"write1, x{multi / baseline:.2f} of select1)  double claims {doubles + single_doubles}"
    )
    return doubles + single_doubles


async def admin_exec(url: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    parsed = make_url(normalize_url(url))
    conn = await asyncpg.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        password=parsed.password,
        database=parsed.database or "postgres",
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def scratch_database(
    url: str, prefix: str = "factory_bench", *, keep: bool = False
) -> AsyncIterator[str]:
    """A new, empty PostgreSQL database beside the one ``url`` names, as a URL; dropped afterwards unless
    ``keep``."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    await admin_exec(url, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(normalize_url(url)).set(database=name).render_as_string(False)
    finally:
        if not keep:
            await admin_exec(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--claimers", type=int, default=4)
    parser.add_argument("--postgres", default=os.environ.get("FACTORY_TEST_POSTGRES_URL"), metavar="URL")
    args = parser.parse_args()
    print(
        f"claims bench: {args.runs} runs, {args.claimers} claimers; python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}"
    )
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp}/bench.db")
        try:
            failures += await bench("sqlite", engine, args.runs, args.claimers)
        finally:
            await engine.dispose()
    if args.postgres:
        async with scratch_database(args.postgres) as url:
            engine = create_engine(url)
            try:
                failures += await bench("postgresql", engine, args.runs, args.claimers)
            finally:
                await engine.dispose()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
