"""The composition root of ``factoryctl serve``: the one place where store, reconciler and API meet."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import pickle
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, Lifecycle, create_app
from api.claims.reaper import lease_reaper
from api.context import RECONCILE, ReconcilerHealth, ReconcileTrigger, ServerSettings
from api.ingress.retention import retention_job
from api.management.validate import VALIDATOR
from api.notifications.policy import NotificationSettings
from api.notifications.service import NOTIFICATION_SETTINGS, notification_sender
from api.ops import JsonAccessLogger
from api.redaction import install_log_redaction
from api.schedules.scheduler import schedule_scheduler
from factoryctl.context import CliContext
from factoryctl.serve.group import (
    Message,
    PrimaryLink,
    StartFailed,
    Supervisor,
    parse_processes,
    tag_log_lines,
)
from factoryctl.serve.local_workers import service_workers
from factoryctl.serve.reconcile import make_source, reconciler_lifecycle
from factoryctl.serve.validation import make_validator
from factoryctl.worker.execution import scrubbed_environment
from store import apikeys
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.teams import ensure_team

log = logging.getLogger("factoryctl.serve")
ADMIN_KEY_FILE = "admin.key"
# After SIGTERM/SIGINT the listening socket closes at once and requests already being handled get at most
# this long to finish (docs/operations.md, "Faults and recovery"). Ordinary requests take milliseconds;
# what would otherwise hold the exit is a worker's claim long poll (up to 30 s), which is cut and retried.
# aiohttp waits its shutdown timeout twice (for the handler, then for it after cancelling its body).
DRAIN_SECONDS = 10.0


def parse_duration(value: str) -> float:
    """``30``, ``30s``, ``1m``, ``500ms`` -> seconds."""
    text = value.strip().lower()
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


@dataclass
class ServeOptions:
    settings: ServerSettings
    team: str = "default"
    repo: Path | None = None
    git_url: str | None = None
    branch: str = "main"
    poll_interval: float = 30.0
    workers: int = 2
    processes: int = 1  # --processes: 1 primary + (processes - 1) secondaries (docs/operations.md)
    harness: str = "echo"
    harness_command: str | None = None
    db_connect_attempts: int = 8
    env: dict[str, str] = field(default_factory=dict)  # the CLI's environment (agents get it scrubbed)
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_args(cls, ctx: CliContext, args: argparse.Namespace) -> ServeOptions:
        env = ctx.env

        def pick(flag: Any, name: str, default: Any, cast: Any = str) -> Any:
            if flag is not None:
                return flag
            raw = env.get(f"FACTORY_{name}")
            return cast(raw) if raw not in (None, "") else default

        settings = ServerSettings(
            data_dir=ctx.data_dir,
            host=pick(args.host, "HOST", "127.0.0.1"),
            port=pick(args.port, "PORT", 8080, int),
            public_url=pick(args.public_url, "PUBLIC_URL", None),
            delivery_rate_limit=pick(args.delivery_rate_limit, "DELIVERY_RATE_LIMIT", 60, int),
            auth_failure_limit=pick(args.auth_failure_limit, "AUTH_FAILURE_LIMIT", 30, int),
            max_body_bytes=pick(args.max_body_bytes, "MAX_BODY_BYTES", 262_144, int),
            delivery_retention_days=pick(args.delivery_retention_days, "DELIVERY_RETENTION_DAYS", 7, int),
            delivery_retention_count=pick(args.delivery_retention_count, "DELIVERY_RETENTION_COUNT", 50, int),
            skills_source=pick(args.skills_source, "SKILLS_SOURCE", None),
        )
        for name in (
            "delivery_rate_limit",
            "auth_failure_limit",
            "max_body_bytes",
            "delivery_retention_count",
        ):
            if getattr(settings, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        workers = pick(args.workers, "WORKERS", 2, int)
        if workers < 0:
            raise ValueError("--workers must be 0 or more")
        timeout = pick(args.notification_timeout, "NOTIFICATION_TIMEOUT", 15.0, float)
        if not 0.5 <= timeout <= 60:
            raise ValueError("--notification-timeout must be between 0.5 and 60 seconds")
        harness = pick(args.harness, "HARNESS", "echo")
        command = pick(args.harness_command, "COMMAND", None)
        if harness == "command" and not command:
            raise ValueError("--harness command needs --command CMD")
        processes = parse_processes(str(pick(args.processes, "PROCESSES", "1")))
        if processes > 1 and ctx.database_url.strip().lower().startswith("sqlite"):
            raise ValueError(
                f"--processes {processes} needs PostgreSQL (--database postgresql://...): a SQLite store "
                "has one writer, and ingress commits its deliveries in batches within one process; "
                "serve a SQLite store with --processes 1"
            )
        if processes > 1 and settings.port == 0:
            raise ValueError(f"--processes {processes} needs a fixed --port (each process listens on it)")
        return cls(
            settings=settings,
            team=args.team,
            repo=Path(args.repo).resolve() if args.repo else None,
            git_url=args.git,
            branch=args.branch,
            poll_interval=parse_duration(args.poll_interval),
            workers=workers,
            processes=processes,
            harness=harness,
            harness_command=command,
            env=dict(env),
            db_connect_attempts=max(1, int(env.get("FACTORY_DB_CONNECT_ATTEMPTS") or 8)),
            notifications=NotificationSettings(
                timeout_seconds=timeout, connect_timeout_seconds=min(timeout, 5.0)
            ),
        )


async def connect_with_retry(url: str, *, attempts: int = 8, first_delay: float = 0.5) -> AsyncEngine:
    """Create the engine and migrate, retrying with capped backoff while the database is down."""
    delay = first_delay
    for attempt in range(1, attempts + 1):
        engine = create_engine(url)
        try:
            await migrate(engine)
            return engine
        except (OSError, ConnectionError) as exc:
            await engine.dispose()
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            await engine.dispose()
            if "connect" not in str(exc).lower() and "unable to open" not in str(exc).lower():
                raise
            reason = str(exc).splitlines()[0]
        if attempt == attempts:
            raise ConnectionError(f"database unavailable after {attempts} attempts: {reason}")
        log.warning("database unavailable (%s); retrying in %.1fs", reason, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)
    raise AssertionError("unreachable")


async def bootstrap_admin_key(engine: AsyncEngine, data_dir: Path, team_name: str) -> Path | None:
    """On a store with no keys, create an admin key and write it to a 0600 file; return its path."""
    async with session_factory(engine)() as s, s.begin():
        team = await ensure_team(s, team_name)
        if await apikeys.count_keys(s):
            return None
        _row, plaintext = await apikeys.create_key(s, SystemClock(), team.id, "bootstrap admin", "admin")
    data_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, at start-up
    path = data_dir / ADMIN_KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(plaintext + "\n")
    return path


def lifecycles_for(options: ServeOptions, engine: AsyncEngine, box: SecretBox) -> list[Lifecycle]:
    """Background work that starts and stops with the app."""
    del engine, box
    out: list[Lifecycle] = []
    made = make_source(
        repo=options.repo,
        git_url=options.git_url,
        branch=options.branch,
        poll_interval=options.poll_interval,
        data_dir=options.settings.data_dir,
    )
    if made is not None:
        source, label = made
        out.append(reconciler_lifecycle(source, label, options.team))
    # The lease reaper runs even with --workers 0: self-hosted workers hold leases too.
    out.append(lease_reaper())
    # Every replica runs the scheduler; a schedule's fire row decides which one starts a run
    # (docs/schedules.md, "How schedules fire").
    out.append(schedule_scheduler())
    # Every replica runs a notification sender; claims (SKIP LOCKED) decide who sends what
    # (docs/notifications.md, "At least once").
    out.append(notification_sender())
    # Service-hosted workers; agents never inherit the server's credentials.
    out.append(
        service_workers(
            options.workers,
            options.harness,
            options.harness_command,
            options.settings.data_dir / "workspaces",
            harness_env=scrubbed_environment(options.env),
        )
    )
    out.append(retention_job())  # delivery-log retention and rate-counter pruning
    return out


def _configure_logging(index: int | None) -> None:
    """JSON lines on stderr; ``index`` (several processes) tags each line with the process that wrote it."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    if index is not None:
        tag_log_lines(index)
    install_log_redaction()  # no credential in any log line, aiohttp's parser errors included


