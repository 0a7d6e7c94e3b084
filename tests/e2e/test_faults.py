"""Fault tests: what ``factoryctl serve`` does when the database, the disk, a worker or the process itself
fails, with real faults injected from outside (docs/operations.md, "Faults and recovery").

- PostgreSQL goes down under ingress load (a proxy between ``serve`` and PostgreSQL is cut, then
  restored): every answer while it is down is a 503 problem+json with ``Retry-After`` - no 500, no
  hang - 202s resume without a restart, and every acknowledged delivery is in the log.
- The disk under a SQLite store fills up: 503s, no 500; once space is back, 202s resume and the
  database passes ``PRAGMA integrity_check`` with every acknowledged delivery in it.
- A self-hosted worker is ``kill -9``ed mid-run: its lease lapses and the reaper ends the run ERROR
  ``resource_unavailable`` (retryable); a claim whose worker died before starting goes back to the queue.
  A database outage longer than a lease does not cost a live worker its run.
- ``serve`` gets SIGTERM in the middle of a burst: requests being handled complete, it exits 0, and
  exactly the acknowledged deliveries are in the log; a pending claim long poll does not hold the exit.

Every wait is on a condition with a deadline; the PostgreSQL cases use a scratch database of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import builders
import pytest
from aiohttp import web
from cryptography.fernet import Fernet
from fault_support import (
    CLI,
    Load,
    Outcome,
    ServeProcess,
    SmallDisk,
    TcpProxy,
    limit_file_size,
    post_delivery,
    seed_webhook,
    wait_until,
)
from serve_support import free_port
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import create_app
from api.claims.reaper import lease_reaper
from api.context import ServerSettings
from factoryctl.serve.runtime import DRAIN_SECONDS
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine
from store.models import Delivery, Run

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.slow
ANSWER_BOUND = 5.0  # no request may wait longer than this for its answer, even with the database down
PROBLEM_JSON = "application/problem+json"


def _assert_unavailable(outcome: Outcome) -> None:
    """A well-formed store-outage answer: 503 problem+json, retryable, with a numeric Retry-After."""
    assert outcome.status == 503, outcome
    assert outcome.headers.get("Content-Type", "").startswith(PROBLEM_JSON), outcome
    assert outcome.headers.get("Retry-After", "").isdigit(), outcome
    assert outcome.body["error_code"] == "resource_unavailable", outcome
    assert outcome.body["retryable"] is True, outcome


async def _accepted(url: str) -> set[str]:
    """The delivery IDs logged as Accepted."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(select(Delivery.delivery_id).where(Delivery.status == "Accepted"))
            return {str(r[0]) for r in rows}
    finally:
        await engine.dispose()


def _acknowledged(outcomes: list[Outcome]) -> set[str]:
    return {str(o.body["delivery_id"]) for o in outcomes if o.status == 202}


def _no_tracebacks(serve: ServeProcess) -> None:
    text = serve.log_text()
    assert "Traceback" not in text and "unhandled error" not in text, text[-4000:]


# --- PostgreSQL down and back under ingress load --------------------------------------------------


