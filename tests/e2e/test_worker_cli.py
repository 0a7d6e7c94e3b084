"""``factoryctl worker`` as a subprocess against a real ``factoryctl serve`` subprocess.

Beside the happy path, the retry policy's promises as an operator sees them (docs/workers.md): the
worker waits out a server that is down, a run's outcome outlives a server restart, and a refused
key stops the worker with exit code 1. Every wait is on a condition, with a deadline.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from serve_support import Served, free_port, run_cli, running, serving, stop, wait_for

pytestmark = pytest.mark.slow
HOST = "myhost"
FINISHED = ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED")


def worker_key(served: Served, host: str = HOST) -> str:
    args = ["keys", "create", "--name", "laptop", "--role", "worker", "--worker-host", host]
    created = run_cli("--data-dir", served.data_dir, *args, timeout=60)
    assert created.returncode == 0, created.stderr
    return created.stdout.strip().splitlines()[-1]


def create_run(served: Served, prompt: str, host: str = HOST) -> str:
    status, body = served.post("/api/v1/agent/run", {"prompt": prompt, "config": {"worker_host": host}})
    assert status == 200, body
    return str(body["run_id"])


def finished(served: Served, run_id: str) -> dict[str, Any] | None:
    """The run once it is in a final state."""
    run: dict[str, Any] = served.get(f"/api/v1/agent/runs/{run_id}")
    return run if run["state"] in FINISHED else None


def run_logs(served: Served, run_id: str) -> list[dict[str, Any]]:
    return list(served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A ``factoryctl serve --workers 0`` subprocess (no service workers: runs wait for ours)."""
    with serving(tmp_path / "data", log=tmp_path / "serve.log") as server:
        yield server


def worker(url: str, key: str, log: Path, *extra: str) -> AbstractContextManager[subprocess.Popen[bytes]]:
    return running(
        "worker", "--server", url, "--host-id", HOST, *extra, log=log, env={"FACTORY_API_KEY": key}
    )


def test_self_hosted_worker_executes_a_run_routed_to_its_host(served: Served, tmp_path: Path) -> None:
    run_id = create_run(served, "hello from the e2e test")
    worker_log = tmp_path / "worker.log"
    with worker(
        served.url,
        worker_key(served),
        worker_log,
        *("--harness", "command", "--command", "bash -c 'cat; echo done'"),
        *("--workspace-root", str(tmp_path / "ws")),
    ) as proc:
        run = wait_for(
            lambda: finished(served, run_id), 30, "the run to finish", alive=[proc], logs=[worker_log]
        )
        assert run["state"] == "SUCCEEDED", worker_log.read_text()
        stdout = "\n".join(x["text"] for x in run_logs(served, run_id) if x["stream"] == "stdout")
        assert stdout == "hello from the e2e testdone"  # the prompt on stdin (no newline), then "done"
        assert stop(proc) == 0  # SIGTERM: a clean stop


def test_a_run_outcome_outlives_a_server_restart(served: Served, tmp_path: Path) -> None:
    gate = tmp_path / "gate"  # the command runs in the worker's sandbox: this directory is shown to it
    gate.mkdir()
    release = gate / "release"
    run_id = create_run(served, "before the restart")
    worker_log = tmp_path / "worker.log"
    try:
        with worker(
            served.url,
            worker_key(served),
            worker_log,
            *("--harness", "command", "--workspace-root", str(tmp_path / "ws"), "--sandbox-ro", str(gate)),
            *("--command", f"cat; echo; while [ ! -e {release} ]; do sleep 0.05; done"),
        ) as proc:
            wait_for(
                lambda: served.get(f"/api/v1/agent/runs/{run_id}")["state"] == "INPROGRESS",
                30,
                "the worker to start the run",
                alive=[proc],
                logs=[worker_log],
            )
            served.stop()
            release.touch()  # the run ends while the server is down
            wait_for(
                lambda: f"retrying POST /api/v1/workers/runs/{run_id}/state" in worker_log.read_text(),
                30,
                "the worker to retry its final report",
                alive=[proc],
                logs=[worker_log],
            )
            # the same port, the same data directory
            with serving(served.data_dir, port=served.port, log=served.log) as again:
                run = wait_for(
                    lambda: finished(again, run_id),
                    30,
                    "the report to land",
                    alive=[proc],
                    logs=[worker_log, again.log],
                )
                assert run["state"] == "SUCCEEDED", worker_log.read_text()
                assert stop(proc) == 0
    finally:
        release.touch()


def test_a_refused_key_stops_the_worker_with_exit_1(served: Served, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with worker(served.url, "fk_not_a_key", log) as proc:
        assert proc.wait(timeout=30) == 1, log.read_text()
    assert "worker stopped: the server refused this worker's key (401" in log.read_text()


def test_worker_without_a_key_explains_what_is_missing() -> None:
    result = run_cli("worker", "--server", "http://127.0.0.1:9", "--host-id", HOST, timeout=60)
    assert result.returncode == 2
    assert "FACTORY_API_KEY" in result.stderr


def test_worker_retries_while_the_server_is_down(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with worker(f"http://127.0.0.1:{free_port()}", "fk_nothing", log) as proc:
        retry = "retrying POST /api/v1/workers/claim"
        # backing off, not crashing: it keeps asking, with growing pauses
        wait_for(
            lambda: log.read_text().count(retry) >= 3, 30, "three claim retries", alive=[proc], logs=[log]
        )
        assert proc.poll() is None, log.read_text()
        assert stop(proc) == 0  # SIGTERM while backing off: a clean stop