def _runner(app: web.Application) -> web.AppRunner:
    return web.AppRunner(
        app, access_log_class=JsonAccessLogger, handle_signals=False, shutdown_timeout=DRAIN_SECONDS / 2
    )


def _listen_error(settings: ServerSettings, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"port {settings.port} on {settings.host} is already in use"
    return f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}"


async def _listen(runner: web.AppRunner, settings: ServerSettings, *, shared: bool) -> str | None:
    """Listen on host:port (``shared``: with SO_REUSEPORT, next to the other processes of the group);
    an error message when it cannot."""
    site = web.TCPSite(
        runner, settings.host, settings.port, reuse_address=True, reuse_port=True if shared else None
    )
    try:
        await site.start()
    except OSError as exc:
        return _listen_error(settings, exc)
    return None


async def _port_taken(settings: ServerSettings) -> str | None:
    """Whether something listens on host:port already. A bind with SO_REUSEPORT would succeed next to
    another server of the same user and silently share its port; this probe binds without it."""
    loop = asyncio.get_running_loop()
    try:
        probe = await loop.create_server(
            asyncio.Protocol, settings.host, settings.port, reuse_address=True, start_serving=False
        )
    except OSError as exc:
        return _listen_error(settings, exc)
    probe.close()
    await probe.wait_closed()
    return None


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def run_server(ctx: CliContext, options: ServeOptions) -> int:
    """The primary (and, with ``--processes 1``, only) process: migrate, bootstrap the admin key, run the
    background jobs, serve HTTP and, with ``--processes N``, supervise N-1 secondaries."""
    several = options.processes > 1
    _configure_logging(0 if several else None)
    settings = options.settings
    try:
        box = ctx.secret_box()
        engine = await connect_with_retry(ctx.database_url, attempts=options.db_connect_attempts)
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    key_file = await bootstrap_admin_key(engine, settings.data_dir, options.team)
    if key_file is not None:
        print(f"created an admin API key: {key_file} (mode 0600)", file=sys.stderr, flush=True)
    app = create_app(
        settings, engine, box, lifecycles=lifecycles_for(options, engine, box), route_modules=ROUTE_MODULES
    )
    app[NOTIFICATION_SETTINGS] = options.notifications
    app[VALIDATOR] = make_validator(box)  # POST /factory-files/validate (api/ must not import the reconciler)
    runner = _runner(app)
    await runner.setup()
    problem = await _port_taken(settings) if several else None
    problem = problem or await _listen(runner, settings, shared=several)
    if problem is not None:
        await runner.cleanup()
        await engine.dispose()
        print(f"error: {problem}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    _stop_on_signals(stop)
    group: Supervisor | None = None
    sharing: asyncio.Task[None] | None = None
    code = 0
    try:
        if several:
            group = _secondaries(ctx, options, app[RECONCILE])
            code = await _start(group, stop)
            sharing = asyncio.create_task(_share_reconciler_state(app[RECONCILE], group))
        if code == 0 and not stop.is_set():
            count = f" ({options.processes} processes)" if several else ""
            print(f"factoryctl serving on {settings.base_url}{count}", file=sys.stderr, flush=True)
        if code == 0:
            await stop.wait()
    finally:
        print("factoryctl shutting down", file=sys.stderr, flush=True)
        if sharing is not None:
            sharing.cancel()
            await asyncio.wait({sharing})
        # Graceful: stop listening, close idle keep-alive connections, wait for in-flight handlers (at
        # most DRAIN_SECONDS), then stop background work (cleanup_ctx) - the ingress writer last commits
        # what its requests queued - and only then close the database. Secondaries drain alike, meanwhile.
        if group is None:
            await runner.cleanup()
        else:
            outcomes = await asyncio.gather(
                runner.cleanup(), group.stop(SECONDARY_STOP_SECONDS), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    await engine.dispose()
                    raise outcome
        await engine.dispose()
    return code


# --- several processes (docs/operations.md, "Several processes") -------------------------------------------

# A secondary drains like the primary (at most DRAIN_SECONDS) and has no background work to stop.
SECONDARY_STOP_SECONDS = DRAIN_SECONDS + 10.0
STATE_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SecondaryConfig:
    """What a secondary gets from its primary: the primary's resolved settings, nothing read again."""

    index: int
    ctx: CliContext
    settings: ServerSettings
    notifications: NotificationSettings


def _reconciler_state(trigger: ReconcileTrigger) -> Message:
    if trigger.force is None:
        return {"reconciler": None}
    health = trigger.health() if trigger.health is not None else ReconcilerHealth(True)
    return {
        "reconciler": {
            "source": trigger.source,
            "healthy": health.healthy,
            "reason": health.reason,
            "running": health.running,
        }
    }


def _follow_reconciler(trigger: ReconcileTrigger, state: Any, link: PrimaryLink) -> None:
    """A secondary's view of the primary's reconciler: ``/readyz`` reports it and ``POST
    .../reconcile`` wakes it, as in the primary."""
    if not isinstance(state, dict):
        trigger.source, trigger.force, trigger.health = None, None, None
        return
    health = ReconcilerHealth(
        bool(state.get("healthy")), str(state.get("reason") or ""), bool(state.get("running"))
    )
    trigger.source = str(state.get("source") or "")
    trigger.force = lambda: link.send({"reconcile": True})
    trigger.health = lambda: health


def _secondaries(ctx: CliContext, options: ServeOptions, trigger: ReconcileTrigger) -> Supervisor:
    def config(index: int) -> bytes:
        return pickle.dumps(SecondaryConfig(index, ctx, options.settings, options.notifications))

    def on_message(index: int, message: Message) -> None:
        if message.get("reconcile") and trigger.force is not None:
            trigger.force()

    return Supervisor(
        options.processes - 1,
        config,
        env=ctx.env,
        greeting=lambda: _reconciler_state(trigger),
        on_message=on_message,
    )


async def _start(group: Supervisor, stop: asyncio.Event) -> int:
    """Start the secondaries: 0 once all listen (or when stopped meanwhile), 1 when one cannot start."""
    starting = asyncio.create_task(group.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        starting.cancel()
        await asyncio.wait({starting})
        return 0
    try:
        starting.result()
    except StartFailed as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


async def _share_reconciler_state(trigger: ReconcileTrigger, group: Supervisor) -> None:
    last = _reconciler_state(trigger)
    while True:
        await asyncio.sleep(STATE_POLL_SECONDS)
        now = _reconciler_state(trigger)
        if now != last:
            group.broadcast(now)
            last = now


async def run_secondary(fd: int) -> int:
    """A secondary of ``serve --processes N`` (started by the primary with ``--secondary FD``): HTTP only -
    no migration, no key bootstrap, no background job - until SIGTERM/SIGINT or the primary's end."""
    try:
        link, raw, first = await PrimaryLink.connect(fd)
        config = pickle.loads(raw)  # noqa: S301 - from the primary, over a socketpair only the two hold
    except (OSError, EOFError, asyncio.IncompleteReadError, pickle.UnpicklingError) as exc:
        print(f"error: no configuration from the primary process ({exc!r})", file=sys.stderr)
        return 1
    if not isinstance(config, SecondaryConfig):
        print("error: no configuration from the primary process", file=sys.stderr)
        return 1
    _configure_logging(config.index)
    settings = config.settings
    try:
        box = config.ctx.secret_box()
    except Exception as exc:
        log.error(json.dumps({"msg": "cannot start", "error": str(exc)}))
        return 1
    engine = create_engine(config.ctx.database_url)  # migrated by the primary
    app = create_app(settings, engine, box, route_modules=ROUTE_MODULES)
    app[NOTIFICATION_SETTINGS] = config.notifications
    app[VALIDATOR] = make_validator(box)
    trigger = app[RECONCILE]

    def from_primary(message: Message) -> None:
        if "reconciler" in message:
            _follow_reconciler(trigger, message["reconciler"], link)

    from_primary(first)
    runner = _runner(app)
    await runner.setup()
    problem = await _listen(runner, settings, shared=True)
    if problem is not None:
        log.error(json.dumps({"msg": "cannot listen", "error": problem}))
        await runner.cleanup()
        await engine.dispose()
        return 1
    link.send({"ready": os.getpid()})
    stop = asyncio.Event()
    _stop_on_signals(stop)
    following = asyncio.create_task(link.follow(from_primary))
    following.add_done_callback(lambda _task: stop.set())  # end of file: the primary is gone
    try:
        await stop.wait()
        if following.done():
            log.warning(json.dumps({"msg": "primary process gone; stopping"}))
    finally:
        following.cancel()
        await asyncio.wait({following})
        await runner.cleanup()
        link.close()
        await engine.dispose()
    return 0
