"""``factoryctl worker`` as a subprocess against a real ``factoryctl serve`` subprocess.

Beside the happy path, the retry policy's promises as an operator sees them (docs/workers.md): the
worker waits out a server that is down, a run's outcome outlives a server restart, and a refused
key stops the worker with exit code 1. Every wait is on a condition, with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from serve_support import free_port

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "factoryctl.cli"]
HOST = "myhost"
FINISHED = ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED")
T = TypeVar("T")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
    env.update(extra)
    return env


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def wait_until(
    condition: Callable[[], T | None],
    what: str,
    *,
    within: float = 30.0,
    alive: Sequence[subprocess.Popen[bytes]] = (),
    logs: Sequence[Path] = (),
) -> T:
    """The first truthy ``condition()``; fails at the deadline or as soon as a process in ``alive`` exits."""
    deadline = time.monotonic() + within

    def context() -> str:
        return "".join(f"\n--- {log.name}:\n{log.read_text()}" for log in logs if log.exists())

    while True:
        value = condition()
        if value:
            return value
        for proc in alive:
            if proc.poll() is not None:
                pytest.fail(f"{proc.args!r} exited ({proc.returncode}) while waiting for {what}{context()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what}{context()}")
        time.sleep(0.05)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Served:
    """A ``factoryctl serve --workers 0`` subprocess (no service workers: runs wait for ours)."""

    data_dir: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Served:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*CLI, "--data-dir", str(self.data_dir), "serve", "--port", str(self.port), "--workers", "0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_clean_env(),
                start_new_session=True,
            )
        wait_until(
            lambda: _healthy(self.url), "factoryctl serve to start", alive=[self.proc], logs=[self.log]
        )
        return self

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {(self.data_dir / 'admin.key').read_text().strip()}"}

    def worker_key(self, host: str = HOST) -> str:
        args = ["keys", "create", "--name", "laptop", "--role", "worker", "--worker-host", host]
        created = subprocess.run(
            [*CLI, "--data-dir", str(self.data_dir), *args],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=60,
            check=True,
        )
        return created.stdout.strip().splitlines()[-1]

    def create_run(self, prompt: str, host: str = HOST) -> str:
        resp = httpx.post(
            f"{self.url}/api/v1/agent/run",
            json={"prompt": prompt, "config": {"worker_host": host}},
            headers=self.admin,
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        return str(resp.json()["run_id"])

    def run(self, run_id: str) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(
            f"{self.url}/api/v1/agent/runs/{run_id}", headers=self.admin, timeout=10
        ).json()
        return data

    def logs(self, run_id: str) -> list[dict[str, Any]]:
        data = httpx.get(f"{self.url}/api/v1/agent/runs/{run_id}/logs", headers=self.admin, timeout=10).json()
        return list(data["logs"])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(tmp_path / "data", free_port(), tmp_path / "serve.log").start()
    try:
        yield server
    finally:
        server.stop()


def start_worker(url: str, key: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [*CLI, "worker", "--server", url, "--host-id", HOST, *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(FACTORY_API_KEY=key),
            start_new_session=True,
        )


def test_self_hosted_worker_executes_a_run_routed_to_its_host(served: Served, tmp_path: Path) -> None:
    run_id = served.create_run("hello from the e2e test")
    worker_log = tmp_path / "worker.log"
    worker = start_worker(
        served.url,
        served.worker_key(),
        worker_log,
        *("--harness", "command", "--command", "bash -c 'cat; echo done'"),
        *("--workspace-root", str(tmp_path / "ws")),
    )
    try:
        run = wait_until(
            lambda: (found := served.run(run_id))["state"] in FINISHED and found,
            "the run to finish",
            alive=[worker],
            logs=[worker_log],
        )
        assert run["state"] == "SUCCEEDED", worker_log.read_text()
        stdout = "\n".join(x["text"] for x in served.logs(run_id) if x["stream"] == "stdout")
        assert stdout == "hello from the e2e testdone"  # the prompt on stdin (no newline), then "done"
    finally:
        assert _stop(worker) == 0  # SIGTERM: a clean stop


def test_a_run_outcome_outlives_a_server_restart(served: Served, tmp_path: Path) -> None:
    release = tmp_path / "release"
    run_id = served.create_run("before the restart")
    worker_log = tmp_path / "worker.log"
    worker = start_worker(
        served.url,
        served.worker_key(),
        worker_log,
        *("--harness", "command", "--workspace-root", str(tmp_path / "ws")),
        *("--command", f"cat; echo; while [ ! -e {release} ]; do sleep 0.05; done"),
    )
    try:
        wait_until(
            lambda: served.run(run_id)["state"] == "INPROGRESS",
            "the worker to start the run",
            alive=[worker],
            logs=[worker_log],
        )
        served.stop()
        release.touch()  # the run ends while the server is down
        wait_until(
            lambda: f"retrying POST /api/v1/workers/runs/{run_id}/state" in worker_log.read_text(),
            "the worker to retry its final report",
            alive=[worker],
            logs=[worker_log],
        )
        served.start()  # same port, same data directory
        run = wait_until(
            lambda: (found := served.run(run_id))["state"] in FINISHED and found,
            "the report to land",
            alive=[worker],
            logs=[worker_log, served.log],
        )
        assert run["state"] == "SUCCEEDED", worker_log.read_text()
    finally:
        release.touch()
        assert _stop(worker) == 0


def test_a_refused_key_stops_the_worker_with_exit_1(served: Served, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(served.url, "fk_not_a_key", log)
    try:
        assert worker.wait(timeout=30) == 1, log.read_text()
    finally:
        _stop(worker)
    assert "worker stopped: the server refused this worker's key (401" in log.read_text()


def test_worker_without_a_key_explains_what_is_missing() -> None:
    result = subprocess.run(
        [*CLI, "worker", "--server", "http://127.0.0.1:9", "--host-id", HOST],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=60,
    )
    assert result.returncode == 2
    assert "FACTORY_API_KEY" in result.stderr


def test_worker_retries_while_the_server_is_down(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(f"http://127.0.0.1:{free_port()}", "fk_nothing", log)
    try:
        retry = "retrying POST /api/v1/workers/claim"
        # backing off, not crashing: it keeps asking, with growing pauses
        wait_until(
            lambda: log.read_text().count(retry) >= 3, "three claim retries", alive=[worker], logs=[log]
        )
        assert worker.poll() is None, log.read_text()
    finally:
        assert _stop(worker) == 0  # SIGTERM while backing off: a clean stop
