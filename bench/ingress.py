"""Ingress throughput and latency against a bare aiohttp baseline measured in the same run.

    .venv/bin/python bench/ingress.py [--duration 5] [--connections 16] [--automations 1]

Starts two servers, each in its own process on loopback: the real app (SQLite in WAL mode, limits raised
so that nothing is rate limited, a token-mode webhook with ``--automations`` matching automations, so
each accepted delivery also commits that many QUEUED runs) and a bare aiohttp app whose handler reads
the body and answers 202. Both are driven by the same closed-loop generator - ``wrk`` when installed
(a Lua script stamps a unique ``X-Factory-Delivery-Id`` on each ~1 KB JSON body), else an aiohttp
client with a bounded number of in-flight requests - and the script prints accepted/s, p50 and p99 for
both and the ratio. Access logs are off in both servers so the comparison is about request handling.

It also times routing one delivery against 2,000 compiled payload filters on one webhook: the pure
in-process match, and the full routing step (the routing-rows SELECT plus matching) on SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientSession, ClientTimeout, web
from cryptography.fernet import Fernet
from sqlalchemy import select

from api.app import create_app
from api.context import ServerSettings
from api.ingress.lookup import FilterCache, WebhookRow, matching_automations
from store import ids, payload_filter
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.models import Automation, AutomationWebhook, Factory, Webhook
from store.teams import ensure_team

TOKEN = "bench-token-0123456789"
BODY = json.dumps({"action": "opened", "repository": {"name": "repo-7"}, "text": "x" * 900}).encode()

WRK_SCRIPT = """
local counter = 0
local threads = {}
local prefix = "%(prefix)s"
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  wrk.method = "POST"
  wrk.body = [[%(body)s]]
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer %(token)s"
end
function request()
  counter = counter + 1
  wrk.headers["X-Factory-Delivery-Id"] = prefix .. tid .. "-" .. counter
  return wrk.format(nil, nil, nil, nil)
end
function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout + summary.errors.status
  local fmt = 'RESULT {"requests": %%d, "errors": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d}\\n'
  io.write(string.format(fmt, summary.requests, errors, summary.duration,
    latency:percentile(50), latency:percentile(99)))
