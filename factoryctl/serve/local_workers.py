"""Service-hosted workers (``serve --workers N``): the worker agent wired straight to the store.

This is composition, so it lives at the composition root: the run loop, harnesses and workspaces
come from :mod:`factoryctl.worker` (the same code a self-hosted ``factoryctl worker`` runs), and
the protocol is the server's queue functions (:mod:`api.runs.queue`) and claim answer
(:mod:`api.claims.payload`) called in-process instead of over HTTP. The N workers claim runs routed
to service-hosted workers (``worker_host`` ``""``); they wake as soon as any path in this process
queues a run (:mod:`api.runs.claim_signal`) and otherwise poll, so runs queued by another replica
are found too.

On shutdown the workers stop claiming, running harnesses are cancelled (their runs end ERROR
``resource_unavailable``, retryable) and every task is awaited.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from tempfile import gettempdir, mkdtemp
from typing import Any

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.claims.payload import claim_payload, complete_claim, followup_json, skill_resolver
from api.context import BOX, CLOCK, SESSIONS, SETTINGS
from api.runs import queue
from api.runs.claim_signal import ClaimSignal, claim_signal
from api.runs.event_hub import notify_events
from api.runs.states import IllegalTransition
from factoryctl.worker import EnvironmentSetupFailed
from factoryctl.worker.execution import (
    ExecutionSettings,
    HeartbeatReply,
    LeaseLost,
    LogLine,
    execute,
    job_for_claim,
)
from factoryctl.worker.job import Outcome
from factoryctl.worker.sandbox import Sandbox, check_layout
from store import NotFound
from store import secrets as secret_store
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Run

log = logging.getLogger("factoryctl.workers")
Lifecycle = Callable[[web.Application], AsyncIterator[None]]
SERVICE_HOSTS = ("",)
STOP_TIMEOUT_SECONDS = 20.0


class StoreSecrets:
    """:class:`factoryctl.worker.resolve.SecretSource` read and decrypted straight from the store.

    Only ``run``-scoped secrets (:func:`store.secrets.reveal_for_run`, the rule the secrets endpoint
    keeps too): a missing or webhook secret fails the run's setup, naming the secret, never its value.
    """

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> None:
        self.sessions, self.box = sessions, box

    async def fetch(self, run_id: str, names: list[str]) -> dict[str, str]:
        async with self.sessions() as session:
            team_id = await session.scalar(select(Run.team_id).where(Run.run_id == run_id))
            if team_id is None:
                raise EnvironmentSetupFailed(f"run {run_id} no longer exists")
            readable = await secret_store.reveal_for_run(session, self.box, team_id, names)
        if readable.refused:
            raise EnvironmentSetupFailed("; ".join(readable.refused.values()))
        return readable.values


class StoreChannel:
    """:class:`factoryctl.worker.execution.RunChannel` backed directly by the store's queue functions."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Clock,
        run_id: str,
        owner: str,
        lease_seconds: float,
        committed: Callable[[], None] = lambda: None,
        *,
        lease_token: str | None,
        log_limits: queue.LogLimits = queue.DEFAULT_LOG_LIMITS,
    ) -> None:
        self.sessions, self.clock = sessions, clock
        self.run_id, self.owner, self.lease_seconds = run_id, owner, lease_seconds
        self.committed = committed  # after each commit: this replica's event streams look now
        # The claim's token, presented like a self-hosted worker's (docs/workers.md, "Leases").
        self.lease_token, self.log_limits = lease_token, log_limits

    async def heartbeat(self, *, start: bool) -> HeartbeatReply:
        try:
            async with self.sessions() as session, session.begin():
                beat = await queue.heartbeat(
                    session,
                    self.clock,
                    self.run_id,
                    owner=self.owner,
                    lease_token=self.lease_token,
                    lease_seconds=self.lease_seconds,
                    start=start,
                )
                followups = [followup_json(f) for f in beat.followups]
        except (queue.NotLeaseHolder, NotFound, IllegalTransition) as exc:
            raise LeaseLost(str(exc)) from exc
        if start:
            self.committed()
        return HeartbeatReply(beat.cancel_requested, followups, beat.state)

    async def send_logs(self, lines: Sequence[LogLine]) -> None:
        try:
            async with self.sessions() as session, session.begin():
                await queue.append_logs(
                    session,
                    self.clock,
                    self.run_id,
                    lines,
                    owner=self.owner,
                    lease_token=self.lease_token,
                    limits=self.log_limits,
                )
        except (queue.NotLeaseHolder, NotFound) as exc:
            raise LeaseLost(str(exc)) from exc
        self.committed()

    async def report(self, outcome: Outcome) -> None:
        try:
            async with self.sessions() as session, session.begin():
                await queue.report_state(
                    session,
                    self.clock,
                    self.run_id,
                    owner=self.owner,
                    lease_token=self.lease_token,
                    state=outcome.state,
                    status_message=outcome.status_message,
                )
        except (queue.NotLeaseHolder, NotFound, IllegalTransition) as exc:
            raise LeaseLost(str(exc)) from exc
        self.committed()


def store_channel(
    app: web.Application, run_id: str, owner: str, lease_seconds: float, lease_token: str | None
) -> StoreChannel:
    """The channel of a service-hosted worker's run: the app's store, the server's log caps, and its event
    streams woken after every commit (docs/events.md, "In-process wake-up")."""
    settings = app[SETTINGS]
    return StoreChannel(
        app[SESSIONS],
        app[CLOCK],
        run_id,
        owner,
        lease_seconds,
        committed=lambda: notify_events(app),
        lease_token=lease_token,
        log_limits=queue.LogLimits(settings.run_log_max_lines, settings.run_log_max_bytes),
    )


