"""Console pages at scale: the server time of every /console/ page with 1,000,000 runs and 10,000 deliveries.

    .venv/bin/python bench/console.py [--runs 1000000] [--deliveries 10000] [--requests 40]
        [--database-url URL] [--cache-dir DIR] [--fresh] [--only TEXT] [--keep]

Seeds one team: 30 API keys, 21 secrets, five factories (webhooks, automations with payload filters,
environments, schedules, notification endpoints, 30 apply records each; written with the test suite's
builders, ``tests/builders.py``), ``--runs`` runs spread over states, sources, factories, config names and
creators (some values common, some rare, some absent, so each runs-list filter has a slow case for a keyset
scan), and ``--deliveries`` delivery log entries on one webhook, each Accepted one with its payload and the
runs it started (one, or two for every fifth). Runs, deliveries and run attachments are written at the
driver level (``executemany`` on SQLite, ``COPY`` on PostgreSQL). Two runs, shown by the run page, get a
state history and 300 log lines, or as many as a run keeps (10,000), through the store's functions; the
other runs have no event log.

The SQLite database is kept between runs: ``<cache dir>/console-<schema head>-s<seed version>-<runs>-
<deliveries>.db`` (cache dir: ``$XDG_CACHE_HOME/factoryctl-bench``, else ``~/.cache/factoryctl-bench``), so
only the first run seeds; ``--fresh`` seeds again, and a new migration or seed version makes a new file
(delete old ones by hand). It is not ANALYZEd: a deployed SQLite database never is, so the planner works
without statistics as it does in production. ``--database-url`` also measures PostgreSQL on a scratch
database made beside the one named, seeded, ANALYZEd (as autovacuum would) and dropped afterwards
(``--keep`` leaves it, for EXPLAIN).

Then the real app (``create_app`` with every route module, as ``factoryctl serve`` builds it) serves the
store on a loopback port in this process, a console session is opened for an admin key (the store's
``open_session``, what the sign-in form does) and every page is requested ``--requests`` times, in
interleaved rounds after two warm-up rounds; a page already slower than ``--page-seconds`` in all stops
early. Per page: the server time (an outermost middleware, from the request's arrival at the app to its
response being ready), the round trip seen by the client, the number of SQL statements the request executed
(a ``before_cursor_execute`` listener on the app's engine) and the body size. Baseline, in the same run: a
bare aiohttp handler on another port answering the runs page's HTML as a constant. The budget is p99 server
time < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/builders.py

import builders
from aiohttp import ClientSession, CookieJar, web
from alembic.config import Config
from alembic.script import ScriptDirectory
from multidict import MultiDict
from sqlalchemy import event, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from yarl import URL

from api.app import ROUTE_MODULES, create_app
from api.console.sessions import COOKIE, SessionSettings, open_session
from api.context import ServerSettings
from api.http.pagination import Cursor, encode_cursor, fingerprint, timestamp_key
from api.runs import events
from api.runs import records as runs
from api.runs.new_run import Creator, NewAttachment, NewRun
from api.runs.requests import parse_list_query
from api.runs.states import RunEvent
from bench.claims import scratch_database
from bench.events import pcts
from bench.pickup import free_port
from store import ids
from store.apikeys import Principal
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import MIGRATIONS, create_engine, migrate, session_factory
from store.models import ApiKey, ApplyRecord, Automation, Factory, Run, Webhook

SEED_VERSION = 3  # bump when the seeded rows change: cached databases of other versions are not reused
BUDGET_MS = 100.0
CLOCK = SystemClock()
START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
STEP = dt.timedelta(seconds=30)  # one run every 30 s: 1,000,000 runs span about 347 days
CHUNK = 20_000
WEBHOOK_TOKEN = "bench-console-token-0123456789"
SHOW_TITLE = "bench: the run page's run"  # one with 300 log lines, one with as many as a run keeps
SHOW_LINES = (300, events.MAX_EVENTS_PER_RUN)
SECRET_KEY = "1he_tsjtZlomZanegoFtXbX48HHZQHs6fXAAqQAs4A4="  # fixed: the cached database keeps secrets

# (value, weight): common values, rare ones (about 1 run in 1,000 or fewer), and filter values no run has.
STATES = [
    ("SUCCEEDED", 70),
    ("FAILED", 15),
    ("CANCELLED", 8),
    ("ERROR", 5.9),
    ("INPROGRESS", 1),
    ("BLOCKED", 0.1),
]
# CUSTOM_WEBHOOK runs belong to a factory's webhook and carry a delivery ID whose log entry retention pruned
SOURCES = [("API", 40), ("CLI", 25), ("CUSTOM_WEBHOOK", 30), ("FACTORY", 4.95), ("SCHEDULED_AGENT", 0.05)]
FACTORIES = [(None, 55), ("shop", 25), ("billing", 15), ("search", 4.9), ("ops", 0.1)]  # "archive": no runs
CONFIGS = [("default", 60), ("nightly", 25), (None, 14.9), ("rare-config", 0.1)]
CREATORS = [(f"key_bench_{n:02d}", 0.5**n) for n in range(20)]  # key_bench_15: about 1 run in 30,000
WORDS = ("fix", "triage", "review", "deploy", "upgrade", "document", "profile", "refactor")
THINGS = ("the checkout", "issue", "the parser", "billing export", "search index", "nightly build")
RUN_COLUMNS = (
    "run_id", "team_id", "title", "prompt", "state", "created_at", "updated_at", "queued_at",
    "finished_at", "agent_config", "config_name", "model_id", "source", "creator_type", "creator_uid",
    "creator_display_name", "metadata", "factory_uid", "automation_id", "webhook_uid", "delivery_id",
    "worker_host", "attempt", "cancel_requested",
)  # fmt: skip
DELIVERY_COLUMNS = (
    "team_id",
    "webhook_uid",
    "delivery_id",
    "status",
    "size",
    "received_at",
    "payload",
    "detail",
)
ATTACHMENT_COLUMNS = ("run_id", "file_name", "mime_type", "data")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "ERROR"}


# --- seeding -----------------------------------------------------------------------------------------


def schema_head() -> str:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return str(ScriptDirectory.from_config(cfg).get_current_head())


async def seed_definitions(engine: AsyncEngine, box: SecretBox) -> dict[str, str]:
    """Team, keys, secrets and five factories with their definitions; names → UIDs of what runs refer to."""
    uids: dict[str, str] = {}
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        uids["team"] = team.id
        for n in range(30):
            role = ("admin", "member", "worker")[n % 3]
            hosts = [f"host-{n}"] if role == "worker" else None
            await builders.api_key(s, CLOCK, team.id, role, name=f"bench {role} {n:02d}", worker_hosts=hosts)
        for n in range(20):
            await builders.secret(s, box, CLOCK, team.id, f"SECRET_{n:02d}")
        await builders.secret(s, box, CLOCK, team.id, "HOOK_TOKEN", WEBHOOK_TOKEN)
        for name in ("shop", "billing", "search", "ops", "archive"):
            f = await builders.factory(
                s, CLOCK, team.id, name, managed_by="definitions", applied_revision="0" * 40,
                description=f"The {name} factory", source="https://git.example.com/factories.git",
                conditions=[{"type": "Ready", "status": "True", "reason": "Applied", "message": ""}],
            )  # fmt: skip
            uids[name] = f.uid
            hooks = [
                await builders.webhook(
                    s,
                    CLOCK,
                    team.id,
                    f.uid,
                    hook,
                    managed_by="definitions",
                    secret_name="HOOK_TOKEN",
                    secret_version=1,
                )
                for hook in ("github", "alerts", "deploys")
            ]
            for n, action in enumerate(("opened", "closed", "labeled", "edited")):
                flt = {"action": action, "repository.name": {"in": ["shop", "billing", f"repo-{n}"]}}
                auto = await builders.automation(
                    s, CLOCK, team.id, f.uid, f"on-{action}", [builders.webhook_trigger([hooks[0].uid], flt)],
                    definition_path=f"automations/on-{action}/automation.md", config={"name": "default"},
                )  # fmt: skip
                uids.setdefault(f"{name}/automation/{n}", auto.uid)
            uids[f"{name}/webhook"] = hooks[0].uid
            await builders.environment(s, CLOCK, team.id, f"{name}-py", {"repos": []}, factory_uid=f.uid)
            for n, cron in enumerate(("0 3 * * *", "*/15 * * * *")):
                await builders.schedule(
                    s, CLOCK, team.id, f"{name}-sched-{n}", cron, factory_uid=f.uid, automation="on-opened",
                    managed_by="definitions",
                )  # fmt: skip
            await builders.notification(s, CLOCK, team.id, f.uid, f"{name}-ops")
            for n in range(30):
                s.add(
                    ApplyRecord(
                        team_id=team.id, factory_uid=f.uid, factory_name=name, revision=f"{n:040x}",
                        outcome="succeeded" if n % 7 else "failed", started_at=START + dt.timedelta(days=n),
                        duration_ms=1200 + n, summary={"created": n % 3, "updated": 1},
                        errors=[] if n % 7 else [{"file": "webhooks/github.yaml", "line": 3, "message": "x"}],
                    )
                )  # fmt: skip
    return uids


def pick(rng: random.Random, table: Sequence[tuple[Any, float]], k: int) -> list[Any]:
    return rng.choices([v for v, _ in table], [w for _, w in table], k=k)


def _when(value: dt.datetime, sqlite: bool) -> Any:
    """A UTC time as the store writes it: naive ISO text on SQLite (SQLAlchemy's format), else aware."""
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds") if sqlite else value


async def write_rows(
    engine: AsyncEngine, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
) -> None:
    """One bulk write at the driver level: ``executemany`` on SQLite, ``COPY`` on PostgreSQL."""
    if not rows:
        return
    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            raw = await conn.get_raw_connection()
            await raw.driver_connection.copy_records_to_table(table, records=rows, columns=list(columns))  # type: ignore[union-attr]
        else:
            marks = ", ".join("?" * len(columns))
            await conn.exec_driver_sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


async def seed_bulk(engine: AsyncEngine, uids: dict[str, str], count: int, deliveries: int) -> None:
    """``count`` runs; ``deliveries`` log entries on shop's github webhook, with their runs; attachments."""
    sqlite, rng = engine.dialect.name == "sqlite", random.Random(20261125)
    team, hook = uids["team"], uids["shop/webhook"]
    autos = (uids["shop/automation/0"], uids["shop/automation/1"])
    spacing = max(2, count // max(deliveries, 1))  # run i % spacing == 0 is a delivery's run
    to_json = json.dumps
    for start in range(0, count, CHUNK):
        n = min(CHUNK, count - start)
        states, sources = pick(rng, STATES, n), pick(rng, SOURCES, n)
        facts, configs, creators = pick(rng, FACTORIES, n), pick(rng, CONFIGS, n), pick(rng, CREATORS, n)
        run_rows, delivery_rows, attachment_rows = [], [], []
        for j in range(n):
            i = start + j
            created = START + STEP * i
            updated = created + dt.timedelta(seconds=rng.randint(1, 3600))
            state, config, creator = states[j], configs[j], creators[j]
            factory = uids[facts[j]] if facts[j] else None
            source, automation, webhook, delivery_id = sources[j], None, None, None
            if source == "CUSTOM_WEBHOOK":
                name = facts[j] or "shop"
                factory, webhook, delivery_id = uids[name], uids[f"{name}/webhook"], f"gone-{i}"
                automation = uids[f"{name}/automation/0"]
            d, slot = divmod(i, spacing)
            if slot in (0, 1) and d < deliveries:
                status = "Rejected" if d % 40 == 3 else "Accepted"
                if slot == 0:
                    body = to_json(
                        {"action": "opened", "number": d, "repository": {"name": "shop"}, "body": "x" * 800}
                    )
                    stored = body.encode() if status == "Accepted" else None
                    detail = "payload is not valid JSON" if stored is None else None
                    delivery_rows.append(
                        (
                            team,
                            hook,
                            f"dlv-{d:07d}",
                            status,
                            len(body),
                            _when(created, sqlite),
                            stored,
                            detail,
                        )
                    )
                if status == "Accepted" and (slot == 0 or d % 5 == 0):  # every fifth starts two runs
                    factory, source, webhook, delivery_id = (
                        uids["shop"],
                        "CUSTOM_WEBHOOK",
                        hook,
                        f"dlv-{d:07d}",
                    )
                    automation = autos[slot]
            title = f"{WORDS[i % 8]} {THINGS[i % 6]}{' (flaky test)' if i % 100 == 7 else ''} #{i}"
            prompt = f"{title}\n\nPlease look at run {i}; details follow. " + "lorem " * 20
            run_id = ids.new_id(ids.RUN, now_ms=int(created.timestamp() * 1000))
            run_rows.append(
                (
                    run_id, team, title, prompt,
                    state, _when(created, sqlite), _when(updated, sqlite), _when(created, sqlite),
                    _when(updated, sqlite) if state in TERMINAL else None,
                    to_json({"name": config, "model_id": "model-a"} if config else {}), config,
                    "model-a" if config else None, source, "service_account", creator,
                    creator.replace("_", " "),
                    "{}", factory, automation, webhook, delivery_id, "", 1, False if not sqlite else 0,
                )
            )  # fmt: skip
            if i % 1000 == 0:
                attachment_rows.append((run_id, "notes.txt", "text/plain", b"attached notes\n" * 20))
        await write_rows(engine, "runs", RUN_COLUMNS, run_rows)
        await write_rows(engine, "deliveries", DELIVERY_COLUMNS, delivery_rows)
        await write_rows(engine, "run_attachments", ATTACHMENT_COLUMNS, attachment_rows)
        if (start // CHUNK) % 10 == 9:
            print(f"  ... {start + n:,} runs", flush=True)


async def seed_show_run(engine: AsyncEngine, uids: dict[str, str], count: int, title: str) -> None:
    """A run for the run page: made and moved through the store's functions, with ``count`` log lines."""
    async with session_factory(engine)() as s, s.begin():
        run = await runs.create_run(s, CLOCK, NewRun(
            team_id=uids["team"], prompt="Show the run page.\n" + "context " * 200,
            title=title, agent_config={"name": "default", "model_id": "model-a"}, source="API",
            creator=Creator("service_account", "key_bench_00", "key bench 00"),
            metadata={"ticket": "T-1"},
            attachments=[NewAttachment("trace.txt", "text/plain", b"trace\n" * 50)],
            factory_uid=uids["shop"], automation_id=uids["shop/automation/0"],
        ))  # fmt: skip
        for step in (RunEvent.CLAIM, RunEvent.START):
            runs.apply_event(run, step, CLOCK.now())
        await s.flush()
        lines = [("stdout" if n % 5 else "stderr", f"step {n}: " + "output " * 12) for n in range(count)]
        await events.record_logs(s, run, lines, CLOCK.now())
        runs.apply_event(run, RunEvent.SUCCEED, CLOCK.now())


async def seed(url: str, box: SecretBox, count: int, deliveries: int) -> float:
    """A migrated, seeded database at ``url``; seconds taken."""
    began = time.perf_counter()
    engine = create_engine(url)
    try:
        await migrate(engine)
        uids = await seed_definitions(engine, box)
        await seed_bulk(engine, uids, count, deliveries)
        for lines in SHOW_LINES:
            await seed_show_run(engine, uids, lines, f"{SHOW_TITLE} ({lines} log lines)")
        if engine.dialect.name == "postgresql":
            async with engine.connect() as conn:
                await (await conn.execution_options(isolation_level="AUTOCOMMIT")).exec_driver_sql("ANALYZE")
    finally:
        await engine.dispose()
    return time.perf_counter() - began


def cache_path(cache_dir: Path, count: int, deliveries: int) -> Path:
    return cache_dir / f"console-{schema_head()}-s{SEED_VERSION}-{count}-{deliveries}.db"


def _remove(*paths: Path) -> None:
    for path in paths:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


async def cached_sqlite(args: argparse.Namespace, box: SecretBox) -> tuple[str, str]:
    """The cached SQLite database's URL (seeded now if missing or ``--fresh``), and how it was obtained."""
    path = cache_path(args.cache_dir, args.runs, args.deliveries)
    if path.exists() and not args.fresh:
        return f"sqlite+aiosqlite:///{path}", f"cached {path}"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")  # renamed once complete: an interrupted seed is never used
    _remove(partial, path)
    took = await seed(f"sqlite+aiosqlite:///{partial}", box, args.runs, args.deliveries)
    partial.rename(path)
    return f"sqlite+aiosqlite:///{path}", f"seeded in {took:.0f} s into {path}"


# --- the pages ---------------------------------------------------------------------------------------


@dataclass
class Page:
    label: str
    path: str
    server: list[float] = field(default_factory=list)  # seconds, per request
    trip: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)
    size: int = 0


def _cursor(at: tuple[dt.datetime, str], query: dict[str, str], order: str) -> str:
    """The runs page's cursor (``cursor`` newest first, ``before`` oldest first) at a row, for ``query``."""
    filters = parse_list_query(MultiDict(query)).filters
    fp = fingerprint({"sort_by": "created_at", **filters.params(), "sort_order": order})
    return encode_cursor(Cursor(value=timestamp_key(at[0]), row_id=at[1]), fp)


async def pages_of(engine: AsyncEngine, count: int, deliveries: int) -> tuple[list[Page], Principal]:
    """Every page to time (paths found in the store) and the admin key to open the session with."""
    async with session_factory(engine)() as s:
        factories = dict((await s.execute(select(Factory.name, Factory.uid))).all())
        shop = factories["shop"]
        hook = await s.scalar(
            select(Webhook.uid).where(Webhook.factory_uid == shop, Webhook.name == "github")
        )
        auto = await s.scalar(
            select(Automation.uid).where(Automation.factory_uid == shop, Automation.name == "on-opened")
        )
        shown = {
            n: await s.scalar(select(Run.run_id).where(Run.title == f"{SHOW_TITLE} ({n} log lines)"))
            for n in SHOW_LINES
        }
        key = (await s.scalars(select(ApiKey).where(ApiKey.name == "bench admin 00"))).one()
        newest_first = select(Run.created_at, Run.run_id).order_by(Run.created_at.desc(), Run.run_id.desc())
        page_1_end = (await s.execute(newest_first.offset(24).limit(1))).one()
        deep = (await s.execute(newest_first.offset(int(count * 0.9)).limit(1))).one()
        state_filter = newest_first.where(Run.state == "INPROGRESS")
        deep_inprogress = (await s.execute(state_filter.offset(int(count * 0.01 * 0.9)).limit(1))).one()
    last = START + STEP * (count - 1)
    minute = "%Y-%m-%dT%H:%M"  # a browser's datetime-local value; the console reads it as UTC
    runs_filters = [
        ("state=SUCCEEDED (70%)", {"state": "SUCCEEDED"}),
        ("state=BLOCKED (0.1%)", {"state": "BLOCKED"}),
        ("state=PENDING (none)", {"state": "PENDING"}),
        ("source=CLI (25%)", {"source": "CLI"}),
        ("source=SCHEDULED_AGENT (0.05%)", {"source": "SCHEDULED_AGENT"}),
        ("name=default (60%)", {"name": "default"}),
        ("name=rare-config (0.1%)", {"name": "rare-config"}),
        ("name=missing (none)", {"name": "missing"}),
        ("factory=shop (42%)", {"factory_uid": shop}),
        ("factory=ops (0.1%)", {"factory_uid": factories["ops"]}),
        ("factory=archive (none)", {"factory_uid": factories["archive"]}),
        ("creator=key_bench_00 (50%)", {"creator": "key_bench_00"}),
        ("creator=key_bench_12 (0.01%)", {"creator": "key_bench_12"}),
        ("creator=nobody (none)", {"creator": "nobody"}),
        ("created_after=last day", {"created_after": (last - dt.timedelta(days=1)).strftime(minute)}),
        ("created_before=10% in", {"created_before": (START + STEP * (count // 10)).strftime(minute)}),
        ("created_after=future (none)", {"created_after": (last + dt.timedelta(days=30)).strftime(minute)}),
        (
            "created in one hour, 50% in",
            {
                "created_after": (START + STEP * (count // 2)).strftime(minute),
                "created_before": (START + STEP * (count // 2) + dt.timedelta(hours=1)).strftime(minute),
            },
        ),
        ("state=FAILED & factory=billing", {"state": "FAILED", "factory_uid": factories["billing"]}),
        ("state=SUCCEEDED & factory=archive", {"state": "SUCCEEDED", "factory_uid": factories["archive"]}),
        ("q=flaky (1%)", {"q": "flaky"}),
        ("q=no-such-text (none)", {"q": "no-such-text"}),
    ]
    base = f"/console/factories/{shop}"
    pages = [
        Page("factories", "/console/factories"),
        Page("factory", base),
        Page(f"webhook (50 of {deliveries:,} deliveries)", f"{base}/webhooks/{hook}"),
        Page("automation", f"{base}/automations/{auto}"),
        Page(
            "automation, Test filter",
            f"{base}/automations/{auto}?" + urlencode({"delivery": f"{hook} dlv-0000000"}),
        ),
        Page("runs", "/console/runs"),
        Page("runs, page 2", "/console/runs?cursor=" + _cursor(page_1_end, {}, "desc")),
        Page("runs, after 90% (cursor)", "/console/runs?cursor=" + _cursor(deep, {}, "desc")),
        Page("runs, back from 90% (before)", "/console/runs?before=" + _cursor(deep, {}, "asc")),
        *(Page(f"runs ?{label}", "/console/runs?" + urlencode(q)) for label, q in runs_filters),
        Page(
            "runs ?state=INPROGRESS, after 90%",
            "/console/runs?"
            + urlencode(
                {"state": "INPROGRESS", "cursor": _cursor(deep_inprogress, {"state": "INPROGRESS"}, "desc")}
            ),
        ),
        *(Page(f"run ({n:,} log lines)", f"/console/runs/{run_id}") for n, run_id in shown.items()),
        Page("secrets", "/console/secrets"),
        Page("keys", "/console/keys"),
    ]
    return pages, Principal(key.id, key.team_id, key.name, key.role, ())


class Meter:
    """Server time and SQL statements of the request in flight (requests are sequential)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.statements, self.last = 0, (0.0, 0)
        event.listen(engine.sync_engine, "before_cursor_execute", self._count)

    def _count(self, *_: object) -> None:
        self.statements += 1

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        began, before = time.perf_counter(), self.statements
        try:
            return await handler(request)
        finally:
            self.last = (time.perf_counter() - began, self.statements - before)


async def request(http: ClientSession, base: str, page: Page, meter: Meter | None) -> None:
    began = time.perf_counter()
    async with http.get(base + page.path, allow_redirects=False) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{page.path}: HTTP {resp.status}: {body[:300]!r}")
    page.trip.append(time.perf_counter() - began)
    page.size = len(body)
    if meter is not None:
        page.server.append(meter.last[0])
        page.statements.append(meter.last[1])


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    port = free_port()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def bench(url: str, label: str, args: argparse.Namespace, data_dir: Path) -> None:
    engine = create_engine(url)
    await migrate(engine)  # a no-op on a seeded database of this schema
    pages, admin = await pages_of(engine, args.runs, args.deliveries)
    pages = [p for p in pages if not args.only or any(o in p.label for o in args.only)]
    async with session_factory(engine)() as s, s.begin():
        token, _ = await open_session(s, CLOCK, admin, SessionSettings())
    meter = Meter(engine)
    app = create_app(
        ServerSettings(data_dir=data_dir),
        engine,
        SecretBox.from_setting(SECRET_KEY),
        route_modules=ROUTE_MODULES,
    )
    app.middlewares.insert(0, meter.middleware)
    runner, base = await serve(app)
    bare_page = Page("bare aiohttp handler, same HTML (baseline)", "/console/runs")
    try:
        async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as http:
            http.cookie_jar.update_cookies({COOKIE: token}, URL(base))
            await request(http, base, Page("", "/console/runs"), None)
            html = (await (await http.get(base + "/console/runs")).read()).decode()

            async def constant(_: web.Request) -> web.Response:
                return web.Response(text=html, content_type="text/html")

            bare = web.Application()
            bare.router.add_get("/console/runs", constant)
            bare_runner, bare_base = await serve(bare)
            try:
                for n in range(args.requests + 2):  # two warm-up rounds
                    await request(http, bare_base, bare_page, None)
                    for page in pages:
                        if len(page.trip) >= 3 and sum(page.trip) > args.page_seconds:
                            continue  # slow enough already: keep the run short
                        await request(http, base, page, meter)
                    if n == 1:  # the warm-up rounds end here
                        for page in (bare_page, *pages):
                            page.server, page.trip, page.statements = [], [], []
            finally:
                await bare_runner.cleanup()
    finally:
        await runner.cleanup()
        await engine.dispose()
    report(label, pages, bare_page)


COLUMNS = "{:<40} {:>3} {:>8} {:>8} {:>9} {:>7} {:>4} {:>5}  {}"


def report(label: str, pages: list[Page], bare: Page) -> None:
    base = pcts(bare.trip)["p50"]
    print(f"\n{label}: server time of each page (ms), interleaved rounds after two warm-up rounds")
    print("  " + COLUMNS.format("page", "n", "p50", "p99", "trip p50", "x bare", "SQL", "KB", "p99/100ms"))
    kb = f"{bare.size / 1024:.0f}"
    print("  " + COLUMNS.format(bare.label, len(bare.trip), "", "", f"{base:.2f}", "1.00", "", kb, ""))
    over = []
    for page in pages:
        server, trip = pcts(page.server), pcts(page.trip)["p50"]
        counts = Counter(page.statements).most_common()
        sql = f"{counts[0][0]}{'+' if len(counts) > 1 else ''}"  # "+": some requests ran more (a touch)
        ratio = server["p99"] / BUDGET_MS
        if ratio >= 1:
            over.append(page.label)
        cells = (f"{server['p50']:.2f}", f"{server['p99']:.2f}", f"{trip:.2f}", f"{trip / base:.2f}")
        verdict = f"{ratio:5.2f}{' OVER' if ratio >= 1 else ''}"
        print(
            "  " + COLUMNS.format(page.label, len(page.trip), *cells, sql, f"{page.size / 1024:.0f}", verdict)
        )
    worst = max(pages, key=lambda p: pcts(p.server)["p99"])
    outcome = "met by every page" if not over else f"missed by {len(over)} of {len(pages)} pages"
    print(
        f"  budget p99 < {BUDGET_MS:.0f} ms server time: {outcome} "
        f"(slowest p99: {worst.label}, {pcts(worst.server)['p99']:.1f} ms)"
    )


async def main() -> None:
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--deliveries", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40, help="measured requests per page")
    parser.add_argument("--page-seconds", type=float, default=15.0, help="stop timing a page after this long")
    parser.add_argument("--database-url", help="a PostgreSQL URL: a scratch database is made beside it")
    parser.add_argument("--cache-dir", type=Path, default=cache_home / "factoryctl-bench")
    parser.add_argument("--fresh", action="store_true", help="seed the SQLite database again")
    parser.add_argument("--only", action="append", help="time only pages whose label contains this")
    parser.add_argument("--sqlite", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL database (for EXPLAIN)")
    args = parser.parse_args()
    print(
        f"console bench: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}; "
        f"{args.runs:,} runs, {args.deliveries:,} deliveries"
    )
    box = SecretBox.from_setting(SECRET_KEY)
    with tempfile.TemporaryDirectory() as tmp:
        if args.sqlite:
            url, how = await cached_sqlite(args, box)
            print(f"SQLite database: {how}", flush=True)
            await bench(url, "SQLite", args, Path(tmp))
        if args.database_url:
            async with scratch_database(args.database_url, "factory_bench_console", keep=args.keep) as pg:
                took = await seed(pg, box, args.runs, args.deliveries)
                print(f"PostgreSQL database {make_url(pg).database}: seeded in {took:.0f} s", flush=True)
                await bench(pg, "PostgreSQL", args, Path(tmp))
                if args.keep:
                    print(f"kept {pg}")


if __name__ == "__main__":
    asyncio.run(main())