async def test_postgres_outage_under_load_answers_503_and_recovers(pg_url: str, tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    seeded = await seed_webhook(pg_url, key)
    target = make_url(pg_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432).start()
    through_proxy = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    serve = ServeProcess(tmp_path / "data", tmp_path / "serve.log", key, database=through_proxy)
    serve.start()
    try:
        await serve.wait_ready()
        async with Load(f"{serve.url}/webhooks/w/{seeded.webhook_uid}", senders=6) as load:
            await load.wait_for(202, 30, within=20)
            proxy.cut()
            cut_at = time.monotonic()
            await load.wait_for(503, 30, within=15, sent_after=cut_at)
            async with aiohttp.ClientSession() as http, http.get(f"{serve.url}/readyz") as resp:
                assert resp.status == 503
            proxy.restore()
            restored_at = time.monotonic()
            await load.wait_for(202, 30, within=20, sent_after=restored_at)
        assert serve.proc is not None and serve.proc.poll() is None, "serve must recover without a restart"
    finally:
        serve.kill()
        proxy.close()

    outcomes = load.outcomes
    assert {o.status for o in outcomes} <= {202, 503}, load.summary()
    assert max(o.seconds for o in outcomes) < ANSWER_BOUND
    down = [o for o in outcomes if cut_at < o.sent and o.answered < restored_at]
    assert down and all(o.status == 503 for o in down), load.summary()
    for outcome in outcomes:
        if outcome.status == 503:
            _assert_unavailable(outcome)
    acknowledged = load.acknowledged()
    missing = acknowledged - await _accepted(pg_url)
    assert not missing, f"acknowledged but not logged: {sorted(missing)[:10]}"
    _no_tracebacks(serve)
    assert "store unavailable on POST /webhooks/w/{uid}" in serve.log_text()


# --- disk full under a SQLite store ---------------------------------------------------------------


@contextlib.contextmanager
def _limited_data_dir(path: Path, how: str) -> Iterator[SmallDisk | None]:
    """``tmpfs``: the directory is a 4 MiB filesystem (skipped where mounting is not allowed); ``rlimit``:
    an ordinary directory, the server's file sizes are capped instead."""
    disk = SmallDisk.mount(path) if how == "tmpfs" else None
    if how == "tmpfs" and disk is None:
        pytest.skip("cannot mount a tmpfs here; the rlimit case fails the same writes")
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield disk
    finally:
        if disk is not None:
            disk.unmount()


@pytest.mark.parametrize("how", ["tmpfs", "rlimit"])
async def test_sqlite_disk_full_answers_503_without_corruption(
    how: str, tmp_path: Path, sqlite_template: Path
) -> None:
    """The disk fills up under a running server: ``tmpfs``, a 4 MiB filesystem filled by the test (ENOSPC,
    SQLite's "database or disk is full"), then freed: the same process accepts again. ``rlimit``, for
    sessions that may not mount: ``RLIMIT_FSIZE`` caps the server's files, so writes past it fail with
    EFBIG (SQLite's "disk I/O error") - the same failed write through the same path; the limit goes only
    with the process, so recovery is a restart without it."""
    key = Fernet.generate_key().decode()
    data_dir = tmp_path / "data"
    with _limited_data_dir(data_dir, how) as disk:
        db = data_dir / "factory.db"
        shutil.copyfile(sqlite_template, db)
        url = f"sqlite+aiosqlite:///{db}"
        seeded = await seed_webhook(url, key)
        limit = limit_file_size(db.stat().st_size + 1024 * 1024) if disk is None else None
        serve = ServeProcess(data_dir, tmp_path / "serve.log", key, preexec_fn=limit)
        serve.start()
        ingress = f"{serve.url}/webhooks/w/{seeded.webhook_uid}"
        numbers = iter(range(1_000_000))
        outcomes: list[Outcome] = []
        try:
            await serve.wait_ready()
            async with aiohttp.ClientSession() as http:
                for _ in range(10):
                    outcomes.append(await post_delivery(http, ingress, next(numbers), size=8 * 1024))
                assert {o.status for o in outcomes} == {202}, outcomes
                filler = disk.fill() if disk is not None else None
                refused: list[Outcome] = []  # pages SQLite already holds are reused first: wait for a streak
                while len(refused) < 5:
                    assert len(outcomes) < 300, "the disk never filled up"
                    outcome = await post_delivery(http, ingress, next(numbers), size=32 * 1024)
                    outcomes.append(outcome)
                    refused = [*refused, outcome] if outcome.status != 202 else []
                for outcome in refused:
                    _assert_unavailable(outcome)
                if filler is not None:
                    filler.unlink()
                else:
                    serve.stop()
                    assert await serve.wait_exit(20) == 0
                    serve.preexec_fn = None
                    serve.start()
                    await serve.wait_ready()
                after = [await post_delivery(http, ingress, next(numbers), size=8 * 1024) for _ in range(5)]
                outcomes += after
                assert {o.status for o in after} == {202}, after
        finally:
            serve.stop()
            try:
                await serve.wait_exit(20)
            finally:
                serve.kill()
        assert {o.status for o in outcomes} <= {202, 503}, outcomes
        assert max(o.seconds for o in outcomes) < ANSWER_BOUND
        _no_tracebacks(serve)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert _acknowledged(outcomes) <= await _accepted(url)


# --- a worker killed mid-run ----------------------------------------------------------------------

HOST = "fault-host"
LEASE_SECONDS = 2.0


@contextlib.asynccontextmanager
async def _worker_protocol_app(engine: AsyncEngine, box: SecretBox, data_dir: Path) -> AsyncIterator[str]:
    """The worker-protocol app with a short lease and a fast reaper, on a loopback port; its URL."""
    app = create_app(
        ServerSettings(data_dir=data_dir, lease_seconds=LEASE_SECONDS),
        engine,
        box,
        lifecycles=[lease_reaper(interval_seconds=0.25)],
        route_modules=("api.ops", "api.runs.routes", "api.claims.routes"),
    )
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def control_plane(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> AsyncIterator[str]:
    async with _worker_protocol_app(engine, box, tmp_path) as url:
        yield url


async def _queue_run(sessions: async_sessionmaker[AsyncSession]) -> tuple[str, str]:
    """A run for :data:`HOST` and a worker key for it."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, clock, team.id, "worker", worker_hosts=[HOST])
        run = await builders.run(s, clock, team.id, worker_host=HOST, prompt="take a minute")
        return run.run_id, key


async def _run(sessions: async_sessionmaker[AsyncSession], run_id: str) -> Run:
    async with sessions() as s:
        run = await s.get(Run, run_id)
        assert run is not None
        return run


async def _wait_run(
    sessions: async_sessionmaker[AsyncSession],
    run_id: str,
    check: Callable[[Run], bool],
    within: float,
    log: Path,
    what: str,
) -> Run:
    async def reached() -> bool:
        return check(await _run(sessions, run_id))

    await wait_until(reached, within, f"run {run_id}: {what}", lambda: log.read_text(errors="replace"))
    return await _run(sessions, run_id)


async def _wait_state(
    sessions: async_sessionmaker[AsyncSession], run_id: str, states: set[str], within: float, log: Path
) -> Run:
    return await _wait_run(sessions, run_id, lambda run: run.state in states, within, log, f"in {states}")


class _Worker:
    """``factoryctl worker --host-id HOST`` in its own process group; :meth:`kill` is ``kill -9`` of that
    group. A command harness runs in a session of its own, so it outlives that: the test ends it."""

    def __init__(self, url: str, key: str, tmp_path: Path, *harness: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        env["FACTORY_API_KEY"] = key
        env["FACTORY_CONTEXT"] = "none"  # never a CLI context `make run` left in the checkout
        self.log = tmp_path / "worker.log"
        args = [*CLI, "worker", "--server", url, "--host-id", HOST, "--workspace-root", str(tmp_path / "ws")]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*args, *harness],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.harness: list[int] = []

    async def wait_harness(self) -> None:
        """Until the harness process runs (it is a child of the worker)."""

        async def started() -> bool:
            self.harness = _children(self.proc.pid)
            return bool(self.harness)

        await wait_until(started, 10, "the harness process", lambda: self.log.read_text(errors="replace"))

    def failed_heartbeats(self) -> int:
        return self.log.read_text(errors="replace").count("heartbeat failed")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)

    def close(self) -> None:
        self.kill()
        for pid in self.harness:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


SLEEPER = ("--harness", "command", "--command", "sleep 60")


async def test_worker_killed_mid_run_ends_the_run_error_retryable(
    control_plane: str, sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    run_id, key = await _queue_run(sessions)
    worker = _Worker(control_plane, key, tmp_path, *SLEEPER)
    try:
        await _wait_state(sessions, run_id, {"INPROGRESS"}, 20, worker.log)
        await worker.wait_harness()
        worker.kill()
        killed_at = time.monotonic()
        run = await _wait_state(sessions, run_id, {"ERROR", "QUEUED"}, LEASE_SECONDS + 10, worker.log)
    finally:
        worker.close()
    assert run.state == "ERROR"
    assert run.status_message is not None
    assert run.status_message["error_code"] == "resource_unavailable"
    assert run.status_message["retryable"] is True
    assert run.lease_owner is None and run.finished_at is not None
    assert time.monotonic() - killed_at < LEASE_SECONDS + 5


async def test_claim_of_a_dead_worker_goes_back_to_the_queue(
    control_plane: str, sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    """A worker that dies between its claim and the start: the run is QUEUED again in its old place,
    and the next worker's claim counts another attempt and runs it."""
    run_id, key = await _queue_run(sessions)
    before = await _run(sessions, run_id)
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http,
        http.post(
            f"{control_plane}/api/v1/workers/claim",
            json={"worker_host": HOST, "wait_seconds": 0, "worker_id": "doomed"},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
    assert (await _run(sessions, run_id)).state == "CLAIMED"
    requeued = await _wait_state(sessions, run_id, {"QUEUED"}, LEASE_SECONDS + 10, tmp_path / "none.log")
    assert requeued.queued_at == before.queued_at and requeued.lease_owner is None
    worker = _Worker(control_plane, key, tmp_path)  # echo harness
    try:
        done = await _wait_state(sessions, run_id, {"SUCCEEDED", "FAILED", "ERROR"}, 20, worker.log)
    finally:
        worker.close()
    assert done.state == "SUCCEEDED"
    assert done.attempt == 2


async def test_postgres_outage_longer_than_a_lease_spares_a_live_worker(
    pg_url: str, box: SecretBox, tmp_path: Path
) -> None:
    """The database is down for longer than a lease while a worker runs a job. Its heartbeats got 503s,
    not a lost lease: once the database is back, the reaper must give it time to heartbeat instead of
    ending the run at its first pass. A worker that really died is still reaped after that."""
    target = make_url(pg_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432).start()
    through_proxy = create_engine(target.set(port=proxy.port).render_as_string(hide_password=False))
    direct = create_engine(pg_url)  # the test's own view, not through the proxy
    sessions = async_sessionmaker(direct, expire_on_commit=False)
    worker: _Worker | None = None
    try:
        run_id, key = await _queue_run(sessions)
        async with _worker_protocol_app(through_proxy, box, tmp_path) as url:
            worker = _Worker(url, key, tmp_path, *SLEEPER)
            await _wait_state(sessions, run_id, {"INPROGRESS"}, 20, worker.log)
            await worker.wait_harness()
            proxy.cut()
            running = await _run(sessions, run_id)
            assert running.lease_expires_at is not None
            lapsed = running.lease_expires_at + dt.timedelta(seconds=1)
            await wait_until(_after(lapsed), LEASE_SECONDS + 5, "the lease lapsed during the outage")
            # Back just after a failed heartbeat: the reaper's next pass comes long before the next beat.
            failed = worker.failed_heartbeats()
            await wait_until(_more(worker.failed_heartbeats, failed), 5, "another failed heartbeat")
            proxy.restore()
            restored = SystemClock().now()
            run = await _wait_run(
                sessions,
                run_id,
                lambda r: r.state != "INPROGRESS" or (r.lease_expires_at or restored) > restored,
                LEASE_SECONDS + 5,
                worker.log,
                "a heartbeat after the outage, or the reaper",
            )
            assert run.state == "INPROGRESS", run.status_message
            assert worker.proc.poll() is None
            worker.kill()  # now it is really gone: reaped after its lease
            run = await _wait_state(sessions, run_id, {"ERROR"}, 3 * LEASE_SECONDS + 5, worker.log)
            assert run.status_message is not None
            assert run.status_message["error_code"] == "resource_unavailable"
    finally:
        if worker is not None:
            worker.close()
        proxy.close()
        await through_proxy.dispose()
        await direct.dispose()


def _more(count: Callable[[], int], than: int) -> Callable[[], Awaitable[bool]]:
    async def more() -> bool:
        return count() > than

    return more


def _after(moment: dt.datetime) -> Callable[[], Awaitable[bool]]:
    async def passed() -> bool:
        return SystemClock().now() > moment

    return passed


# --- SIGTERM in the middle of a burst -------------------------------------------------------------


async def test_sigterm_during_a_burst_drains_in_flight_requests(db_url: str, tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    seeded = await seed_webhook(db_url, key)
    serve = ServeProcess(tmp_path / "data", tmp_path / "serve.log", key, database=db_url)
    serve.start()
    ingress = f"{serve.url}/webhooks/w/{seeded.webhook_uid}"
    try:
        await serve.wait_ready()
        signalled = asyncio.Event()
        sigterm_at = 0.0
        acked = 0

        async def send(http: aiohttp.ClientSession, n: int) -> Outcome:
            nonlocal acked, sigterm_at
            outcome = await post_delivery(http, ingress, n)
            if outcome.status == 202:
                acked += 1
                if acked == 40 and serve.proc is not None:  # others are being handled right now
                    serve.proc.send_signal(signal.SIGTERM)
                    sigterm_at = time.monotonic()
                    signalled.set()
            return outcome

        connector = aiohttp.TCPConnector(limit=48)
        async with aiohttp.ClientSession(connector=connector) as http:
            outcomes = await asyncio.gather(*(send(http, n) for n in range(400)))
        assert signalled.is_set(), "the burst ended before the signal"
        assert await serve.wait_exit(DRAIN_SECONDS) == 0
    finally:
        serve.kill()

    statuses = {o.status for o in outcomes}
    assert statuses <= {202, None}, statuses  # no 5xx: a request either completes or never started
    drained = [o for o in outcomes if o.status == 202 and o.answered > sigterm_at]
    assert drained, "no request was in flight at SIGTERM"
    unanswered = [o for o in outcomes if o.status is None]
    assert unanswered, "SIGTERM must land mid-burst"
    # Exactly the acknowledged deliveries were committed: nothing acknowledged was lost, and no handler was
    # cut off between its commit and its 202.
    assert await _accepted(db_url) == _acknowledged(outcomes)

    serve.start()  # a restarted server takes the sender's retries of everything unanswered
    try:
        await serve.wait_ready()
        async with aiohttp.ClientSession() as http:
            retried = await asyncio.gather(*(post_delivery(http, ingress, o.n) for o in unanswered))
        assert {o.status for o in retried} == {202}
    finally:
        serve.stop()
        await serve.wait_exit(20)
    assert await _accepted(db_url) == {f"d-{o.n}" for o in outcomes}
    _no_tracebacks(serve)


async def test_sigterm_does_not_wait_out_a_claim_long_poll(tmp_path: Path) -> None:
    """A worker's claim long poll (up to 30 s) is what an in-flight request can make a drain wait for:
    it is cut at the drain bound, and the worker retries it elsewhere."""
    serve = ServeProcess(tmp_path / "data", tmp_path / "serve.log", Fernet.generate_key().decode())
    serve.start()
    try:
        await serve.wait_ready()
        sent = asyncio.Event()

        async def headers_sent(*_: object) -> None:
            sent.set()

        tracing = aiohttp.TraceConfig()
        tracing.on_request_headers_sent.append(headers_sent)
        key = (serve.data_dir / "admin.key").read_text().strip()
        async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {key}"}, trace_configs=[tracing]
        ) as http:

            async def long_poll() -> float:
                with contextlib.suppress(aiohttp.ClientError):
                    body = {"worker_host": "idle", "wait_seconds": 30}
                    async with http.post(f"{serve.url}/api/v1/workers/claim", json=body):
                        pass
                return time.monotonic()

            polling = asyncio.create_task(long_poll())
            await asyncio.wait_for(sent.wait(), 5)
            async with http.get(f"{serve.url}/healthz") as resp:  # the claim is being handled by now
                assert resp.status == 200
            assert serve.proc is not None
            serve.proc.send_signal(signal.SIGTERM)
            sigterm_at = time.monotonic()
            assert await serve.wait_exit(DRAIN_SECONDS + 10) == 0
            assert time.monotonic() - sigterm_at < DRAIN_SECONDS + 3
            assert await polling > sigterm_at + 1, "the long poll was not in flight at SIGTERM"
    finally:
        serve.kill()
    _no_tracebacks(serve)
