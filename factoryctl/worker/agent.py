"""The self-hosted worker (``factoryctl worker``): the worker protocol of docs/workers.md over HTTP.

Every call goes through the typed client (``AsyncFactoryClient.workers``), so the worker follows
the one retry policy of :mod:`factoryctl.client.worker_resources`: what is repeated, how often and
why that is safe. This module only decides what a final answer means to a worker:

- ``401``/``403``: the key is wrong or revoked, or may not serve this host ID. The worker stops
  (exit 1) and abandons running runs: retrying would only hammer the server.
- ``404``/``409`` on a run's call: the lease is gone (:class:`~factoryctl.worker.errors.LeaseLost`);
  the run is abandoned, except that a 409 to the final report naming the reported state means the
  report already landed.
- anything else, once the client's retries are spent: the claim loop polls again after a pause,
  the run loop retries heartbeats and log flushes on its next tick, and a final report that never
  lands leaves the run to the lease reaper (ERROR ``resource_unavailable``, retryable).

Each of ``concurrency`` slots long-polls ``POST /api/v1/workers/claim`` for its host ID, executes
the claimed run with :func:`factoryctl.worker.execution.execute` and polls again.

Stopping (SIGTERM/SIGINT): slots stop claiming and running runs get ``drain_seconds`` to finish;
after that, or on a second signal, their harnesses are cancelled and the runs end ERROR
``resource_unavailable`` (retryable).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import signal
import socket
import tempfile
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from factoryctl.client import (
    APIError,
    APIStatusError,
    AsyncFactoryClient,
    Claim,
    ConflictError,
    NotFoundError,
    retry_delay,
)
from factoryctl.client.worker_resources import (
    RETRY_FOREVER,
    conflict_run_state,
    event_batches,
    log_batches,
)
from factoryctl.worker.artifacts import Collected
from factoryctl.worker.errors import EnvironmentSetupFailed, LeaseLost, WorkerRefused
from factoryctl.worker.execution import ExecutionSettings, HeartbeatReply, LogLine, execute, job_for_claim
from factoryctl.worker.job import Outcome
from factoryctl.worker.limits import Limits
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.resolve import RemoteSecrets
from factoryctl.worker.sandbox import Sandbox

T = TypeVar("T")
log = logging.getLogger("factoryctl.worker")
USER_AGENT = "factoryctl-worker"
REQUEST_TIMEOUT = 30.0  # per attempt; a claim's read timeout is its wait plus 15 s
TOO_LARGE = 413  # a log batch over the server's per-request limit: split it (docs/workers.md, "Log limits")
REFUSED = frozenset({401, 403})  # the key, not the request: fatal for every call
LEASE_GONE = frozenset({404, 409})  # on a run's call: the run is not ours any more


def default_worker_id() -> str:
    return f"{socket.gethostname()[:60]}-{os.getpid()}-{secrets.token_hex(3)}"


class RemoteWorker:
    """A worker process serving one host ID against one control plane."""

    def __init__(
        self,
        server_url: str,
        api_key: str,
        host_id: str,
        *,
        harness: str = "echo",
        command: str | None = None,
        concurrency: int = 1,
        workspace_root: Path | None = None,
        wait_seconds: float = 20.0,
        harness_env: Mapping[str, str] | None = None,
        drain_seconds: float = 30.0,
        worker_id: str | None = None,
        sandbox: Sandbox | None = None,
        sandbox_required: bool = False,
        limits: Limits | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.server_url = server_url.rstrip("/")
        self.api_key = api_key
        self.host_id = host_id
        self.concurrency = concurrency
        self.wait_seconds = wait_seconds
        self.drain_seconds = drain_seconds
        self.worker_id = worker_id or default_worker_id()
        self.settings = ExecutionSettings(
            harness=harness,
            command=command,
            workspace_root=workspace_root or Path(tempfile.gettempdir()) / "factoryctl-workspaces",
            harness_env=harness_env,
            sandbox=sandbox,  # docs/workers.md, "Sandbox": --sandbox auto|bwrap|none
            sandbox_required=sandbox_required,
            limits=limits or Limits(),  # docs/workers.md, "Limits"
        )
        self.stop = asyncio.Event()  # stop claiming
        self.abort = asyncio.Event()  # cancel running harnesses
        self.running: set[str] = set()
        self.completed = 0
        self.fatal: str | None = None
        self._client: AsyncFactoryClient | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def run_until_signalled(self) -> int:
        """Run until SIGTERM/SIGINT (a second signal aborts running runs at once); the exit code."""
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if self.stop.is_set():
                self.abort.set()
            self.stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        return await self.run()

    async def run(self) -> int:
        """Claim and execute until :attr:`stop` is set; 0 on a clean stop, 1 after a refusal."""
        client = AsyncFactoryClient(
            self.server_url,
            self.api_key,
            timeout=REQUEST_TIMEOUT,
            max_retries=RETRY_FOREVER,  # only claims use the client's budget; every other call sets its own
            default_headers={"User-Agent": USER_AGENT},
        )
        async with client:
            self._client = client
            log.info("worker %s serving host %r on %s", self.worker_id, self.host_id, self.server_url)
            slots = [asyncio.create_task(self._slot(i)) for i in range(self.concurrency)]
            drain = asyncio.create_task(self._drain_after_stop())
            try:
                await asyncio.gather(*slots)
            finally:
                drain.cancel()
                for task in slots:
                    task.cancel()
                await asyncio.gather(*slots, drain, return_exceptions=True)
                self._client = None
        if self.fatal:
            log.error("worker stopped: %s", self.fatal)
            return 1
        log.info("worker stopped after %d run(s)", self.completed)
        return 0

    def refuse(self, reason: str) -> None:
        """The server refused this worker's key: stop claiming, cancel running runs, exit 1."""
        if self.fatal is None:
            self.fatal = reason
        self.stop.set()
        self.abort.set()

    @property
    def api(self) -> AsyncFactoryClient:
        if self._client is None:
            raise RuntimeError("the worker is not running")
        return self._client

    async def _drain_after_stop(self) -> None:
        await self.stop.wait()
        if self.running:
            log.info(
                "stopping: waiting up to %gs for %d running run(s)", self.drain_seconds, len(self.running)
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.abort.wait(), self.drain_seconds)
        self.abort.set()

    async def _slot(self, index: int) -> None:
        pauses = 0  # consecutive claims that failed after the client's retries
        while not self.stop.is_set():
            try:
                claim = await self._until_stopped(self._claim())
            except WorkerRefused as exc:
                self.refuse(str(exc))
                return
            except APIError as exc:
                # What the client's retries do not cover: an unreadable answer, a Retry-After beyond
                # its limit, a 5xx it never repeats. Polling again is still safe (see _claim).
                retry_after = exc.headers.get("Retry-After") if isinstance(exc, APIStatusError) else None
                options = self.api.options
                delay = retry_delay(pauses, retry_after, options.retry_base, options.retry_cap)
                pauses += 1
                log.warning("slot %d: claim failed (%s); polling again in %.1fs", index, exc, delay)
                await self._sleep_unless_stopped(delay)
                continue
            pauses = 0
            if claim is not None:
                await self._execute(claim)

    async def _until_stopped(self, call: Awaitable[T]) -> T | None:
        """Await ``call`` (a claim), abandoning it when the worker is told to stop."""
        task = asyncio.ensure_future(call)
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            return None
        return task.result()

    async def _sleep_unless_stopped(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), delay)

    # -- protocol ----------------------------------------------------------------------------------

    async def _claim(self) -> Claim | None:
        """The next run for this host (None when idle); the client repeats it until it gets an answer.

        Any 4xx the client does not retry means the server will not serve this worker as
        configured (key, host ID, worker ID): stopping is better than polling forever.
        """
        try:
            return await self.api.workers.claim(
                self.host_id,
                wait_seconds=self.wait_seconds,
                worker_id=self.worker_id,
                harnesses=self.settings.offered,  # a preset's runs only where its CLI is
            )
        except APIStatusError as exc:
            if exc.status_code in REFUSED:
                raise WorkerRefused(f"the server refused this worker's key ({exc})") from exc
            if 400 <= exc.status_code < 500 and exc.status_code not in (408, 429):
                raise WorkerRefused(f"the server refused the claim ({exc})") from exc
            raise

    async def _execute(self, claim: Claim) -> None:
        run = claim.run.raw  # the run as sent: environment, MCP servers, skill body and all
        run_id = claim.run.run_id
        lease = claim.lease_seconds or 30.0
        channel = HttpChannel(self, run_id, claim.lease_token)
        settings = dataclasses.replace(self.settings, heartbeat_seconds=max(0.2, min(lease / 3, 5.0)))
        self.running.add(run_id)
        try:
            job = await job_for_claim(run, RemoteSecrets(channel.secrets), channel)
            if job is None:
                return
            log.info("run %s: claimed (attempt %s)", run_id, claim.run.attempt)
            outcome = await execute(job, channel, settings, stop=self.abort)
            log.info("run %s: %s", run_id, outcome.state if outcome else "abandoned (lease lost)")
            self.completed += 1
        except LeaseLost as exc:
            log.warning("run %s: abandoned: %s", run_id, exc)
        except APIError as exc:  # the client's retries are spent; the lease reaper decides the run
            log.error("run %s: abandoned, the server cannot be reached: %s", run_id, exc)
        except Exception:  # one broken run must not stop the worker
            log.exception("run %s: abandoned", run_id)
        finally:
            self.running.discard(run_id)

    async def call_for_run(self, run_id: str, call: Awaitable[T]) -> T:
        """``call``'s answer, with the final errors of a run's call mapped for the run loop.

        401/403 stop the worker and raise :class:`LeaseLost` (nothing more may be done for the run);
        404/409 raise :class:`LeaseLost`; other errors propagate (the client already retried them).
        """
        try:
            return await call
        except APIStatusError as exc:
            if exc.status_code in REFUSED:
                self.refuse(f"the server refused this worker's key while it held run {run_id} ({exc})")
                raise LeaseLost(f"the server refused this worker's key ({exc})") from exc
            if exc.status_code in LEASE_GONE:
                raise LeaseLost(str(exc)) from exc
            raise


