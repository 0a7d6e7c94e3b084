"""The composition root of ``factoryctl serve``: the one place where store, reconciler and API meet."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, Lifecycle, create_app
from api.claims.reaper import lease_reaper
from api.context import ServerSettings
from api.ingress.retention import retention_job
from api.management.validate import VALIDATOR
from api.notifications.policy import NotificationSettings
from api.notifications.service import NOTIFICATION_SETTINGS, notification_sender
from api.ops import JsonAccessLogger
from api.redaction import install_log_redaction
from api.schedules.scheduler import schedule_scheduler
from factoryctl.context import CliContext
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
        return cls(
            settings=settings,
            team=args.team,
            repo=Path(args.repo).resolve() if args.repo else None,
            git_url=args.git,
            branch=args.branch,
            poll_interval=parse_duration(args.poll_interval),
            workers=workers,
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


async def run_server(ctx: CliContext, options: ServeOptions) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    install_log_redaction()  # no credential in any log line, aiohttp's parser errors included
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
    runner = web.AppRunner(
        app, access_log_class=JsonAccessLogger, handle_signals=False, shutdown_timeout=DRAIN_SECONDS / 2
    )
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await engine.dispose()
        if exc.errno == errno.EADDRINUSE:
            print(f"error: port {settings.port} on {settings.host} is already in use", file=sys.stderr)
        else:
            print(f"error: cannot listen on {settings.host}:{settings.port}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"factoryctl serving on {settings.base_url}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        print("factoryctl shutting down", file=sys.stderr, flush=True)
        # Graceful: stop listening, close idle keep-alive connections, wait for in-flight handlers (at
        # most DRAIN_SECONDS), then stop background work (cleanup_ctx) - the ingress writer last commits
        # what its requests queued - and only then close the database.
        await runner.cleanup()
        await engine.dispose()
    return 0
