"""Ingress throughput and latency against a bare aiohttp baseline measured in the same run.

    .venv/bin/python bench/ingress.py [--duration 5] [--connections 16] [--automations 1] [--misses 0]
        [--database URL] [--scenario accept|unknown|badauth] [--processes N] [--profile FILE]

Starts two servers, each in its own process on loopback: the real app (SQLite in WAL mode, limits raised
so that nothing is rate limited, a token-mode webhook with ``--automations`` matching automations, so
each accepted delivery also commits that many QUEUED runs; ``--misses`` more automations on it whose
filters do not match, so each delivery also records that many explained misses among its decisions,
docs/ingress.md, "Decisions") and a bare aiohttp app whose handler reads
the body and answers 202. Both are driven by the same closed-loop generator - ``wrk`` when installed
(a Lua script stamps a unique ``X-Factory-Delivery-Id`` on each ~1 KB JSON body), else an aiohttp
client with a bounded number of in-flight requests - and the script prints accepted/s, p50 and p99 for
both and the ratio. Access logs are off in both servers so the comparison is about request handling.

``--scenario`` picks the load: ``accept`` (unique deliveries, the default), ``unknown`` (each request to a
new unknown UID: a 404 flood) or ``badauth`` (a wrong token: 401s until the failed-request budget of 30 per
minute is spent, then 429s). For the floods the rate is answered requests per second, and the script also
prints how many rows the measured run added to the delivery log, the rate counters and the runs (the
database must grow by a bounded number of rows per window, not per request). ``--processes N`` (PostgreSQL)
measures the deployed command instead of the bare app: ``factoryctl serve --processes 1`` and
``--processes N`` (JSON access log included), in the same run, and prints their ratio.

It also times routing one delivery against 2,000 compiled payload filters on one webhook: the pure
in-process match, explaining every miss as a delivery's decisions do, and the full routing step (the
routing-rows SELECT plus matching) on SQLite.
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
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientSession, ClientTimeout, web
from cryptography.fernet import Fernet
from sqlalchemy import select, text

from api.app import create_app
from api.context import ServerSettings
from api.ingress.decisions import decide_in
from api.ingress.lookup import FilterCache, WebhookRow
from store import ids
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.models import Automation, AutomationWebhook, Factory, Webhook
from store.rules import payload_filter
from store.teams import ensure_team

TOKEN = "bench-token-0123456789"
WRONG_TOKEN = "wrong-token-0123456789"
SCENARIOS = ("accept", "unknown", "badauth")
AUTH_BUDGET = 30  # --auth-failure-limit's default: failed requests per webhook per minute
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
  if %(unknown)s then
    return wrk.format(nil, "/webhooks/w/wh_flood" .. prefix .. tid .. "x" .. counter, nil, nil)
  end
  return wrk.format(nil, nil, nil, nil)
end

function done(summary, latency, requests)
  local io_errors = summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout
  local fmt = 'RESULT {"requests": %%d, "status_errors": %%d, "io_errors": %%d, "duration_us": %%d, '
      .. '"p50_us": %%d, "p99_us": %%d}\\n'
  io.write(string.format(fmt, summary.requests, summary.errors.status, io_errors, summary.duration,
    latency:percentile(50), latency:percentile(99)))
end
"""


# --- servers (run in child processes) ----------------------------------------------------------------


async def seed_webhook(db_url: str, key: str, automations: int, misses: int = 0) -> str:
    """A token-mode webhook (secret ``TOKEN``) with ``automations`` automations matching ``BODY`` and
    ``misses`` automations whose filters do not match it (each fails at a different depth); its UID."""
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
        for n in range(automations + misses):
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
                    payload_filter={"action": "opened"} if n < automations else _miss(n),
                )
            )
    await engine.dispose()
    return hook.uid


def _miss(n: int) -> dict[str, Any]:
    """A filter ``BODY`` fails: on its first key, its second, or a nested field."""
    shapes: list[dict[str, Any]] = [
        {"action": "closed"},
        {"action": "opened", "sender": {"exists": True}},
        {"action": ["opened"], "repository": {"name": f"other-{n}"}},
    ]
    return shapes[n % len(shapes)]


async def _serve(kind: str, port: int, db_url: str, key: str, data_dir: str, auth_limit: int) -> None:
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
            data_dir=Path(data_dir), port=port, delivery_rate_limit=10**9, auth_failure_limit=auth_limit
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


def _run_wrk(url: str, args: argparse.Namespace, prefix: str) -> dict[str, float]:
    token = WRONG_TOKEN if args.scenario == "badauth" else TOKEN
    unknown = "true" if args.scenario == "unknown" else "false"
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(WRK_SCRIPT % {"prefix": prefix, "body": BODY.decode(), "token": token, "unknown": unknown})
        script = fh.name
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{args.connections}", f"-d{max(1, round(args.duration))}s", "-s", script, url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script)
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    raw = json.loads(line[len("RESULT ") :])
    answered = raw["requests"] - raw["io_errors"]
    return {
        "answered_per_s": answered / (raw["duration_us"] / 1e6),
        "accepted_per_s": (answered - raw["status_errors"]) / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "io_errors": raw["io_errors"],
        "not_2xx": raw["status_errors"],
    }