class HttpChannel:
    """:class:`factoryctl.worker.execution.RunChannel` over the worker HTTP API."""

    def __init__(self, worker: RemoteWorker, run_id: str, lease_token: str | None = None) -> None:
        self.worker = worker
        self.run_id = run_id
        self.lease_token = lease_token  # the claim's: presented on every call (docs/workers.md, "Leases")

    async def heartbeat(self, *, start: bool, sandbox: Mapping[str, str] | None = None) -> HeartbeatReply:
        beat = await self.worker.call_for_run(
            self.run_id,
            self.worker.api.workers.heartbeat(
                self.run_id,
                state="INPROGRESS" if start else None,
                worker_id=self.worker.worker_id,
                lease_token=self.lease_token,
                sandbox=sandbox,
            ),
        )
        return HeartbeatReply(
            cancel_requested=beat.cancel_requested,
            followups=[f.raw for f in beat.followups],
            state=beat.state,
        )

    async def send_logs(self, lines: Sequence[LogLine]) -> None:
        """Send ``lines`` in batches sized by encoded bytes; a batch the server still finds too large
        (413) is split in two, and a single line it refuses is replaced by a marker line saying so."""
        for batch in log_batches(lines):
            await self._send_batch(list(batch))

    async def _send_batch(self, batch: list[LogLine], *, split: bool = True) -> None:
        try:
            await self.worker.call_for_run(
                self.run_id,
                self.worker.api.workers.append_logs(
                    self.run_id, batch, worker_id=self.worker.worker_id, lease_token=self.lease_token
                ),
            )
        except APIStatusError as exc:
            if exc.status_code != TOO_LARGE or not split:
                raise
            if len(batch) > 1:
                half = len(batch) // 2
                await self._send_batch(batch[:half])
                await self._send_batch(batch[half:])
                return
            text = batch[0][1]
            marker = (
                f"[an output line of {len(text)} characters was dropped: the server refused it as too large]"
            )
            await self._send_batch([("system", marker)], split=False)

    async def send_events(self, events: Sequence[AgentEvent]) -> None:
        """Send the agent's transcript events, bounded and batched (:func:`event_batches`)."""
        for batch in event_batches([e.to_json() for e in events]):
            await self.worker.call_for_run(
                self.run_id,
                self.worker.api.workers.send_events(
                    self.run_id, batch, worker_id=self.worker.worker_id, lease_token=self.lease_token
                ),
            )

    async def save_session_state(self, archive: bytes) -> None:
        """Keep the agent CLI's session files on the server for a follow-up (never logged)."""
        await self.worker.call_for_run(
            self.run_id,
            self.worker.api.workers.save_session_state(
                self.run_id, archive, worker_id=self.worker.worker_id, lease_token=self.lease_token
            ),
        )

    async def load_session_state(self) -> bytes | None:
        """The session files an earlier attempt saved; None when none was (404)."""
        try:
            return await self.worker.api.workers.load_session_state(
                self.run_id, worker_id=self.worker.worker_id, lease_token=self.lease_token
            )
        except NotFoundError:
            return None
        except APIStatusError as exc:
            if exc.status_code in LEASE_GONE:
                raise LeaseLost(str(exc)) from exc
            raise

    async def send_artifacts(self, artifacts: Collected) -> None:
        """The declared links with the first request, then one request per file (each under the
        server's per-file cap, so no request nears a body limit); a file the server refuses (413 past
        the run's caps, 422) is logged and the rest still go."""
        links = [d.fields for d in artifacts.declared]
        batches: list[list[tuple[str, str, bytes]]] = [
            [(f.filepath, f.mime_type, f.data)] for f in artifacts.files
        ]
        for batch in batches or [[]]:
            call = self.worker.api.workers.upload_artifacts(
                self.run_id,
                links=links,
                files=batch,
                worker_id=self.worker.worker_id,
                lease_token=self.lease_token,
            )
            try:
                await self.worker.call_for_run(self.run_id, call)
            except APIStatusError as exc:
                if exc.status_code not in (413, 422):
                    raise
                log.warning("run %s: the server refused an artifact: %s", self.run_id, exc)
            links = []

    async def report(self, outcome: Outcome) -> None:
        """Report the final state; a 409 naming that very state means an earlier attempt landed."""
        call = self.worker.api.workers.report_state(
            self.run_id,
            outcome.state,
            status_message=outcome.status_message,
            worker_id=self.worker.worker_id,
            lease_token=self.lease_token,
        )
        try:
            await self.worker.call_for_run(self.run_id, call)
        except LeaseLost as exc:
            refusal = exc.__cause__
            if isinstance(refusal, ConflictError) and conflict_run_state(refusal) == outcome.state:
                log.info("run %s: %s was already recorded", self.run_id, outcome.state)
                return
            raise

    async def secrets(self, run_id: str) -> dict[str, str]:
        """The team secrets the server lets this lease holder read for the run (never logged).

        A lost lease propagates (:class:`LeaseLost`); any other failure fails the run's setup.
        """
        try:
            return await self.worker.call_for_run(
                run_id,
                self.worker.api.workers.secrets(
                    run_id, worker_id=self.worker.worker_id, lease_token=self.lease_token
                ),
            )
        except APIError as exc:
            raise EnvironmentSetupFailed(
                f"cannot read the run's team secrets from the server: {exc}"
            ) from None
