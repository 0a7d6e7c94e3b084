"""Soak: `factoryctl serve` under a mixed open-loop load for minutes or hours, sampled every 30 s.

    .venv/bin/python bench/soak.py [--minutes 10] [--sample 30] [--database-url postgresql://.../test]

Starts the real ``factoryctl serve`` (a child process: SQLite in a scratch directory, or a scratch
PostgreSQL database beside the one ``--database-url`` names) with 2 service-hosted ``echo`` workers and
a factory applied by the CLI: 3 token webhooks routed to one automation that matches half of the
deliveries, and a notification endpoint (every SUCCEEDED run) on a loopback receiver that answers 500 to
10% of the messages. All traffic stays on 127.0.0.1.

1. Idle: descriptors and threads of the serve processes once they have held still for a pool-trim
   window (start-up's connections closed); the workers' idle throughput (a burst of
   ``--burst`` run-starting deliveries, timed until every run has finished).
2. Load, open loop (requests leave on schedule whatever the answers take): ``--rate`` deliveries/s over
   the 3 webhooks (``--run-share`` of them start a run), ``--api-rate`` API runs/s, ``--team-streams``
   team-stream clients reconnecting every 5-30 s, ``--run-streams`` clients following one run each,
   run-list polling and console pages every second.
3. Drain and settle: load stops, the backlog drains, then after ``--settle`` seconds the descriptors
   and threads are read again.

Every ``--sample`` seconds one row: RSS, fds and threads of the serve process, database and WAL sizes,
rows, QUEUED and notification backlogs, requests and errors, delivery latency p50/p99, every request's
p99, runs finished per second, delivery → run started p99. Then a verdict per target of issue 29's "Done
when" (docs/benchmarks.md, "Sustained load").
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
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientTimeout

from bench import _soak_probe as probe
from bench._soak_serve import HOOKS, STREAMS_PER_KEY, Served, log_summary, serving, wait_for
from bench.claims import scratch_database

BODY_PAD = "x" * 800  # a delivery of about 1 KB, like bench/ingress.py's


class Load:
    """The clients of one soak, sharing one HTTP session and one :class:`~bench._soak_probe.Meter`."""

    def __init__(self, served: Served) -> None:
        self.http, self.base, self.hooks, self.token = served.http, served.base, served.hooks, served.token
        self.key, self.stream_keys = served.keys[0], served.keys[1:] or served.keys
        self.auth = {"Authorization": f"Bearer {self.key}"}
        self.streams = 0
        self.meter = probe.Meter()
        self.stop = asyncio.Event()
        self.api_runs: list[str] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.sequence = 0

    async def timed(self, kind: str, call: Awaitable[int], ok: tuple[int, ...]) -> None:
        start = time.monotonic()
        try:
            status = await call
        except Exception as exc:  # a refused or broken connection is an error of the soak
            self.meter.error(kind, repr(exc))
            return
        if status in ok:
            self.meter.ok(kind, time.monotonic() - start)
        else:
            self.meter.error(kind, f"HTTP {status}")

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        async with self.http.post(url, data=body, headers=headers) as r:
            await r.read()
            return r.status

    def delivery(self, opened: bool) -> Awaitable[None]:
        self.sequence += 1
        uid = self.hooks[HOOKS[self.sequence % len(HOOKS)]]
        body = json.dumps({"action": "opened" if opened else "closed", "n": self.sequence, "pad": BODY_PAD})
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "X-Factory-Delivery-Id": f"soak-{self.sequence}-{random.getrandbits(32)}",
        }
        return self.timed(
            "delivery", self._post(f"{self.base}/webhooks/w/{uid}", body.encode(), headers), (202,)
        )

    async def api_run(self) -> None:
        async def call() -> int:
            headers = {**self.auth, "Content-Type": "application/json"}
            body = json.dumps({"prompt": "soak API run", "title": "soak"}).encode()
            async with self.http.post(f"{self.base}/api/v1/agent/runs", data=body, headers=headers) as r:
                answer = await r.json(content_type=None)
                if r.status in (200, 201) and "run_id" in answer:
                    self.api_runs = [*self.api_runs[-50:], answer["run_id"]]
                return r.status

        await self.timed("api_run", call(), (200, 201))

    async def get(self, kind: str, path: str, headers: dict[str, str] | None = None) -> None:
        async def call() -> int:
            async with self.http.get(f"{self.base}{path}", headers=headers or self.auth) as r:
                await r.read()
                return r.status

        await self.timed(kind, call(), (200,))

    async def paced(self, rate: float, fire: Callable[[int], Awaitable[None] | None]) -> None:
        """Open loop: call ``fire(n)`` at ``rate`` per second on schedule, never waiting for answers."""
        if rate <= 0:
            return
        start, n = time.monotonic(), 0
        while not self.stop.is_set():
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), delay)
                continue
            work = fire(n)
            if work is not None:
                task = asyncio.ensure_future(work)
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            n += 1

    async def stream(self, kind: str, path: str, rng: random.Random, hold: tuple[float, float]) -> None:
        """A client that holds an SSE stream open for a while, then reconnects, until the load stops."""
        self.streams += 1
        key = self.stream_keys[(self.streams - 1) // STREAMS_PER_KEY % len(self.stream_keys)]
        auth = {"Authorization": f"Bearer {key}"}
        while not self.stop.is_set():
            target = path if "{run}" not in path else path.format(run=rng.choice(self.api_runs or ["none"]))
            start = time.monotonic()
            try:
                async with self.http.get(
                    f"{self.base}{target}", headers=auth, timeout=ClientTimeout(total=None)
                ) as r:
                    if r.status not in (200, 204, 404):
                        self.meter.error(kind, f"HTTP {r.status}")
                    else:
                        self.meter.ok(kind, time.monotonic() - start)
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(rng.uniform(*hold)):
                                async for _ in r.content.iter_any():
                                    if self.stop.is_set():
                                        break
            except Exception as exc:
                self.meter.error(kind, repr(exc))
            await asyncio.sleep(rng.uniform(0.05, 0.5))

    async def console(self) -> None:
        """Sign in once (the real form, its CSRF token), then fetch console pages every second."""
        async with self.http.get(f"{self.base}/console/login") as r:
            page = await r.text()
        found = re.search(r'name="login_token" value="([^"]+)"', page)
        if found is None:
            self.meter.error("console", "no login_token in the sign-in form")
            return
        form = {"api_key": self.key, "login_token": found.group(1), "next": "/console/runs"}
        async with self.http.post(f"{self.base}/console/login", data=form, allow_redirects=False) as r:
            if r.status != 303:
                self.meter.error("console", f"sign-in answered HTTP {r.status}")
                return
        pages = ("/console/runs", "/console/", "/console/factories")
        n = 0
        while not self.stop.is_set():
            n += 1
            await self.get("console", pages[n % len(pages)], headers={})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 1.0)


async def soak(args: argparse.Namespace, db_url: str, work: Path) -> int:
    streams = args.team_streams + args.run_streams
    hook = str(Path(__file__).parent / "_serve_hook")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH", "")) if p),
        "FACTORY_SOAK_DIR": str(work),
        "FACTORY_SOAK_MEMORY_SECONDS": str(args.sample),
    }
    if args.tracemalloc:
        env |= {"PYTHONTRACEMALLOC": "1", "FACTORY_SOAK_TRACEMALLOC_SECONDS": str(args.tracemalloc)}
    extra: tuple[str, ...] = ()
    if args.run_retention_minutes is not None:  # so retention deletes within the soak's hour
        extra = ("--run-retention-days", f"{args.run_retention_minutes / 1440:.6f}")
    if args.delivery_retention_minutes is not None:
        extra += ("--delivery-retention-days", f"{args.delivery_retention_minutes / 1440:.6f}")
    async with serving(
        work,
        db_url,
        workers=args.workers,
        stream_clients=streams,
        env=env,
        extra=extra,
        worker_process=args.worker_process,
    ) as served:
        load = Load(served)
        idle = await settled_idle(served.server.pid)
        print(f"idle descriptors: {probe.fd_kinds(served.server.pid)}")
        idle_rate = await burst(load, served.engine, args.burst)
        print(f"idle: fds {idle[0]}, threads {idle[1]}; workers' idle throughput {idle_rate:.1f} runs/s")
        load.meter.drain()
        return await loaded(args, load, served, idle, idle_rate)


async def settled_idle(
    pid: int, quiet_seconds: float = 75.0, limit_seconds: float = 240.0
) -> tuple[int, int]:
    """Descriptors and threads of an idle server once they have held still for ``quiet_seconds``: longer
    than the pool trim's window (60 s), so the connections of start-up (migrations, the first reconcile)
    are closed as they would be after load, and "back to idle" compares like with like."""
    start = since = time.monotonic()
    fds = probe.proc_stats(pid)[1]
    while time.monotonic() - since < quiet_seconds and time.monotonic() - start < limit_seconds:
        await asyncio.sleep(5)
        if (now := probe.proc_stats(pid)[1]) != fds:
            fds, since = now, time.monotonic()
    return probe.proc_stats(pid)[1:]


async def burst(load: Load, engine: Any, n: int) -> float:
    """Runs/s the workers finish with nothing else to do: ``n`` run-starting deliveries, all at once."""
    before = int((await probe.store_stats(engine, dt.datetime.now(dt.UTC)))["terminal"])
    start = time.monotonic()
    await asyncio.gather(*(load.delivery(True) for _ in range(n)))
    if load.meter.total_errors:
        raise SystemExit(f"soak: the idle burst failed: {load.meter.first_errors}")

    async def finished() -> bool:
        done = int((await probe.store_stats(engine, dt.datetime.now(dt.UTC)))["terminal"])
        return done - before >= n

    await wait_for(finished, 600, f"{n} burst runs finished")
    return n / (time.monotonic() - start)


async def loaded(
    args: argparse.Namespace, load: Load, served: Served, idle: tuple[int, int], idle_rate: float
) -> int:
    server, engine = served.server, served.engine
    rng = random.Random(7)
    team, run = "/api/v1/agent/events", "/api/v1/agent/runs/{run}/events"
    clients = [
        load.paced(args.rate, lambda n: load.delivery(rng.random() < args.run_share)),
        load.paced(args.api_rate, lambda n: load.api_run()),
        load.paced(1.0, lambda n: load.get("list", "/api/v1/agent/runs?limit=20")),
        load.console(),
        *(load.stream("team_stream", team, rng, (5, 30)) for _ in range(args.team_streams)),
        *(load.stream("run_stream", run, rng, (2, 20)) for _ in range(args.run_streams)),
    ]  # fmt: skip
    tasks = [asyncio.create_task(c) for c in clients]
    rows: list[tuple[float, dict[str, Any]]] = []
    start, load_start = time.monotonic(), time.time()
    since = dt.datetime.now(dt.UTC)
    previous = await probe.take(engine, server.pid, load.meter, since, None)
    print(probe.HEADER)
    while (elapsed := time.monotonic() - start) < args.minutes * 60:
        await asyncio.sleep(min(args.sample, args.minutes * 60 - elapsed))
        served.check_alive()
        now = dt.datetime.now(dt.UTC)
        sample = await probe.take(engine, server.pid, load.meter, since, previous)
        since, previous = now, sample
        minute = (time.monotonic() - start) / 60
        rows.append((minute, sample))
        print(probe.row_line(minute, sample), flush=True)
    load.stop.set()
    await asyncio.gather(*tasks)
    await asyncio.gather(*list(load.tasks))
    late = load.meter.drain()[2]

    async def drained() -> bool:
        stats = await probe.store_stats(engine, dt.datetime.now(dt.UTC))
        # Runs only: notifications answered 500 wait for their retry backoff, by design.
        return bool(stats["queued"] == 0 and stats["active"] == 0)

    drain_start = time.monotonic()
    try:
        await wait_for(drained, args.drain, "runs drained")
        print(f"runs drained in {time.monotonic() - drain_start:.0f} s; settling {args.settle:.0f} s")
    except SystemExit as exc:
        print(f"{exc}; settling {args.settle:.0f} s")
    await asyncio.sleep(args.settle)
    backlog = (await probe.store_stats(engine, dt.datetime.now(dt.UTC)))["notify_backlog"]
    print(f"notification messages pending (retries after a 500 included): {backlog}")
    after = probe.proc_stats(server.pid)[1:]
    print(f"descriptors after: {probe.fd_kinds(server.pid)}")
    for line in probe.memory_lines(served.log_path.parent / "memory.jsonl", load_start, args.minutes):
        print(line)
    if args.tracemalloc:
        for line in probe.tracemalloc_growth(served.log_path.parent / "tracemalloc", args.minutes):
            print(line)
    outcome = probe.Outcome(
        idle_rate=idle_rate,
        run_arrivals=args.rate * args.run_share + args.api_rate,
        idle=idle,
        after=after,
        errors=sum(r["errors"] for _, r in rows) + late,
        requests=load.meter.total_requests,
    )
    answered = served.answered
    print(f"notification receiver: {answered['204']} answered 204, {answered['500']} answered 500")
    print(log_summary(served.log_path))
    for problem in load.meter.first_errors:
        print(f"  error: {problem}")
    met = 0
    for target, measured, ok in probe.verdicts(rows, outcome):
        met += ok
        print(f"{'met   ' if ok else 'MISSED'} {target}: {measured}")
    return 0 if met == len(probe.verdicts(rows, outcome)) else 1


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load phase")
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--database-url", help="PostgreSQL: a scratch database is made beside this one")
    parser.add_argument("--rate", type=float, default=100.0, help="deliveries/s over the 3 webhooks")
    parser.add_argument("--run-share", type=float, default=0.5, help="share of deliveries that start a run")
    parser.add_argument("--api-rate", type=float, default=2.0, help="API runs/s")
    parser.add_argument("--team-streams", type=int, default=20)
    parser.add_argument("--run-streams", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="service-hosted echo workers")
    parser.add_argument(
        "--worker-process",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve's workers in their own process (the default) or on its event loop (--no-worker-process)",
    )
    parser.add_argument("--burst", type=int, default=200, help="runs of the idle-throughput burst")
    parser.add_argument("--drain", type=float, default=300.0, help="seconds allowed for the backlog to drain")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after the drain before fds")
    parser.add_argument(
        "--tracemalloc", type=float, metavar="SECONDS", help="tracemalloc in serve, a snapshot every SECONDS"
    )
    parser.add_argument(
        "--run-retention-minutes",
        type=float,
        help="serve --run-retention-days as minutes (the maintenance job deletes every 5 minutes)",
    )
    parser.add_argument(
        "--delivery-retention-minutes",
        type=float,
        help="serve --delivery-retention-days as minutes (the delivery log is pruned every 5 minutes)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (serve.log, the DB)")
    args = parser.parse_args()
    print(
        f"soak: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
        f"{os.getloadavg()[0]:.1f}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {json.dumps(vars(args))}"
    )
    work = Path(tempfile.mkdtemp(prefix="factory-soak-"))
    try:
        if args.database_url:
            async with scratch_database(args.database_url, "factory_soak") as url:
                return await soak(args, url, work)
        return await soak(args, f"sqlite:///{work / 'data' / 'factory.db'}", work)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