async def _run_aiohttp(url: str, args: argparse.Namespace, prefix: str) -> dict[str, float]:
    latencies: list[float] = []
    io_errors = not_2xx = 0
    stop = time.perf_counter() + args.duration
    counter = iter(range(10**9))
    token = WRONG_TOKEN if args.scenario == "badauth" else TOKEN

    async def worker(http: ClientSession) -> None:
        nonlocal io_errors, not_2xx
        while time.perf_counter() < stop:
            n = next(counter)
            headers = {
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "X-Factory-Delivery-Id": f"{prefix}{n}",
            }
            target = url.rsplit("/", 1)[0] + f"/wh_flood{prefix}{n}" if args.scenario == "unknown" else url
            start = time.perf_counter()
            try:
                async with http.post(target, data=BODY, headers=headers) as resp:
                    await resp.read()
                    not_2xx += resp.status >= 300
            except OSError:
                io_errors += 1
                continue
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    async with ClientSession(timeout=ClientTimeout(total=30)) as http:
        await asyncio.gather(*(worker(http) for _ in range(args.connections)))
    elapsed = time.perf_counter() - began
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "answered_per_s": len(latencies) / elapsed,
        "accepted_per_s": (len(latencies) - not_2xx) / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
        "io_errors": io_errors,
        "not_2xx": not_2xx,
    }


def _profile(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """``py-spy record`` of the server ``pid`` (all threads, idle frames dropped) for the measured run."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    cmd = [spy, "record", "--pid", str(pid), "--format", "raw", "--output", args.profile]
    cmd += ["--duration", str(max(1, round(args.duration))), "--rate", "250", "--nonblocking"]
    if args.processes:
        cmd.append("--subprocesses")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _uses_wrk(args: argparse.Namespace) -> bool:
    return args.runner == "wrk" or (args.runner == "auto" and shutil.which("wrk") is not None)


def _drive(url: str, args: argparse.Namespace, prefix: str) -> dict[str, float]:
    if _uses_wrk(args):
        return _run_wrk(url, args, prefix)
    return asyncio.run(_run_aiohttp(url, args, prefix))


async def _row_counts(db_url: str) -> dict[str, int]:
    """Rows of the tables a request can grow (the delivery log, the rate counters, the runs)."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            return {
                table: int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
                for table in ("deliveries", "rate_counters", "runs")
            }
    finally:
        await engine.dispose()


