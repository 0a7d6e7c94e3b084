"""The composition root of ``factoryctl serve``: the one place where store, reconciler and API meet.

The primary process lives here (migrate, bootstrap the admin key, background jobs, HTTP);
:mod:`~factoryctl.serve.secondaries` adds the other processes of ``--processes N``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, Lifecycle, create_app
from api.claims.reaper import lease_reaper
from api.context import RECONCILE
from api.ingress.retention import retention_job
from api.management.validate import VALIDATOR
from api.notifications.service import NOTIFICATION_SETTINGS, notification_sender
from api.runs.maintenance import maintenance_job
from api.schedules.scheduler import schedule_scheduler
from api.scorers.job import scorer_job
from factoryctl.context import CliContext
from factoryctl.serve import secondaries
from factoryctl.serve.group import Supervisor
from factoryctl.serve.options import ServeOptions
from factoryctl.serve.reconcile import make_source, reconciler_lifecycle
from factoryctl.serve.runtime import configure_logging, listen, make_runner, port_taken, stop_on_signals
from factoryctl.serve.validation import make_validator
from factoryctl.serve.worker_process import (
    WORKER_PROCESS_STOP_SECONDS,
    forward_wakes,
    hosted_workers,
    worker_process,
)
from store import apikeys
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.teams import ensure_team

log = logging.getLogger("factoryctl.serve")
ADMIN_KEY_FILE = "admin.key"


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
        out.append(reconciler_lifecycle(source, label, options.team, self_heal=options.self_heal))
    # The lease reaper runs even with --workers 0: self-hosted workers hold leases too.
    out.append(lease_reaper())
    # Every replica runs the scheduler; a schedule's fire row decides which one starts a run
    # (docs/schedules.md, "How schedules fire").
    out.append(schedule_scheduler())
    # Every replica runs a notification sender; claims (SKIP LOCKED) decide who sends what
    # (docs/notifications.md, "At least once").
    out.append(notification_sender())
    # Service-hosted workers, here or in their own process (--worker-process; docs/operations.md,
    # "Workers in their own process").
    if not options.worker_process:
        out.append(hosted_workers(options))
    out.append(retention_job())  # delivery-log retention and rate-counter pruning
    # Finished runs, run logs, notifications, console sessions, schedule fires; the SQLite WAL
    # (docs/operations.md, "Retention"); a lease keeps it to one replica at a time.
    out.append(maintenance_job(options.retention))
    out.append(scorer_job())  # judge runs of the factories' scorers (docs/scorers.md)
    return out


async def run_server(ctx: CliContext, options: ServeOptions) -> int:
    """The primary (and, with ``--processes 1``, only) process: migrate, bootstrap the admin key, run the
    background jobs, serve HTTP and, with ``--processes N``, supervise N-1 secondaries."""
    several = options.processes > 1
    configure_logging(0 if several else None)
    settings = options.settings
    try:
        box = ctx.secret_box()
        engine = await connect_with_retry(ctx.database_url, attempts=options.db_connect_attempts)
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    key_file = await bootstrap_admin_key(engine, settings.data_dir, options.team)
    if key_file is not None:
        log.info("created an admin API key: %s (mode 0600)", key_file)
    app = create_app(
        settings, engine, box, lifecycles=lifecycles_for(options, engine, box), route_modules=ROUTE_MODULES
    )
    app[NOTIFICATION_SETTINGS] = options.notifications
    app[VALIDATOR] = make_validator(box)  # POST /factory-files/validate (api/ must not import the reconciler)
    runner = make_runner(app)
    await runner.setup()
    problem = await port_taken(settings) if several else None
    problem = problem or await listen(runner, settings, shared=several)
    if problem is not None:
        await runner.cleanup()
        await engine.dispose()
        print(f"error: {problem}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    stop_on_signals(stop)
    group: Supervisor | None = None
    workers: Supervisor | None = None
    sharing: list[asyncio.Task[None]] = []
    code = 0
    try:
        if several:
            group = secondaries.secondaries(ctx, options, app[RECONCILE])
            code = await secondaries.start(group, stop)
            sharing.append(asyncio.create_task(secondaries.share_reconciler_state(app[RECONCILE], group)))
        if code == 0 and options.worker_process and options.workers:
            workers = worker_process(ctx, options)
            code = await secondaries.start(workers, stop)
            sharing.append(asyncio.create_task(forward_wakes(app, workers)))
        if code == 0 and not stop.is_set():
            count = f" ({options.processes} processes)" if several else ""
            log.info("factoryctl serving on %s%s", settings.base_url, count)
        if code == 0:
            await stop.wait()
    finally:
        log.info("factoryctl shutting down")
        for task in sharing:
            task.cancel()
        if sharing:
            await asyncio.wait(sharing)
        # Graceful: stop listening, close idle keep-alive connections, wait for in-flight handlers (at
        # most DRAIN_SECONDS), then stop background work (cleanup_ctx) - the ingress writer last commits
        # what its requests queued - and only then close the database. Secondaries drain alike, meanwhile,
        # and the workers' process ends its runs.
        stopping = [runner.cleanup()]
        if group is not None:
            stopping.append(group.stop(secondaries.SECONDARY_STOP_SECONDS))
        if workers is not None:
            stopping.append(workers.stop(WORKER_PROCESS_STOP_SECONDS))
        for outcome in await asyncio.gather(*stopping, return_exceptions=True):
            if isinstance(outcome, BaseException):
                await engine.dispose()
                raise outcome
        await engine.dispose()
    return code