class ServiceWorker:
    """One in-process worker task: claim, execute, repeat."""

    def __init__(
        self,
        app: web.Application,
        owner: str,
        settings: ExecutionSettings,
        stop: asyncio.Event,
        abort: asyncio.Event,
    ) -> None:
        self.app, self.owner, self.settings = app, owner, settings
        self.stop, self.abort = stop, abort
        self.signal = claim_signal(app)
        self.poll_seconds = 0.5

    async def run(self) -> None:
        peek, failures = False, 0
        while not self.stop.is_set():
            woken = self.signal.current()
            try:
                payload = await self.claim(peek=peek)
                failures = 0
            except Exception:
                failures += 1
                log.exception("service worker %s: claim failed", self.owner)
                await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))
                continue
            if payload is None:
                peek = True
                await ClaimSignal.wait(woken, self.poll_seconds)
                continue
            peek = False
            await self.execute(payload)

    async def claim(self, *, peek: bool) -> dict[str, Any] | None:
        sessions, clock = self.app[SESSIONS], self.app[CLOCK]
        if peek:
            async with sessions() as session:
                if not await queue.queued_exists(session, worker_hosts=SERVICE_HOSTS):
                    return None
        lease = self.app[SETTINGS].lease_seconds
        while True:  # a run whose skill fails at claim time ends FAILED; then take the next one
            async with sessions() as session, session.begin():
                run = await queue.claim_next(
                    session, clock, worker_hosts=SERVICE_HOSTS, owner=self.owner, lease_seconds=lease
                )
                if run is None:
                    return None
                payload = await claim_payload(session, clock, run, lease)
            notify_events(self.app)  # the claim is a state event
            resolver = skill_resolver(self.app)
            completed = await complete_claim(sessions, clock, resolver, payload, owner=self.owner)
            if completed is not None:
                return completed

    async def execute(self, payload: dict[str, Any]) -> None:
        run, lease = payload["run"], float(payload["lease_seconds"])
        channel = store_channel(self.app, str(run["run_id"]), self.owner, lease, payload.get("lease_token"))
        try:
            # Secret values are read here, inside the worker, never in the claim answer.
            job = await job_for_claim(run, StoreSecrets(self.app[SESSIONS], self.app[BOX]), channel)
            if job is None:
                return
            outcome = await execute(job, channel, self.settings, stop=self.abort)
            log.info("run %s: %s", job.run_id, outcome.state if outcome else "abandoned (lease lost)")
        except LeaseLost as exc:
            log.warning("run %s: %s", run["run_id"], exc)
        except Exception:
            log.exception("run %s: execution failed", run["run_id"])


def service_workers(
    n: int,
    harness_name: str,
    command: str | None,
    workspace_root: Path | None,
    *,
    harness_env: Mapping[str, str] | None = None,
    heartbeat_seconds: float | None = None,
    sandbox: Sandbox | None = None,
    guarded: Sequence[Path] = (),
) -> Lifecycle:
    """A cleanup_ctx lifecycle running ``n`` service-hosted workers.

    The lease reaper is a separate lifecycle (:func:`api.claims.reaper.lease_reaper`): it must run
    even with no service-hosted worker, because self-hosted workers hold leases too.

    Run-controlled processes (setup commands, the command harness and what it starts) run only inside
    ``sandbox`` (None: bubblewrap from PATH); runs that need one are refused (FAILED
    ``sandbox_unavailable``) while it does not work (docs/workers.md, "Sandbox"). ``workspace_root``
    None is a fresh private directory under the system temp dir, removed at stop; a root that overlaps
    the data directory or ``guarded`` (a SQLite database's directory) is refused at start.
    ``harness_env`` None lets agents inherit this process's environment (pass a scrubbed copy, see
    :func:`factoryctl.worker.execution.scrubbed_environment`).
    """
    if n < 0:
        raise ValueError("the number of service workers must be 0 or more")
    confine = sandbox if sandbox is not None else Sandbox()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        beat = heartbeat_seconds or max(0.2, min(settings.lease_seconds / 3, 2.0))
        check_layout([settings.data_dir, *guarded], workspace_root, confine.read_only, confine.writable)
        fresh = workspace_root is None and n > 0
        scratch = Path(mkdtemp(prefix="factoryctl-workspaces-")) if fresh else None
        if n:
            problem = await asyncio.to_thread(confine.problem)
            if problem is not None:
                log.warning("service-hosted workers: no sandbox (%s); runs that need one will fail", problem)
        execution = ExecutionSettings(
            harness=harness_name,
            command=command,
            workspace_root=workspace_root or scratch or Path(gettempdir()),
            heartbeat_seconds=beat,
            harness_env=harness_env,
            sandbox=confine,
            sandbox_required=True,
            guarded=(settings.data_dir, *guarded),
        )
        stop, abort = asyncio.Event(), asyncio.Event()
        instance = secrets.token_hex(4)
        workers = [
            asyncio.create_task(ServiceWorker(app, f"service:{instance}/{i}", execution, stop, abort).run())
            for i in range(n)
        ]
        try:
            yield
        finally:
            stop.set()
            abort.set()
            if workers:
                _done, pending = await asyncio.wait(workers, timeout=STOP_TIMEOUT_SECONDS)
                for task in pending:
                    task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if scratch is not None:
                await asyncio.to_thread(shutil.rmtree, scratch, True)

    return lifecycle
