"""Notifications outbox: run events → signed POSTs to a local receiver, against a plain aiohttp client.

    .venv/bin/python bench/outbox.py [--messages 5000] [--in-flight 64] [--database-url URL]

Seeds a team, a factory, a ``whsec_`` secret and one endpoint (``events: [QUEUED]``) whose URL is a receiver
on 127.0.0.1 (aiohttp in a child process: answers 204, counts requests and webhook-ids, verifies every 50th
signature with the ``standardwebhooks`` library), bulk-inserts ``--messages`` runs of the factory
(:func:`api.runs.records.insert_runs`, with their QUEUED events), then runs a real ``Sender`` with a
``GuardedTransport`` until every message is committed ``delivered``: fan-out + claim + signed POST + record.
Baseline, in the same run: the same bodies (signed beforehand) POSTed to the same receiver by a plain
aiohttp client with as many in flight. Prints both rates, their ratio, whether the outbox reaches 500/s, the
wall time of each phase of the sender loop and the CPU time of the threads (profiles: docs/benchmarks.md).
``--database-url`` also measures PostgreSQL, on a scratch database made beside the one named.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientSession, TCPConnector, web
from cryptography.fernet import Fernet
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.ingress import signatures
from api.notifications import fanout, policy
from api.notifications import sender as outbox
from api.notifications.transport import GuardedTransport
from api.runs.new_run import Creator, NewRun
from api.runs.records import build_run_row, insert_runs
from bench.claims import scratch_database
from bench.ingress import _wait_port
from bench.pickup import free_port
from store import ids
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.models import Factory, NotificationEndpoint, NotificationMessage
from store.teams import ensure_team

WHSEC = "whsec_YmVuY2gtc2lnbmluZy1rZXktMzItYnl0ZXMtbG9uZyE="
CLOCK = SystemClock()
PHASES = ("fan_out", "claim", "signing_secrets", "record")  # what Sender.step awaits, in order


def serve_receiver(port: int) -> None:
    """The receiver (child process): 204 to every POST; ``GET /stats`` answers the counts."""
    import standardwebhooks

    verifier, stats = standardwebhooks.Webhook(WHSEC), {"requests": 0, "verified": 0, "bad": 0}
    seen: set[str] = set()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        stats["requests"] += 1
        seen.add(request.headers.get("webhook-id", ""))
        if stats["requests"] % 50 == 1:
            try:
                verifier.verify(body, dict(request.headers))
                stats["verified"] += 1
            except standardwebhooks.WebhookVerificationError:
                stats["bad"] += 1
        return web.Response(status=204)

    async def report(_: web.Request) -> web.Response:
        return web.json_response({**stats, "unique_ids": len(seen)})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/stats", report)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


async def seed(engine: AsyncEngine, box: SecretBox, url: str, count: int) -> None:
    """Team, factory, secret, endpoint; the fan-out cursor; then ``count`` QUEUED runs in bulk."""
    await migrate(engine)
    sessions, now = session_factory(engine), CLOCK.now()
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.create(s, box, CLOCK, team.id, "HOOK_SECRET", WHSEC)
        common: dict[str, Any] = {"team_id": team.id, "managed_by": "api", "updated_at": now}
        factory = Factory(
            uid=ids.new_id(ids.FACTORY), name="acme", agents={"foreman": {}}, conditions=[],
            created_at=now, **common,
        )  # fmt: skip
        s.add(factory)
        await s.flush()
        s.add(
            NotificationEndpoint(
                uid=ids.new_id(ids.NOTIFICATION), factory_uid=factory.uid, name="bench", url=url,
                secret_name="HOOK_SECRET", events=["QUEUED"], filter={}, enabled=True,
                created_at=now - dt.timedelta(minutes=1), **common,
            )
        )  # fmt: skip
    async with sessions() as s, s.begin():
        await fanout.fan_out(s, CLOCK)  # a fresh cursor starts at the newest event: before the runs
    creator = Creator("service_account", "key_bench", "bench")
    rows = [
        build_run_row(
            now, NewRun(
                team_id=team.id, prompt="p", title=f"run {n}", agent_config={}, source="API",
                creator=creator, metadata={}, factory_uid=factory.uid,
            ),
        )
        for n in range(count)
    ]  # fmt: skip
    for start in range(0, count, 1000):
        async with engine.begin() as conn:
            await conn.run_sync(insert_runs, [(row, ()) for row in rows[start : start + 1000]])


class Phases:
    """Wall time and calls of each phase of the sender loop, while installed (``with``): the module
    functions ``Sender.step`` awaits are replaced, in memory only, by timed calls of themselves."""

    def __init__(self, target: int) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.recorded, self.target, self.all_recorded = 0, target, asyncio.Event()
        self.saved = [(fanout if n == "fan_out" else outbox, n) for n in PHASES]

    def __enter__(self) -> Phases:
        for module, name in self.saved:
            setattr(module, name, self._timed(name, getattr(module, name)))
        return self

    def __exit__(self, *_: object) -> None:
        for module, name in self.saved:
            setattr(module, name, getattr(module, name).inner)

    def _timed(self, name: str, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await inner(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - began
                self.calls[name] += 1
                if name == "record":
                    self.recorded += len(args[3])
                    if self.recorded >= self.target:
                        self.all_recorded.set()

        timed.inner = inner  # type: ignore[attr-defined]
        return timed


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of this process, by thread id (Linux)."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[task.name] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def run_sender(engine: AsyncEngine, box: SecretBox, count: int, in_flight: int) -> float:
    """Seconds from the sender's start until all ``count`` messages are committed ``delivered``."""
    sessions = session_factory(engine)
    settings = policy.NotificationSettings(max_in_flight=in_flight)
    delivered = select(func.count()).where(NotificationMessage.status == outbox.DELIVERED)
    cpu_before, loop_tid = thread_cpu(), str(os.getpid())
    with Phases(count) as phases:
        async with GuardedTransport(settings) as transport:
            sender = outbox.Sender(sessions, CLOCK, box, transport, settings)
            began = time.perf_counter()
            task = asyncio.create_task(sender.run())
            await phases.all_recorded.wait()
            while True:  # the last results' commit
                async with sessions() as s:
                    if await s.scalar(delivered) == count:
                        break
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - began
            cpu = {tid: t - cpu_before.get(tid, 0.0) for tid, t in thread_cpu().items()}
            logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)  # a turn cancelled mid-query
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    print(f"  sender loop, wall time per phase over {elapsed:.2f} s:")
    for name in PHASES:
        took, n = phases.seconds[name], phases.calls[name]
        per = took / max(n, 1) * 1000
        print(f"    {name:<16} {took:6.2f} s ({took / elapsed:4.0%})  {n:5d} calls  {per:6.2f} ms/call")
    others = sum(t for tid, t in cpu.items() if tid != loop_tid)
    print(
        f"  messages per claim {count / max(phases.calls['claim'], 1):.1f}; CPU seconds: event loop "
        f"{cpu[loop_tid]:.2f}, other threads (database driver) {others:.2f}"
    )
    return elapsed


