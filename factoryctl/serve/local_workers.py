"""Service-hosted workers (``serve --workers N``): the worker agent wired straight to the store.

This is composition, so it lives at the composition root: the run loop, harnesses and workspaces
come from :mod:`factoryctl.worker` (the same code a self-hosted ``factoryctl worker`` runs), and
the protocol is the server's (:class:`api.claims.protocol.WorkerProtocol`, the calls behind the
HTTP routes) called in-process instead of over HTTP. The N workers claim runs routed
to service-hosted workers (``worker_host`` ``""``); they wake as soon as any path in this process
queues a run (:mod:`api.runs.claim_signal`) and otherwise poll, so runs queued by another replica
are found too.

On shutdown the workers stop claiming, running harnesses are cancelled (their runs end ERROR
``resource_unavailable``, retryable) and every task is awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from tempfile import gettempdir, mkdtemp
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.claims.artifacts import NewFile, add_artifacts, parse_links
from api.claims.errors import LeaseRefused
from api.claims.protocol import Holder, WorkerProtocol, run_secrets
from api.context import BOX, SESSIONS, SETTINGS
from api.runs.claim_signal import ClaimSignal, claim_signal
from factoryctl.addresses import egress_refusal
from factoryctl.client.worker_resources import event_batches
from factoryctl.worker import EnvironmentSetupFailed
from factoryctl.worker.artifacts import Collected
from factoryctl.worker.execution import (
    ExecutionSettings,
    HeartbeatReply,
    LeaseLost,
    LogLine,
    execute,
    job_for_claim,
)
from factoryctl.worker.job import Outcome
from factoryctl.worker.limits import Limits
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.presets.registry import AgentCli
from factoryctl.worker.sandbox import Sandbox, check_layout
from store import NotFound
from store.crypto import SecretBox

log = logging.getLogger("factoryctl.workers")
Lifecycle = Callable[[web.Application], AsyncIterator[None]]
SERVICE_HOSTS = ("",)
EVENT_BATCH_BYTES = 4 * 1024 * 1024  # in-process: no request body, only the batch size and the bounds
STOP_TIMEOUT_SECONDS = 20.0


class StoreSecrets:
    """:class:`factoryctl.worker.resolve.SecretSource` read and decrypted straight from the store.

    Only ``run``-scoped secrets (:func:`api.claims.protocol.run_secrets`, the path the secrets endpoint
    takes too): a missing or webhook secret fails the run's setup, naming the secret, never its value.
    """

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> None:
        self.sessions, self.box = sessions, box

    async def fetch(self, run_id: str, names: list[str]) -> dict[str, str]:
        try:
            readable = await run_secrets(self.sessions, self.box, run_id, names=names)
        except NotFound:
            raise EnvironmentSetupFailed(f"run {run_id} no longer exists") from None
        if readable.refused:
            raise EnvironmentSetupFailed("; ".join(readable.refused.values()))
        return readable.values


@contextlib.contextmanager
def _lease_lost() -> Iterator[None]:
    """What the protocol refuses (the lease, or a run that is gone) is a lost lease to the run loop."""
    try:
        yield
    except (LeaseRefused, NotFound) as exc:
        raise LeaseLost(str(exc)) from exc


class StoreChannel:
    """:class:`factoryctl.worker.execution.RunChannel` on the server's worker protocol, in-process: the
    calls the HTTP routes make, presenting the claim's token like a self-hosted worker
    (docs/workers.md, "Leases")."""

    def __init__(self, protocol: WorkerProtocol, run_id: str, holder: Holder) -> None:
        self.protocol, self.run_id, self.holder = protocol, run_id, holder

    async def heartbeat(self, *, start: bool, sandbox: Mapping[str, str] | None = None) -> HeartbeatReply:
        with _lease_lost():
            beat = await self.protocol.heartbeat(
                self.run_id, self.holder, start=start, sandbox=dict(sandbox) if sandbox else None
            )
        return HeartbeatReply(beat.cancel_requested, beat.followups, beat.state)

    async def send_logs(self, lines: Sequence[LogLine]) -> None:
        with _lease_lost():
            await self.protocol.append_logs(self.run_id, self.holder, lines)

    async def send_events(self, events: Sequence[AgentEvent]) -> None:
        """The agent's transcript events, bounded and batched as a self-hosted worker sends them
        (:func:`factoryctl.client.worker_resources.event_batches`)."""
        for batch in event_batches([e.to_json() for e in events], max_bytes=EVENT_BATCH_BYTES):
            with _lease_lost():
                await self.protocol.append_events(self.run_id, self.holder, batch)

    async def save_session_state(self, archive: bytes) -> None:
        """Keep the agent CLI's session files for a follow-up (encrypted in the store)."""
        with _lease_lost():
            await self.protocol.save_session_state(self.run_id, self.holder, archive)

    async def load_session_state(self) -> bytes | None:
        with _lease_lost():
            return await self.protocol.load_session_state(self.run_id, self.holder)

    async def send_artifacts(self, artifacts: Collected) -> None:
        """The run's artifacts through the same checks as the HTTP route (:mod:`api.claims.artifacts`)."""
        files = [NewFile(f.filepath, f.mime_type, f.data) for f in artifacts.files]
        links = parse_links([d.fields for d in artifacts.declared])
        with _lease_lost():
            await add_artifacts(self.protocol, self.run_id, self.holder, files, links)

    async def report(self, outcome: Outcome) -> None:
        with _lease_lost():
            await self.protocol.report(self.run_id, self.holder, outcome.state, outcome.status_message)


