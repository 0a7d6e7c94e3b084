"""Helpers shared by e2e tests that run ``factoryctl`` as a subprocess.

- :func:`run_cli` runs one command to completion (``python -m factoryctl.cli ARGS``, output captured as
  text, stdin empty unless given), in :func:`clean_env`: the caller's own ``FACTORY_*`` settings never
  leak into the command under test.
- :func:`running` keeps a long-running command (``watch``, ``worker``) in the background, in its own
  process group with its output in a log file, and :func:`stop` ends it.
- :func:`serving` is :func:`running` for ``factoryctl serve``: it waits until ``/healthz`` answers and
  yields a :class:`Served` (URL, admin key, process, data directory, log).
- :func:`committed` reads back what the processes left in the store.

Tests wait on something they can observe (an API answer, a log record), never for a fixed time:
:func:`wait_for` polls a condition until a deadline (failing early, with the logs, when a process it
watches exits), :func:`reconcile_records` reads the reconcile loop's JSON log records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute

from store.db import create_engine

T = TypeVar("T")
CLI = (sys.executable, "-m", "factoryctl.cli")
ADMIN_KEY_FILE = "admin.key"  # written by ``serve`` into its data directory on a store with no keys
Env = Mapping[str, str | None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: Env | None = None, *, drop: tuple[str, ...] = ("FACTORY_",)) -> dict[str, str]:
    """This process's environment without the variables whose names start with one of ``drop``, then
    ``extra`` (a ``None`` value removes that variable). ``FACTORY_CONTEXT=none``: a CLI context that
    ``make run`` left in the checkout never reaches a command under test (``extra`` may name one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["FACTORY_CONTEXT"] = "none"
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_cli(
    *args: str | Path,
    env: Env | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
    timeout: float = 120.0,
    drop: tuple[str, ...] = ("FACTORY_",),
) -> subprocess.CompletedProcess[str]:
    """``factoryctl ARGS`` as a subprocess, to completion: stdout and stderr captured as text, ``stdin``
    as its input (empty when None), in ``clean_env(env, drop=drop)``."""
    return subprocess.run(
        [*CLI, *map(str, args)],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        env=clean_env(env, drop=drop),
        cwd=cwd,
        timeout=timeout,
    )


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """End a process started by :func:`running` and return its exit code: SIGTERM (its own shutdown
    stops what it started), SIGKILL to its whole process group if it is still there after ``timeout``
    seconds, and SIGKILL to whatever of the group outlived it. Stopping a stopped process is a no-op."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
    _kill_group(proc)
    return proc.returncode


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def running(*args: str | Path, log: Path, env: Env | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``factoryctl ARGS`` in the background, in its own process group, in ``clean_env(env)``, with
    stdout and stderr appended to ``log``; stopped with :func:`stop` on exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*CLI, *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(env),
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        stop(proc)


@dataclass
class Served:
    """A running ``factoryctl serve``: its base URL, process, data directory and log."""

    url: str
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log: Path
    key_file: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def key(self) -> str:
        """The admin key ``serve`` wrote on its first start (read when asked: a server sharing another's
        store writes none)."""
        return self.key_file.read_text().strip()

    def stop(self) -> int:
        return stop(self.proc)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``method path`` with the admin key and ``body`` as JSON; the status and the decoded answer."""
        resp = httpx.request(
            method,
            self.url + path,
            json=body,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=10,
        )
        return resp.status_code, resp.json() if resp.content else None

    def get(self, path: str) -> Any:
        """``GET path`` as the admin; the decoded answer, which must be a 200."""
        status, body = self.request("GET", path)
        assert status == 200, f"GET {path}: {status} {body}"
        return body

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.request("POST", path, {} if body is None else body)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def serving(
    data_dir: Path,
    *args: str | Path,
    env: Env | None = None,
    workers: int = 0,
    log: Path | None = None,
    port: int | None = None,
    database: str | None = None,
    key_file: Path | None = None,
    timeout: float = 30.0,
) -> Iterator[Served]:
    """``factoryctl --data-dir DATA_DIR [--database URL] serve --port PORT --workers N ARGS`` under
    :func:`running`, once ``GET /healthz`` answers 200; fails with the server's log if it exits or does not
    answer within ``timeout`` seconds.

    ``port`` None picks a free one (give the previous one to restart a server where its clients expect
    it); ``log`` defaults to ``DATA_DIR/serve-PORT.log`` (appended to, so a restart keeps the history);
    ``key_file`` is where the admin key is read (default ``DATA_DIR/admin.key``).
    """
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = log or data_dir / f"serve-{port}.log"
    command = [
        "--data-dir",
        data_dir,
        *(["--database", database] if database else []),
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
        *args,
    ]
    with running(*command, log=log, env=env) as proc:
        served = Served(
            f"http://127.0.0.1:{port}", proc, data_dir, log, key_file or data_dir / ADMIN_KEY_FILE
        )
        wait_for(
            lambda: _healthy(served.url),
            timeout,
            f"factoryctl serve answering {served.url}/healthz",
            alive=[proc],
            logs=[log],
        )
        yield served


def committed(url: str, *columns: InstrumentedAttribute[Any]) -> list[tuple[Any, ...]]:
    """The values of ``columns`` (of one table) in each row of the store at ``url``."""

    async def read() -> list[tuple[Any, ...]]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return [tuple(row) for row in (await conn.execute(select(*columns))).all()]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def wait_for(
    predicate: Callable[[], T | Literal[False] | None],
    timeout: float = 15.0,
    what: str = "condition",
    *,
    alive: Sequence[subprocess.Popen[bytes]] = (),
    logs: Sequence[Path] = (),
) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value; fail after ``timeout``
    seconds, or as soon as a process in ``alive`` exits, naming ``what`` was awaited and showing ``logs``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in alive:
            if proc.poll() is not None:
                command = " ".join(map(str, proc.args))  # type: ignore[arg-type]
                raise AssertionError(f"{what}: `{command}` exited ({proc.returncode}){_show(logs)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout}s{_show(logs)}")
        time.sleep(0.05)


def _show(logs: Sequence[Path]) -> str:
    return "".join(f"\n--- {log}:\n{log.read_text()}" for log in logs if log.exists())


def reconcile_records(log: Path) -> list[dict[str, Any]]:
    """The ``{"msg": "reconcile", ...}`` records a ``serve``/``watch`` process logged so far, in order
    (one per reconciled snapshot: ``outcome``, ``revision``, ``factory``...)."""
    records = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("msg") == "reconcile":
            records.append(record)
    return records


def run_events(served: Served, run_id: str) -> list[dict[str, Any]]:
    """A run's event stream from the start (it ends once the run is final): ``{kind, data}`` each, ``data``
    the event's own (the frame's JSON carries it beside id, run_id and created_at)."""
    resp = httpx.get(
        f"{served.url}/api/v1/agent/runs/{run_id}/events",
        headers={"Authorization": f"Bearer {served.key}", "Last-Event-ID": "0"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    out: list[dict[str, Any]] = []
    kind = None
    for line in resp.text.splitlines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: ") and kind is not None:
            out.append({"kind": kind, "data": json.loads(line[len("data: ") :])["data"]})
    return out


def log_records(log: Path) -> list[dict[str, Any]]:
    """The JSON-object lines of a server's log (other lines skipped)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(record)
    return out


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