async def run_baseline(engine: AsyncEngine, url: str, in_flight: int) -> float:
    """The same bodies, signed before the clock starts, POSTed by a plain client, ``in_flight`` at once."""
    async with session_factory(engine)() as s:
        rows = (await s.execute(select(NotificationMessage.id, NotificationMessage.payload))).all()
    now, requests = CLOCK.now(), []
    for message_id, text in rows:
        headers = signatures.sign(outbox.SCHEME, WHSEC, text.encode(), now, message_id)
        requests.append((text.encode(), {"Content-Type": "application/json", **headers}))
    queue = iter(requests)

    async def worker(http: ClientSession) -> None:
        for body, headers in queue:
            async with http.post(url, data=body, headers=headers) as resp:
                await resp.read()
                assert resp.status == 204

    async with ClientSession(connector=TCPConnector(limit=in_flight)) as http:
        began = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(in_flight)))
        return time.perf_counter() - began


async def receiver_stats(base: str) -> dict[str, int]:
    async with ClientSession() as http, http.get(f"{base}/stats") as resp:
        return dict(await resp.json())


async def bench(db_url: str, label: str, args: argparse.Namespace) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-receiver", str(port)])  # noqa: ASYNC220
    base, box = f"http://127.0.0.1:{port}", SecretBox.from_setting(Fernet.generate_key().decode())
    engine = create_engine(db_url)
    try:
        _wait_port(port, proc)
        began = time.perf_counter()
        await seed(engine, box, f"{base}/hook", args.messages)
        seeded = time.perf_counter() - began
        print(f"\n{label}: {args.messages:,} runs seeded in {seeded:.1f} s; endpoint {base}/hook")
        outbox_s = await run_sender(engine, box, args.messages, args.in_flight)
        after_sender = await receiver_stats(base)
        baseline_s = await run_baseline(engine, f"{base}/hook", args.in_flight)
        total = await receiver_stats(base)
    finally:
        proc.terminate()
        proc.wait(10)
        await engine.dispose()
    rate, floor = args.messages / outbox_s, args.messages / baseline_s
    print(f"  receiver: {json.dumps(after_sender)} after the outbox, {json.dumps(total)} in all")
    if after_sender["unique_ids"] != args.messages or total["bad"]:
        raise SystemExit("the receiver did not get every message exactly once, correctly signed")
    plain = f"plain aiohttp client, {args.in_flight} in flight (baseline)"
    print(f"  {'outbox (fan-out, claim, signed POST, record)':<46} {rate:7.0f}/s  ({outbox_s:.2f} s)")
    print(f"  {plain:<46} {floor:7.0f}/s  ({baseline_s:.2f} s)")
    met = "met" if rate >= 500 else "missed"
    print(f"  ratio outbox/baseline: {rate / floor:.2f}; target >= 500 notifications/s: {met}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="runs, hence messages")
    parser.add_argument("--in-flight", type=int, default=policy.NotificationSettings.max_in_flight)
    parser.add_argument("--database-url", help="a PostgreSQL URL: a scratch database is made beside it")
    args = parser.parse_args()
    print(
        f"outbox bench: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        await bench(f"sqlite+aiosqlite:///{tmp}/outbox.db", "SQLite", args)
    if args.database_url:
        async with scratch_database(args.database_url) as url:
            await bench(url, "PostgreSQL", args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-receiver"]:
        serve_receiver(int(sys.argv[2]))
    else:
        asyncio.run(main())