def store_channel(
    app: web.Application, run_id: str, owner: str, lease_seconds: float, lease_token: str | None
) -> StoreChannel:
    """The channel of a service-hosted worker's run: the app's store, the server's log caps, and its event
    streams woken after every commit (docs/events.md, "In-process wake-up")."""
    protocol = WorkerProtocol.of(app, lease_seconds=lease_seconds)
    return StoreChannel(protocol, run_id, Holder(owner, lease_token))


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
        self.protocol = WorkerProtocol.of(app)
        self.signal = claim_signal(app)
        self.poll_seconds = 0.5

    async def run(self) -> None:
        peek, failures = False, 0
        while not self.stop.is_set():
            woken = self.signal.current()
            try:
                payload = await self.protocol.claim(
                    SERVICE_HOSTS, self.owner, peek=peek, harnesses=self.settings.offered
                )
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
    agents: Mapping[str, AgentCli] | None = None,
    limits: Limits | None = None,
) -> Lifecycle:
    """A cleanup_ctx lifecycle running ``n`` service-hosted workers.

    ``agents``: the agent CLIs found and version-checked at start (``--harness claude`` ...), which the
    workers offer (docs/workers.md, "Harnesses"); ``limits``: each run's (None: the defaults,
    docs/workers.md "Limits").

    The lease reaper is a separate lifecycle (:func:`api.claims.reaper.lease_reaper`): it must run
    even with no service-hosted worker, because self-hosted workers hold leases too.

    Every run's processes (setup commands, the harness, echo included, and what it starts) run only
    inside ``sandbox`` (None: bubblewrap from PATH); runs are refused (FAILED ``sandbox_unavailable``)
    while it does not work (docs/workers.md, "Sandbox"). ``workspace_root``
    None is a fresh private directory under the system temp dir, removed at stop; a root that overlaps
    the data directory or ``guarded`` (a SQLite database's directory) is refused at start.
    ``harness_env`` None lets agents inherit this process's environment (pass a scrubbed copy, see
    :func:`factoryctl.worker.execution.scrubbed_environment`).
    """
    if n < 0:
        raise ValueError("the number of service workers must be 0 or more")
    confine = sandbox if sandbox is not None else Sandbox(address_refusal=egress_refusal)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        beat = heartbeat_seconds or max(0.2, min(settings.lease_seconds / 3, 2.0))
        check_layout([settings.data_dir, *guarded], workspace_root, confine.read_only, confine.writable)
        fresh = workspace_root is None and n > 0
        scratch = Path(mkdtemp(prefix="factoryctl-workspaces-")) if fresh else None
        if n:
            problem = await asyncio.to_thread(confine.problem)
            if problem is not None:
                log.warning("service-hosted workers: no sandbox (%s); every run will fail", problem)
        execution = ExecutionSettings(
            harness=harness_name,
            command=command,
            workspace_root=workspace_root or scratch or Path(gettempdir()),
            heartbeat_seconds=beat,
            harness_env=harness_env,
            sandbox=confine,
            sandbox_required=True,
            guarded=(settings.data_dir, *guarded),
            agents=dict(agents or {}),
            limits=limits or Limits(),
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
