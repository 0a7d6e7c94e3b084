"""The self-hosted worker (``factoryctl worker``): the worker protocol of docs/workers.md over HTTP.

Each of ``concurrency`` slots long-polls ``POST /api/v1/workers/claim`` for its host ID, executes
the claimed run with :func:`factoryctl.worker.execution.execute` (heartbeats, batched logs, final
state over HTTP) and polls again. Connection errors and 5xx answers are retried with capped
exponential backoff and jitter, so a restarting server costs a pause, not the worker. A
401/403 is fatal: retrying a revoked or wrong key would only hammer the server.

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
import random
import secrets
import signal
import socket
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from factoryctl.worker import EnvironmentSetupFailed, InvalidClaim
from factoryctl.worker.environment import setup_failure_outcome
from factoryctl.worker.execution import ExecutionSettings, HeartbeatReply, LeaseLost, LogLine, execute
from factoryctl.worker.job import Job, Outcome
from factoryctl.worker.resolve import RemoteSecrets, resolve_claim

log = logging.getLogger("factoryctl.worker")
API_PREFIX = "/api/v1/workers"
LOG_BATCH = 500  # lines per request (the server takes at most 1000)


class FatalWorkerError(Exception):
    """The server refused this worker outright (bad key, wrong host): stop instead of retrying."""


class ServerUnavailable(Exception):
    """A 5xx answer: worth retrying after a pause."""


class Backoff:
    """Capped exponential backoff with jitter: ``uniform(c/2, c)``, ``c = min(cap, initial * 2**n)``."""

    def __init__(self, initial: float = 0.5, cap: float = 30.0) -> None:
        self.initial, self.cap, self.failures = initial, cap, 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * 2**self.failures)
        self.failures = min(self.failures + 1, 30)
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


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
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
        worker_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.server_url = server_url.rstrip("/")
        self.api_key = api_key
        self.host_id = host_id
        self.concurrency = concurrency
        self.wait_seconds = wait_seconds
        self.drain_seconds = drain_seconds
        self.backoff = (backoff_initial, backoff_cap)
        self.worker_id = worker_id or default_worker_id()
        self.settings = ExecutionSettings(
            harness=harness,
            command=command,
            workspace_root=workspace_root or Path(tempfile.gettempdir()) / "factoryctl-workspaces",
            harness_env=harness_env,
        )
        self.stop = asyncio.Event()  # stop claiming
        self.abort = asyncio.Event()  # cancel running harnesses
        self.running: set[str] = set()
        self.completed = 0
        self.fatal: str | None = None
        self._client: httpx.AsyncClient | None = None

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
        """Claim and execute until :attr:`stop` is set; 0 on a clean stop, 1 after a fatal refusal."""
        timeout = httpx.Timeout(30.0, read=self.wait_seconds + 30.0)
        headers = {"Authorization": f"Bearer {self.api_key}", "User-Agent": "factoryctl-worker"}
        async with httpx.AsyncClient(base_url=self.server_url, headers=headers, timeout=timeout) as client:
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
        backoff = Backoff(*self.backoff)
        while not self.stop.is_set():
            try:
                claim = await self._until_stopped(self._claim())
            except (httpx.TransportError, ServerUnavailable) as exc:
                delay = backoff.next_delay()
                log.warning(
                    "slot %d: cannot reach %s (%s); retrying in %.1fs", index, self.server_url, exc, delay
                )
                await self._sleep_unless_stopped(delay)
                continue
            except FatalWorkerError as exc:
                self.fatal = str(exc)
                self.stop.set()
                self.abort.set()
                return
            backoff.reset()
            if claim is not None:
                await self._execute(claim)

    async def _until_stopped(self, coro: Any) -> dict[str, Any] | None:
        """Await a claim, abandoning it when the worker is told to stop."""
        task = asyncio.ensure_future(coro)
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
        result: dict[str, Any] | None = task.result()
        return result

    async def _sleep_unless_stopped(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), delay)

    # -- protocol ----------------------------------------------------------------------------------

    async def _claim(self) -> dict[str, Any] | None:
        body = {"worker_host": self.host_id, "wait_seconds": self.wait_seconds, "worker_id": self.worker_id}
        response = await self._http().post(f"{API_PREFIX}/claim", json=body)
        if response.status_code == 204:
            return None
        data = _json_or_raise(response, "claim")
        if not isinstance(data.get("run"), dict):
            raise ServerUnavailable("claim answer has no run object")
        return data

    async def _execute(self, claim: dict[str, Any]) -> None:
        run = claim["run"]
        run_id = str(run.get("run_id"))
        lease = float(claim.get("lease_seconds") or 30.0)
        channel = HttpChannel(self, run_id)
        settings = dataclasses.replace(self.settings, heartbeat_seconds=max(0.2, min(lease / 3, 5.0)))
        self.running.add(run_id)
        try:
            try:
                job = Job.from_claim(await resolve_claim(run, RemoteSecrets(self._run_secrets)))
            except EnvironmentSetupFailed as exc:
                await channel.report(setup_failure_outcome(exc))
                return
            except InvalidClaim as exc:
                await channel.report(Outcome.error(f"invalid claim: {exc}", "internal_error"))
                return
            log.info("run %s: claimed (attempt %s)", run_id, run.get("attempt"))
            outcome = await execute(job, channel, settings, stop=self.abort)
            log.info("run %s: %s", run_id, outcome.state if outcome else "abandoned (lease lost)")
            self.completed += 1
        except LeaseLost:
            log.warning("run %s: the server refused the report", run_id)
        except Exception as exc:  # one broken run must not stop the worker
            log.error("run %s: abandoned: %s", run_id, exc)
        finally:
            self.running.discard(run_id)

    async def _run_secrets(self, run_id: str) -> dict[str, str]:
        """The team secrets the server lets this lease holder read for ``run_id`` (never logged).

        A lost lease propagates (:class:`LeaseLost`); any other failure fails the run's setup.
        """
        try:
            data = await self.post(f"/runs/{run_id}/secrets", {}, attempts=3)
        except (httpx.TransportError, ServerUnavailable, FatalWorkerError) as exc:
            raise EnvironmentSetupFailed(
                f"cannot read the run's team secrets from the server: {exc}"
            ) from None
        values = data.get("secrets")
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise EnvironmentSetupFailed("the server's answer to the secrets request is malformed")
        return {str(k): v for k, v in values.items()}

    async def post(self, path: str, body: dict[str, Any], *, attempts: int) -> dict[str, Any]:
        """POST with retries on connection errors and 5xx; 404/409 mean the lease is gone."""
        backoff = Backoff(*self.backoff)
        for attempt in range(1, attempts + 1):
            try:
                response = await self._http().post(
                    f"{API_PREFIX}{path}", json={**body, "worker_id": self.worker_id}
                )
                if response.status_code in (404, 409):
                    raise LeaseLost(_detail(response))
                return _json_or_raise(response, path)
            except (httpx.TransportError, ServerUnavailable):
                if attempt == attempts:
                    raise
                await asyncio.sleep(backoff.next_delay())
        raise AssertionError("unreachable")

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("the worker is not running")
        return self._client


class HttpChannel:
    """:class:`factoryctl.worker.execution.RunChannel` over the worker HTTP API."""

    REPORT_ATTEMPTS = 12  # ~1-2 minutes with the default backoff: outlives a server restart

    def __init__(self, worker: RemoteWorker, run_id: str) -> None:
        self.worker = worker
        self.run_id = run_id

    async def heartbeat(self, *, start: bool) -> HeartbeatReply:
        body: dict[str, Any] = {"state": "INPROGRESS"} if start else {}
        data = await self.worker.post(f"/runs/{self.run_id}/heartbeat", body, attempts=5 if start else 1)
        followups = data.get("followups")
        state = data.get("state")
        return HeartbeatReply(
            cancel_requested=bool(data.get("cancel_requested")),
            followups=list(followups) if isinstance(followups, list) else [],
            state=state if isinstance(state, str) else None,
        )

    async def send_logs(self, lines: Sequence[LogLine]) -> None:
        for start in range(0, len(lines), LOG_BATCH):
            batch = lines[start : start + LOG_BATCH]
            body = {"lines": [{"stream": stream, "text": text} for stream, text in batch]}
            await self.worker.post(f"/runs/{self.run_id}/logs", body, attempts=3)

    async def report(self, outcome: Outcome) -> None:
        await self.worker.post(f"/runs/{self.run_id}/state", outcome.to_dict(), attempts=self.REPORT_ATTEMPTS)


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    detail = data.get("detail") if isinstance(data, dict) else None
    return f"HTTP {response.status_code}: {detail}" if detail else f"HTTP {response.status_code}"


def _json_or_raise(response: httpx.Response, what: str) -> dict[str, Any]:
    if response.status_code >= 500 or response.status_code == 429:
        raise ServerUnavailable(f"{what}: {_detail(response)}")
    if response.status_code in (401, 403):
        raise FatalWorkerError(f"{what}: the server refused this worker's key ({_detail(response)})")
    if response.status_code >= 400:
        raise FatalWorkerError(f"{what}: {_detail(response)}")
    try:
        data = response.json()
    except ValueError as exc:
        raise ServerUnavailable(f"{what}: the answer is not JSON") from exc
    if not isinstance(data, dict):
        raise ServerUnavailable(f"{what}: the answer is not a JSON object")
    return data