def _probe(url: str, args: argparse.Namespace) -> Counter[int]:
    """The statuses of three requests like the load's, sent after it (what a sender sees by then)."""
    seen: Counter[int] = Counter()
    token = WRONG_TOKEN if args.scenario == "badauth" else TOKEN
    for n in range(3):
        target = url.rsplit("/", 1)[0] + f"/wh_probe{n}" if args.scenario == "unknown" else url
        request = urllib.request.Request(
            target,
            data=BODY,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "X-Factory-Delivery-Id": f"probe-{n}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                seen[resp.status] += 1
        except urllib.error.HTTPError as error:
            seen[error.code] += 1
    return seen


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
    start = time.perf_counter()
    for _ in range(rounds):
        for f in compiled:
            if not f.matches(payload):
                f.explain(payload)
    explained = (time.perf_counter() - start) / rounds
    webhook = WebhookRow(hook_uid, team_id, factory_uid, "bench", "token", None, None, None, None, None)
    async with sessions() as s:  # the routing ingress runs: the matches and the decisions behind them

        def route(sync: Any) -> list[str]:
            return decide_in(sync.connection(), [(webhook, payload)], cache)[0].matched

        await s.run_sync(route)  # warm the compiled-filter cache
        start = time.perf_counter()
        for _ in range(20):
            matched = await s.run_sync(route)
        routed = (time.perf_counter() - start) / 20
    await engine.dispose()
    assert len(matched) == hits
    return {
        "pure_match_ms": pure * 1000,
        "explained_ms": explained * 1000,
        "routing_step_ms": routed * 1000,
        "matches": hits,
    }


# --- main ----------------------------------------------------------------------------------------------


def _server_cmd(
    kind: str, port: int, db_url: str, key: str, tmp: Path, args: argparse.Namespace
) -> list[str]:
    auth_limit = str(AUTH_BUDGET if args.scenario == "badauth" else 10**9)
    if kind.startswith("serve-"):  # the real `factoryctl serve`, as deployed (JSON access log included)
        cli = str(Path(sys.executable).with_name("factoryctl"))
        cmd = [cli, "--database", db_url, "--data-dir", str(tmp / "serve"), "serve", "--port", str(port)]
        cmd += ["--workers", "0", "--processes", kind.removeprefix("serve-")]
        return [*cmd, "--delivery-rate-limit", str(10**9), "--auth-failure-limit", auth_limit]
    cmd = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--db", db_url]
    return [*cmd, f"--key={key}", f"--data-dir={tmp}", f"--auth-limit={auth_limit}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--automations", type=int, default=1, help="matching automations (runs per delivery)")
    parser.add_argument("--misses", type=int, default=0, help="automations whose filter does not match")
    parser.add_argument("--runner", choices=("auto", "wrk", "aiohttp"), default="auto")
    parser.add_argument("--database", help="store URL for the real app (an empty database; default SQLite)")
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="accept",
        help="accept: unique deliveries (default); unknown: a new unknown UID per request (404 flood); "
        f"badauth: a wrong token (401 flood, then 429 past the budget of {AUTH_BUDGET}/min)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="measure `factoryctl serve --processes 1` and `--processes N` (PostgreSQL) instead of the app",
    )
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
    parser.add_argument("--auth-limit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.port, args.db, args.key, args.data_dir, args.auth_limit))
        return
    if args.processes and not (args.database or "").startswith("postgresql"):
        raise SystemExit("--processes needs --database postgresql://... (serve refuses several on SQLite)")

    tmp = Path(tempfile.mkdtemp(prefix="factory-bench-"))
    key = Fernet.generate_key().decode()
    db_url = args.database or f"sqlite+aiosqlite:///{tmp / 'factory.db'}"
    hook_uid = asyncio.run(seed_webhook(db_url, key, args.automations, args.misses))
    kinds = ["bare"] + (["serve-1", f"serve-{args.processes}"] if args.processes else ["real"])
    results: dict[str, dict[str, float]] = {}
    growth: dict[str, dict[str, int]] = {}
    probes: dict[str, Counter[int]] = {}
    filters: dict[str, float] | None = None
    try:
        for kind in kinds:
            port = _free_port()
            env = {**os.environ, "FACTORY_SECRET_KEY": key}
            cmd = _server_cmd(kind, port, db_url, key, tmp, args)
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            try:
                _wait_port(port, proc)
                url = f"http://127.0.0.1:{port}/webhooks/w/{hook_uid}"
                warm = 3.0 if kind.startswith("serve-") else 1.0  # let secondaries start and warm up
                _drive(url, argparse.Namespace(**{**vars(args), "duration": warm}), f"warm-{kind}-")
                before = asyncio.run(_row_counts(db_url)) if kind != "bare" else {}
                spy = _profile(proc.pid, args) if kind != "bare" and args.profile else None
                results[kind] = _drive(url, args, f"{kind}-")
                if spy is not None:
                    spy.wait(30)
                if kind != "bare":
                    after = asyncio.run(_row_counts(db_url))
                    growth[kind] = {table: after[table] - before[table] for table in after}
                probes[kind] = _probe(url, args)
            finally:
                proc.terminate()
                proc.wait(30)
        if args.scenario == "accept" and not args.processes:
            filters = asyncio.run(_filters_bench(tmp, key))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    _report(args, db_url, results, growth, probes, filters)


def _report(
    args: argparse.Namespace,
    db_url: str,
    results: dict[str, dict[str, float]],
    growth: dict[str, dict[str, int]],
    probes: dict[str, Counter[int]],
    filters: dict[str, float] | None,
) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    python = platform.python_version()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {python}, load average {load}")
    print(f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}")
    print(
        f"load: {'wrk' if _uses_wrk(args) else 'aiohttp'}, {args.connections} connections, "
        f"{args.duration:g}s, {len(BODY)}-byte JSON, scenario {args.scenario}, "
        f"{args.automations} matching automation(s) and {args.misses} not matching per delivery, "
        f"store {db_url.split(':')[0]}"
    )
    measure = "accepted_per_s" if args.scenario == "accept" else "answered_per_s"
    unit = "accepted/s" if args.scenario == "accept" else "answered/s"
    bare = results["bare"][measure]
    for kind, r in results.items():
        label = "bare aiohttp 202" if kind == "bare" else ("factoryctl app" if kind == "real" else kind)
        rows = "   ".join(f"+{n} {table}" for table, n in growth.get(kind, {}).items())
        statuses = ", ".join(f"{code}x{n}" for code, n in sorted(probes.get(kind, Counter()).items()))
        print(
            f"{label:18s} {r[measure]:9.0f} {unit}   p50 {r['p50_ms']:7.2f} ms   p99 {r['p99_ms']:7.2f} ms"
            f"   not-2xx {int(r['not_2xx'])}   io errors {int(r['io_errors'])}   {rows}   probes: {statuses}"
        )
    for kind, r in results.items():
        if kind != "bare":
            print(f"ratio ({kind} / bare): {r[measure] / bare:.2f}")
    if args.processes:
        one, many = results["serve-1"][measure], results[f"serve-{args.processes}"][measure]
        print(f"ratio (serve-{args.processes} / serve-1): {many / one:.2f}")
    if filters is not None:
        print(
            f"filters: 2000 compiled filters on one webhook, {int(filters['matches'])} match: "
            f"pure match {filters['pure_match_ms']:.3f} ms/delivery, "
            f"with every miss explained {filters['explained_ms']:.3f} ms/delivery, "
            f"routing step incl. SELECT {filters['routing_step_ms']:.2f} ms/delivery"
        )


if __name__ == "__main__":
    main()
