"""Fair sharing: service-hosted workers' throughput idle vs under ingress at 80% of its capacity.

    .venv/bin/python bench/fairness.py [--runs 60] [--database-url postgresql://.../test]

Serves the real ``factoryctl serve`` (2 ``echo`` workers; set up as ``bench/soak.py`` does) and, in one
run: (1) idle: ``--runs`` run-starting deliveries at once, timed until every run has finished; (2) the
ingress capacity: ``--connections`` clients posting deliveries that start no run, closed loop, for
``--seconds``; (3) loaded: the same deliveries open loop at ``--load`` of that capacity while the same
burst of runs is timed again. Prints both throughputs, their ratio (target ≥ 0.5), the delivery → run
started p99 of each burst (target < 1 s) and the ingress latency under load (issue 29, "Fair sharing";
docs/benchmarks.md, "Sustained load").
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy.ext.asyncio import AsyncEngine

from bench import _soak_probe as probe
from bench._soak_serve import log_summary, serving, wait_for
from bench.claims import scratch_database
from bench.soak import Load


async def timed_burst(load: Load, engine: AsyncEngine, n: int) -> tuple[float, float]:
    """Runs/s of ``n`` run-starting deliveries posted at once, and their delivery → started p99 (s)."""
    since = dt.datetime.now(dt.UTC)
    before = int((await probe.store_stats(engine, since))["terminal"])
    start = time.monotonic()
    errors = load.meter.total_errors
    await asyncio.gather(*(load.delivery(True) for _ in range(n)))
    if load.meter.total_errors > errors:
        raise SystemExit(f"fairness: the burst failed: {load.meter.first_errors}")

    async def finished() -> bool:
        done = int((await probe.store_stats(engine, since))["terminal"])
        return done - before >= n

    await wait_for(finished, 900, f"{n} burst runs finished")
    rate = n / (time.monotonic() - start)
    return rate, probe.percentile((await probe.store_stats(engine, since))["pickup"], 0.99)


async def capacity(load: Load, connections: int, seconds: float) -> float:
    """Deliveries/s (none starting a run) that ``connections`` closed-loop clients get accepted."""
    done = 0
    deadline = time.monotonic() + seconds

    async def client() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await load.delivery(False)
            done += 1

    start = time.monotonic()
    await asyncio.gather(*(client() for _ in range(connections)))
    return done / (time.monotonic() - start)


async def fairness(args: argparse.Namespace, db_url: str, work: Path) -> int:
    async with serving(work, db_url, workers=2, worker_process=args.worker_process) as served:
        load = Load(served)
        await asyncio.sleep(2)
        idle_rate, idle_pick = await timed_burst(load, served.engine, args.runs)
        print(f"idle: {idle_rate:.2f} runs/s, delivery → started p99 {idle_pick:.2f} s", flush=True)
        cap = await capacity(load, args.connections, args.seconds)
        load.meter.drain()
        print(f"ingress capacity (no runs): {cap:.0f} deliveries/s; loading at {args.load:.0%}", flush=True)
        background = asyncio.create_task(load.paced(cap * args.load, lambda n: load.delivery(False)))
        await asyncio.sleep(2)
        loaded_rate, loaded_pick = await timed_burst(load, served.engine, args.runs)
        load.stop.set()
        await background
        await asyncio.gather(*list(load.tasks))
        ingress, _every, errors = load.meter.drain()
        served.check_alive()
    ratio = loaded_rate / idle_rate
    p50, p99 = (probe.percentile(ingress, q) * 1000 for q in (0.5, 0.99))
    print(
        f"loaded: {loaded_rate:.2f} runs/s, delivery → started p99 {loaded_pick:.2f} s; ingress under load "
        f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, {errors} errors"
    )
    print(log_summary(served.log_path))
    met = ratio >= 0.5 and loaded_pick < 1.0 and errors == 0
    print(
        f"ratio loaded / idle: {ratio:.2f} (target ≥ 0.5); delivery → started p99 under load "
        f"{loaded_pick:.2f} s (target < 1 s): {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="runs of each timed burst")
    parser.add_argument(
        "--worker-process",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve's workers in their own process (the default) or on its event loop (--no-worker-process)",
    )
    parser.add_argument("--connections", type=int, default=16, help="closed-loop clients for the capacity")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the capacity measurement")
    parser.add_argument("--load", type=float, default=0.8, help="share of the capacity under load")
    parser.add_argument("--database-url", help="PostgreSQL: a scratch database is made beside this one")
    args = parser.parse_args()
    print(
        f"fairness: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
        f"{os.getloadavg()[0]:.1f}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    )
    work = Path(tempfile.mkdtemp(prefix="factory-fairness-"))
    try:
        if args.database_url:
            async with scratch_database(args.database_url, "factory_fairness") as url:
                return await fairness(args, url, work)
        return await fairness(args, f"sqlite:///{work / 'data' / 'factory.db'}", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
