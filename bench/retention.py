"""Retention: bytes per table for 1,000 typical runs, and a large prune next to an ingress-like writer.

``python -m bench retention [--runs 1000] [--prune-runs 5000] [--database URL]``

1. Sizes: a scratch SQLite file gets ``--runs`` finished runs shaped like a day of webhook-started runs (see
   :data:`SHAPE`), and each table's bytes (rows and indexes, from ``dbstat``) are printed per 1,000 runs.
2. Prune: ``--prune-runs`` runs older than the retention age are deleted by one maintenance pass while a
   writer commits one delivery row every 10 ms on the same engine (what ingress does per request); the
   writer's commit latency is printed with and without the prune, with the pass's duration and the WAL and
   file sizes before and after. PostgreSQL with ``--database postgresql://...`` (no sizes part there).

Results and the machine they were measured on: docs/benchmarks.md, "Retention".
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from api.runs.maintenance import maintenance_pass
from api.runs.retention import RetentionSettings
from store.db import create_engine, is_sqlite, migrate, session_factory, wal_bytes
from store.models import (
    Delivery,
    Factory,
    NotificationAttempt,
    NotificationEndpoint,
    NotificationMessage,
    Run,
    RunEvent,
    RunLog,
    Team,
)

NOW = dt.datetime.now(dt.UTC)
# One "typical" run: a webhook-started echo/agent run with a short transcript and a modest log.
SHAPE = {"events": 12, "event_bytes": 300, "log_lines": 200, "log_line_bytes": 100, "notifications": 1}
EVENT_IDS = itertools.count(1)


async def seed_parents(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(Team).values(id="t1", name="bench", created_at=NOW))
        await conn.execute(
            insert(Factory).values(
                uid="f1", team_id="t1", name="f", managed_by="api", created_at=NOW, updated_at=NOW
            )
        )
        await conn.execute(
            insert(NotificationEndpoint).values(
                uid="ep1",
                team_id="t1",
                factory_uid="f1",
                name="n",
                url="https://example.test/hook",
                secret_name="s",
                managed_by="api",
                created_at=NOW,
                updated_at=NOW,
            )
        )


async def seed_runs(engine: AsyncEngine, count: int, *, age_days: float, batch: int = 200) -> None:
    """``count`` finished runs ``age_days`` old, each with :data:`SHAPE`'s events, log lines and messages."""
    at = NOW - dt.timedelta(days=age_days)
    for start in range(0, count, batch):
        runs, events, logs, messages, attempts = [], [], [], [], []
        for _ in range(min(batch, count - start)):
            run_id = f"run_{uuid.uuid4().hex[:26]}"
            runs.append(
                {
                    "run_id": run_id,
                    "team_id": "t1",
                    "title": "Triage issue #1234: the build fails on main",
                    "prompt": "Triage the issue described in the payload below.\n" + "x" * 400,
                    "state": "SUCCEEDED",
                    "created_at": at,
                    "updated_at": at,
                    "queued_at": at,
                    "started_at": at,
                    "finished_at": at,
                    "source": "CUSTOM_WEBHOOK",
                    "creator_type": "service_account",
                    "creator_uid": "wh_bench",
                    "factory_uid": "f1",
                    "status_message": {"message": "done", "code": "ok"},
                    "log_lines": SHAPE["log_lines"],
                    "log_bytes": SHAPE["log_lines"] * SHAPE["log_line_bytes"],
                }
            )
            pad = "e" * SHAPE["event_bytes"]
            events += [
                {
                    "run_id": run_id,
                    "team_id": "t1",
                    "kind": "message",
                    "data": {"text": pad},
                    "created_at": at,
                }
                for _ in range(SHAPE["events"])
            ]
            line = "l" * SHAPE["log_line_bytes"]
            logs += [{"run_id": run_id, "stream": "stdout", "text": line, "created_at": at}] * SHAPE[
                "log_lines"
            ]
            for _ in range(SHAPE["notifications"]):
                message_id = f"msg_{uuid.uuid4().hex[:26]}"
                messages.append(
                    {
                        "id": message_id,
                        "team_id": "t1",
                        "endpoint_uid": "ep1",
                        "run_id": run_id,
                        "event_id": next(EVENT_IDS),
                        "event_type": "run.succeeded",
                        "payload": "{" + "p" * 700 + "}",
                        "status": "delivered",
                        "created_at": at,
                    }
                )
                attempts.append(
                    {
                        "message_id": message_id,
                        "endpoint_uid": "ep1",
                        "attempt": 1,
                        "trigger": "scheduled",
                        "started_at": at,
                        "duration_ms": 40,
                        "outcome": "succeeded",
                        "response_status": 200,
                    }
                )
        async with engine.begin() as conn:
            for model, rows in (
                (Run, runs),
                (RunEvent, events),
                (RunLog, logs),
                (NotificationMessage, messages),
                (NotificationAttempt, attempts),
            ):
                await conn.execute(insert(model), rows)