end
"""


# --- servers (run in child processes) ----------------------------------------------------------------


async def seed_webhook(db_url: str, key: str, automations: int) -> str:
    """A token-mode webhook (secret ``TOKEN``) with ``automations`` automations matching ``BODY``; its UID."""
    engine = create_engine(db_url)
    await migrate(engine)
    clock, box = SystemClock(), SecretBox.from_setting(key)
    now = clock.now()
    async with session_factory(engine)() as s, s.begin():
        team = await ensure_team(s)
        info = await secret_store.create(s, box, clock, team.id, "bench-secret", TOKEN)
        factory = Factory(
            uid=ids.new_id(ids.FACTORY), team_id=team.id, name="bench", managed_by="api",
            agents={"foreman": {}}, conditions=[], created_at=now, updated_at=now,
        )  # fmt: skip
        hook = Webhook(
            uid=ids.new_id(ids.WEBHOOK), team_id=team.id, factory_uid=factory.uid, name="bench",
            auth_mode="token", secret_name="bench-secret", secret_version=info.version, enabled=True,
            managed_by="api", created_at=now, updated_at=now,
        )  # fmt: skip
        s.add_all([factory, hook])
        await s.flush()
        for n in range(automations):
            uid = ids.new_id(ids.AUTOMATION)
            s.add(
                Automation(
                    uid=uid, team_id=team.id, factory_uid=factory.uid, name=f"a{n}", enabled=True,
                    agent="foreman", config={}, prompt="Handle the event.", triggers=[],
                    created_at=now, updated_at=now,
                )
            )  # fmt: skip
            await s.flush()
            s.add(
                AutomationWebhook(
                    automation_uid=uid,
                    trigger_index=0,
                    webhook_uid=hook.uid,
                    payload_filter={"action": "opened"},
                )
            )
    await engine.dispose()
    return hook.uid


async def _serve(kind: str, port: int, db_url: str, key: str, data_dir: str) -> None:
    if kind == "bare":

        async def handler(request: web.Request) -> web.Response:
            await request.read()
            return web.json_response({"delivery_id": "x"}, status=202)

        app = web.Application()
        app.router.add_post("/webhooks/w/{uid}", handler)
        engine = None
    else:
        engine = create_engine(db_url)
        settings = ServerSettings(
            data_dir=Path(data_dir), port=port, delivery_rate_limit=10**9, auth_failure_limit=10**9
        )
        app = create_app(
            settings, engine, SecretBox.from_setting(key), route_modules=("api.ops", "api.ingress.routes")
        )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


# --- load generation ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("server process exited during start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


def _run_wrk(url: str, duration: float, connections: int, prefix: str) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(WRK_SCRIPT % {"prefix": prefix, "body": BODY.decode(), "token": TOKEN})
        script = fh.name
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "-s", script, url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script)
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    raw = json.loads(line[len("RESULT ") :])
    ok = raw["requests"] - raw["errors"]
    return {
        "accepted_per_s": ok / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "errors": raw["errors"],
    }


async def _run_aiohttp(url: str, duration: float, connections: int, prefix: str) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + duration
    counter = iter(range(10**9))

    async def worker(http: ClientSession) -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            headers = {
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "X-Factory-Delivery-Id": f"{prefix}{next(counter)}",
            }
            start = time.perf_counter()
            async with http.post(url, data=BODY, headers=headers) as resp:
                await resp.read()
                if resp.status == 202:
                    latencies.append(time.perf_counter() - start)
                else:
                    errors += 1

    began = time.perf_counter()
    async with ClientSession(timeout=ClientTimeout(total=30)) as http:
        await asyncio.gather(*(worker(http) for _ in range(connections)))
    elapsed = time.perf_counter() - began
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "accepted_per_s": len(latencies) / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
        "errors": errors,
    }


def _profile(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """``py-spy record`` of the server ``pid`` (all threads, idle frames dropped) for the measured run."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    cmd = [spy, "record", "--pid", str(pid), "--format", "raw", "--output", args.profile]
    cmd += ["--duration", str(max(1, round(args.duration))), "--rate", "250", "--nonblocking"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _drive(url: str, args: argparse.Namespace, prefix: str) -> dict[str, float]:
    if args.runner == "wrk" or (args.runner == "auto" and shutil.which("wrk")):
        return _run_wrk(url, args.duration, args.connections, prefix)
    return asyncio.run(_run_aiohttp(url, args.duration, args.connections, prefix))


# --- filter matching -----------------------------------------------------------------------------------


def _filter(n: int) -> dict[str, Any]:
    shapes: list[dict[str, Any]] = [
        {"action": ["opened", "reopened"], "repository": {"name": f"repo-{n}"}},
        {"action": {"not_in": ["closed"]}, "sender": {"login": f"user-{n}"}},
        {"labels": {"exists": True}, "repository": {"name": {"in": [f"repo-{n}", f"mirror-{n}"]}}},
        {"action": "opened", "text": {"exists": True}, "priority": {"not_in": [n]}},
    ]
    return shapes[n % len(shapes)]


async def _filters_bench(tmp: Path, key: str) -> dict[str, float]:
    db_url = f"sqlite+aiosqlite:///{tmp / 'filters.db'}"
    hook_uid = await seed_webhook(db_url, key, 0)
    engine = create_engine(db_url)
    sessions = session_factory(engine)
    now = dt.datetime.now(dt.UTC)
    async with sessions() as s, s.begin():
        stmt = select(Webhook.factory_uid, Webhook.team_id).where(Webhook.uid == hook_uid)
        factory_uid, team_id = (await s.execute(stmt)).one()
        for n in range(2000):
            uid = f"au_bench{n:05d}"
            s.add(
                Automation(
                    uid=uid, team_id=team_id, factory_uid=factory_uid, name=f"f{n}", enabled=True,
                    agent="foreman", config={}, prompt="p", triggers=[], created_at=now, updated_at=now,
                )
            )  # fmt: skip
            await s.flush()
            s.add(
                AutomationWebhook(
                    automation_uid=uid, trigger_index=0, webhook_uid=hook_uid, payload_filter=_filter(n)
                )
            )
    payload = json.loads(BODY)
    cache = FilterCache()
    compiled = [payload_filter.compile(_filter(n)) for n in range(2000)]
    rounds = 200
    start = time.perf_counter()
    for _ in range(rounds):
        hits = sum(1 for f in compiled if f.matches(payload))
    pure = (time.perf_counter() - start) / rounds
    webhook = WebhookRow(hook_uid, team_id, factory_uid, "bench", "token", None, None, None, None, None)
    async with sessions() as s:
        await matching_automations(s, webhook, payload, cache)  # warm the compiled-filter cache
        start = time.perf_counter()
        for _ in range(20):
            matched = await matching_automations(s, webhook, payload, cache)
        routed = (time.perf_counter() - start) / 20
    await engine.dispose()
    assert len(matched) == hits
    return {"pure_match_ms": pure * 1000, "routing_step_ms": routed * 1000, "matches": hits}


# --- main ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--automations", type=int, default=1, help="matching automations (runs per delivery)")
    parser.add_argument("--runner", choices=("auto", "wrk", "aiohttp"), default="auto")
    parser.add_argument("--database", help="store URL for the real app (an empty database; default SQLite)")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="py-spy record the real server during the measured run (collapsed stacks)",
    )
    parser.add_argument("--serve", choices=("real", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.port, args.db, args.key, args.data_dir))
        return

    tmp = Path(tempfile.mkdtemp(prefix="factory-bench-"))
    key = Fernet.generate_key().decode()
    db_url = args.database or f"sqlite+aiosqlite:///{tmp / 'factory.db'}"
    hook_uid = asyncio.run(seed_webhook(db_url, key, args.automations))
    results: dict[str, dict[str, float]] = {}
    try:
        for kind in ("bare", "real"):
            port = _free_port()
            cmd = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--db", db_url]
            cmd += [f"--key={key}", f"--data-dir={tmp}"]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            try:
                _wait_port(port, proc)
                url = f"http://127.0.0.1:{port}/webhooks/w/{hook_uid}"
                _drive(url, argparse.Namespace(**{**vars(args), "duration": 1.0}), f"warm-{kind}-")
                spy = _profile(proc.pid, args) if kind == "real" and args.profile else None
                results[kind] = _drive(url, args, f"{kind}-")
                if spy is not None:
                    spy.wait(30)
            finally:
                proc.terminate()
                proc.wait(10)
        filters = asyncio.run(_filters_bench(tmp, key))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    runner = "wrk" if args.runner == "wrk" or (args.runner == "auto" and shutil.which("wrk")) else "aiohttp"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    python = platform.python_version()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {python}, load average {load}")
    print(f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}")
    print(
        f"load: {runner}, {args.connections} connections, {args.duration:g}s, {len(BODY)}-byte JSON, "
        f"{args.automations} matching automation(s) per delivery, store {db_url.split(':')[0]}"
    )
    for kind, label in (("bare", "bare aiohttp 202"), ("real", "factoryctl ingress")):
        r = results[kind]
        print(
            f"{label:20s} {r['accepted_per_s']:9.0f} accepted/s   p50 {r['p50_ms']:7.2f} ms   "
            f"p99 {r['p99_ms']:7.2f} ms   errors {int(r['errors'])}"
        )
    ratio = results["real"]["accepted_per_s"] / results["bare"]["accepted_per_s"]
    print(f"ratio (ingress / bare): {ratio:.2f}")
    print(
        f"filters: 2000 compiled filters on one webhook, {int(filters['matches'])} match: "
        f"pure match {filters['pure_match_ms']:.3f} ms/delivery, "
        f"routing step incl. SELECT {filters['routing_step_ms']:.2f} ms/delivery"
    )


if __name__ == "__main__":
    main()
