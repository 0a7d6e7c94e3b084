"""Helpers for the fault tests (``test_faults.py``): real faults, injected from outside the server.

- :class:`TcpProxy` forwards a loopback port to PostgreSQL and can be **cut** (every connection reset,
  new ones refused) and **restored**: to ``serve`` this is the database going down and coming back,
  without stopping the machine's shared PostgreSQL cluster. It runs its own event loop on a thread, so
  nothing the test does on its own loop can stall the database traffic.
- :class:`SmallDisk` is a directory on a 4 MiB tmpfs, for the disk-full test; :func:`limit_file_size`
  is the fallback where mounting is not allowed (``RLIMIT_FSIZE`` on the server process).
- :class:`ServeProcess` is ``factoryctl serve --workers 0`` in its own process group, started and
  awaited from async tests; :func:`seed_webhook` writes a token webhook routed to one automation.
- :func:`post_delivery` sends one delivery with a bound on its wait and records the outcome;
  :class:`Load` keeps several senders posting until told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import builders
from serve_support import free_port

from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, session_factory

TOKEN = "fault-test-token-value"
CLI = (sys.executable, "-m", "factoryctl.cli")


class TcpProxy:
    """``127.0.0.1:port`` -> ``target``, with :meth:`cut` and :meth:`restore` (thread-safe, blocking)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def cut(self) -> None:
        """Refuse new connections and reset every open one, as a database that crashed or stopped does."""
        self._call(self._cut())

    def restore(self) -> None:
        self._call(self._listen())

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        self._loop.close()

    async def _shutdown(self) -> None:
        await self._cut()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._client, "127.0.0.1", self.port, reuse_address=True
            )

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            _abort(writer)
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        self._writers.difference_update((writer, up_writer))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (OSError, RuntimeError):
        pass
    finally:
        _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once, with a reset (no FIN handshake to wait for): the peer sees the connection die."""
    with contextlib.suppress(Exception):
        writer.transport.abort()


class SmallDisk:
    """A directory on a 4 MiB tmpfs (mounted for the test, unmounted after); None when mounting is not
    allowed here (not root, no CAP_SYS_ADMIN): the caller falls back to ``RLIMIT_FSIZE``."""

    SIZE = "4m"  # room for the migrated store and, once the filler goes, a few more deliveries

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def mount(cls, path: Path) -> SmallDisk | None:
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return None
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={cls.SIZE},mode=0700", "tmpfs", str(path)],
            capture_output=True,
            check=False,
        )
        return cls(path) if done.returncode == 0 else None

    def fill(self) -> Path:
        """Write a filler file until the filesystem is full; its path (delete it to free the space)."""
        filler = self.path / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):  # unbuffered: ENOSPC ends it here, not in a later flush
                pass
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        return filler

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)


def limit_file_size(max_bytes: int) -> Callable[[], None]:
    """A ``preexec_fn`` capping every file the child writes at ``max_bytes`` (``RLIMIT_FSIZE``), with
    SIGXFSZ ignored so a write past it fails with EFBIG, as a write to a full disk fails with ENOSPC."""

    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return apply


@dataclass
class ServeProcess:
    """``factoryctl serve --workers 0`` as a subprocess in its own process group, output in ``log``."""

    data_dir: Path
    log: Path
    secret_key: str
    database: str | None = None
    port: int = field(default_factory=free_port)
    preexec_fn: Callable[[], None] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> subprocess.Popen[bytes]:
        args = [*CLI, "--data-dir", str(self.data_dir)]
        args += ["--database", self.database] if self.database else []
        args += ["serve", "--port", str(self.port), "--workers", "0", "--delivery-rate-limit", "1000000"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        env.update(FACTORY_SECRET_KEY=self.secret_key, FACTORY_DB_CONNECT_ATTEMPTS="3")
        env["FACTORY_CONTEXT"] = "none"  # never a CLI context `make run` left in the checkout
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                args,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=self.preexec_fn,  # only resource limits, set before exec
            )
        return self.proc

    async def wait_ready(self, within: float = 20.0) -> None:
        """Until ``GET /healthz`` answers 200; fails with the log if the process exits first."""

        async def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited ({self.proc.returncode}):\n{self.log_text()}")
            try:
                async with aiohttp.ClientSession() as http, http.get(f"{self.url}/healthz") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await wait_until(up, within, f"serve on {self.url} ready", self.log_text)

    async def wait_exit(self, within: float) -> int:
        """The exit code, awaited without blocking the loop; fails after ``within`` seconds."""
        assert self.proc is not None
        proc = self.proc

        async def gone() -> bool:
            return proc.poll() is not None

        await wait_until(gone, within, "serve exited", self.log_text)
        return int(proc.returncode)

    def stop(self) -> None:
        """SIGTERM, if it still runs (await :meth:`wait_exit` for the outcome)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the whole process group (whatever is left of it)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines the server wrote so far."""
        records = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
        return records


async def wait_until(
    condition: Callable[[], Awaitable[bool]], within: float, what: str, logs: Callable[[], str] = str
) -> None:
    """Await ``condition()`` every 50 ms until it is true; fail after ``within`` seconds (with ``logs()``)."""
    deadline = time.monotonic() + within
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s\n{logs()}")
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class Seeded:
    webhook_uid: str
    automation_uid: str


async def seed_webhook(url: str, secret_key: str) -> Seeded:
    """A token webhook (``TOKEN``) with one automation that starts a run for every delivery."""
    engine = create_engine(url)
    clock, box = SystemClock(), SecretBox.from_setting(secret_key)
    try:
        async with session_factory(engine)() as s, s.begin():
            team = await builders.team(s)
            info = await builders.secret(s, box, clock, team.id, "fault-secret", TOKEN)
            factory = await builders.factory(s, clock, team.id, "faults")
            hook = await builders.webhook(
                s,
                clock,
                team.id,
                factory.uid,
                "stream",
                secret_name="fault-secret",
                secret_version=info.version,
            )
            auto = await builders.automation(
                s, clock, team.id, factory.uid, "all", [builders.webhook_trigger([hook.uid])]
            )
            return Seeded(hook.uid, auto.uid)
    finally:
        await engine.dispose()


@dataclass(frozen=True)
class Outcome:
    """One delivery attempt: the status (None: no answer), the answer's headers and decoded body, when it
    was sent and answered (``time.monotonic()``) and the client-side error when there was no answer."""

    n: int
    status: int | None
    sent: float
    answered: float
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    error: str | None = None

    @property
    def seconds(self) -> float:
        return self.answered - self.sent


async def post_delivery(
    http: aiohttp.ClientSession, url: str, n: int, *, bound: float = 10.0, size: int = 0
) -> Outcome:
    """POST delivery ``d-N`` (``size`` bytes of padding) with the webhook token; never raises and never
    waits longer than ``bound`` seconds."""
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Factory-Delivery-Id": f"d-{n}"}
    sent = time.monotonic()
    try:
        async with http.post(
            url,
            json={"n": n, "pad": "x" * size},
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=bound),
        ) as resp:
            raw = await resp.read()
            body = json.loads(raw) if raw else None
            return Outcome(n, resp.status, sent, time.monotonic(), dict(resp.headers), body)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        return Outcome(n, None, sent, time.monotonic(), error=type(exc).__name__)


class Load:
    """``senders`` concurrent senders posting deliveries ``d-0``, ``d-1``, ... until the block exits;
    every outcome is kept. A sender pauses briefly after an answer that is not a 202, as a real sender
    backs off, so an outage is not a busy loop."""

    def __init__(self, url: str, *, senders: int = 4, timeout: float = 10.0) -> None:
        self.url, self.senders, self.timeout = url, senders, timeout
        self.outcomes: list[Outcome] = []
        self._next = itertools.count()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Load:
        self._http = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._sender(self._http)) for _ in range(self.senders)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stopping = True
        await asyncio.wait_for(asyncio.gather(*self._tasks), self.timeout + 5)
        if self._http is not None:
            await self._http.close()

    async def _sender(self, http: aiohttp.ClientSession) -> None:
        while not self._stopping:
            outcome = await post_delivery(http, self.url, next(self._next), bound=self.timeout)
            self.outcomes.append(outcome)
            if outcome.status != 202:
                await asyncio.sleep(0.02)

    def count(self, status: int | None, *, sent_after: float = 0.0) -> int:
        return sum(1 for o in self.outcomes if o.status == status and o.sent >= sent_after)

    async def wait_for(self, status: int | None, n: int, within: float, *, sent_after: float = 0.0) -> None:
        """Until ``n`` answers with ``status`` came back for deliveries sent after ``sent_after``."""

        async def enough() -> bool:
            return self.count(status, sent_after=sent_after) >= n

        await wait_until(enough, within, f"{n} answers {status}", lambda: f"answers so far: {self.summary()}")

    def summary(self) -> dict[str | int, int]:
        counts: dict[str | int, int] = {}
        for o in self.outcomes:
            key: str | int = o.status if o.status is not None else f"no answer ({o.error})"
            counts[key] = counts.get(key, 0) + 1
        return counts

    def acknowledged(self) -> set[str]:
        """The delivery IDs the server answered 202 for."""
        return {str(o.body["delivery_id"]) for o in self.outcomes if o.status == 202}