async def table_bytes(engine: AsyncEngine) -> dict[str, int]:
    """Bytes of each table with its indexes (SQLite ``dbstat``)."""
    stmt = text(
        "SELECT m.tbl_name, SUM(s.pgsize) FROM dbstat s JOIN sqlite_master m ON m.name = s.name"
        " GROUP BY m.tbl_name"
    )
    async with engine.connect() as conn:
        return {str(name): int(size) for name, size in (await conn.execute(stmt)).all()}


async def sizes(runs: int, workdir: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{workdir / 'sizes.db'}")
    await migrate(engine)
    await seed_parents(engine)
    await seed_runs(engine, runs, age_days=1)
    found = await table_bytes(engine)
    await engine.dispose()
    print(f"\nbytes per table for {runs} runs ({SHAPE}), scaled to 1,000 runs:")
    total = 0
    for name, size in sorted(found.items(), key=lambda kv: -kv[1]):
        per_thousand = size * 1000 // runs
        total += per_thousand
        if per_thousand >= 64 * 1024:
            print(f"  {name:<24} {per_thousand / 2**20:8.1f} MiB")
    print(f"  {'total':<24} {total / 2**20:8.1f} MiB")


async def writer(engine: AsyncEngine, stop: asyncio.Event, latencies: list[float]) -> None:
    """One small committed insert every 10 ms, like an accepted delivery."""
    while not stop.is_set():
        started = time.perf_counter()
        async with engine.begin() as conn:
            await conn.execute(
                insert(Delivery).values(
                    team_id="t1",
                    webhook_uid="wh_bench",
                    delivery_id=f"d{uuid.uuid4().hex}",
                    status="Accepted",
                    size=512,
                    received_at=NOW,
                    payload=b"{" + b"x" * 510 + b"}",
                )
            )
        latencies.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.01)


def summary(latencies: list[float]) -> str:
    if not latencies:
        return "no writes"
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    p50, worst = statistics.median(ordered), ordered[-1]
    return f"{len(ordered)} writes, p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms"


async def prune(url: str, runs: int) -> None:
    engine = create_engine(url)
    await migrate(engine)
    await seed_parents(engine)
    await seed_runs(engine, runs, age_days=45)
    database = Path(engine.url.database or "") if is_sqlite(engine) else None
    before = (wal_bytes(engine), database.stat().st_size if database else None)

    baseline: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(writer(engine, stop, baseline))
    await asyncio.sleep(5)
    stop.set()
    await task

    during: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(writer(engine, stop, during))
    started = time.perf_counter()
    report = await maintenance_pass(
        engine, session_factory(engine), RetentionSettings(), now=NOW, holder="bench"
    )
    took = time.perf_counter() - started
    stop.set()
    await task
    after = (wal_bytes(engine), database.stat().st_size if database else None)
    await engine.dispose()

    print(f"\nprune of {runs} runs on {engine.dialect.name}: {report.deleted} in {took:.1f} s")
    print(f"  writer alone:       {summary(baseline)}")
    print(f"  writer during pass: {summary(during)}")
    if database:
        print(f"  WAL {before[0]} -> {after[0]} bytes; file {before[1]} -> {after[1]} bytes")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs for the size table (1000)")
    parser.add_argument(
        "--prune-runs", type=int, default=5000, help="old runs the measured pass deletes (5000)"
    )
    parser.add_argument(
        "--database", default=None, help="a PostgreSQL URL for the prune part (default SQLite)"
    )
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.database is None:
            await sizes(args.runs, workdir)
        await prune(args.database or f"sqlite+aiosqlite:///{workdir / 'prune.db'}", args.prune_runs)


if __name__ == "__main__":
    asyncio.run(main(parse()))
