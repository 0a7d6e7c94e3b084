"""Service-hosted workers in a process of their own (``serve --worker-process``, the default;
docs/operations.md, "Workers in their own process"), with real processes on a real SQLite store.

- By default the workers run in a child of ``serve``: it executes the runs (its log lines carry its
  ``"process"`` index), ``kill -9`` of it is followed by a new one that executes the next run, and SIGTERM
  stops both, exit 0.
- ``kill -9`` of ``serve`` itself: the workers' process notices and exits by itself.
- ``--no-worker-process`` or ``FACTORY_WORKER_PROCESS=0``: no such child, the runs execute on serve's own
  event loop; a value that is not a boolean is refused (exit 2) before anything starts.

Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from serve_support import Served, log_records, process_alive, run_cli, serving, wait_for

pytestmark = pytest.mark.slow
FINISHED = ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED")


def _workers_pids(log: Path) -> list[int]:
    """The pids of every workers' process the primary saw ready, oldest first."""
    return [r["pid"] for r in log_records(log) if r.get("msg") == "workers process ready"]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])


def _run(served: Served, prompt: str) -> dict[str, Any]:
    """Create a run and wait for it to finish; the finished run."""
    status, body = served.post("/api/v1/agent/run", {"prompt": prompt})
    assert status == 200, body
    run_id = body["run_id"]

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = served.get(f"/api/v1/agent/runs/{run_id}")
        return run if run["state"] in FINISHED else None

    run = wait_for(finished, 60, f"run {run_id} to finish", alive=[served.proc], logs=[served.log])
    return run


def _executed_by(log: Path, run_id: str) -> list[Any]:
    """The ``process`` tag of each worker line about ``run_id`` (None: a line without one)."""
    return [r.get("process") for r in log_records(log) if r.get("msg", "").startswith(f"run {run_id}: ")]


def test_the_workers_run_in_a_child_process_restarted_when_it_dies(tmp_path: Path) -> None:
    with serving(tmp_path / "data", workers=2) as served:
        first = wait_for(lambda: _workers_pids(served.log), 30, "the workers' process", logs=[served.log])[0]
        assert _parent(first) == served.proc.pid

        run = _run(served, "in the workers' process")
        assert run["state"] == "SUCCEEDED", run
        assert _executed_by(served.log, run["run_id"]) == [1]  # serve is process 0; its workers, 1

        os.kill(first, signal.SIGKILL)
        second = wait_for(
            lambda: [p for p in _workers_pids(served.log) if p != first],
            20,
            "a new workers' process",
            alive=[served.proc],
            logs=[served.log],
        )[0]
        assert not process_alive(first)
        assert any(r.get("msg") == "workers process exited; restarting" for r in log_records(served.log))
        again = _run(served, "after the restart")
        assert again["state"] == "SUCCEEDED", again
        assert _executed_by(served.log, again["run_id"]) == [1]

        assert served.stop() == 0
    assert not process_alive(second)
    text = served.log.read_text()
    assert "Traceback" not in text, text[-3000:]


def test_the_workers_process_exits_when_serve_is_killed(tmp_path: Path) -> None:
    with serving(tmp_path / "data", workers=1) as served:
        child = wait_for(lambda: _workers_pids(served.log), 30, "the workers' process", logs=[served.log])[0]
        os.kill(served.proc.pid, signal.SIGKILL)
        served.proc.wait(5)
        wait_for(
            lambda: not process_alive(child), 30, "the workers' process exiting by itself", logs=[served.log]
        )
    assert any(r.get("msg") == "primary process gone; stopping the workers" for r in log_records(served.log))


@pytest.mark.parametrize(
    ("args", "env"), [(("--no-worker-process",), {}), ((), {"FACTORY_WORKER_PROCESS": "0"})]
)
def test_in_process_workers_when_asked(tmp_path: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
    with serving(tmp_path / "data", *args, workers=1, env=env) as served:
        run = _run(served, "on serve's event loop")
        assert run["state"] == "SUCCEEDED", run
        assert _executed_by(served.log, run["run_id"]) == [None]  # a lone process tags no line
        assert served.stop() == 0
    assert not _workers_pids(served.log)


def test_a_worker_process_setting_that_is_not_a_boolean_is_refused(tmp_path: Path) -> None:
    result = run_cli(
        "--data-dir", tmp_path / "data", "serve", env={"FACTORY_WORKER_PROCESS": "maybe"}, timeout=30
    )
    assert result.returncode == 2, result
    assert "'maybe' is not a boolean" in result.stderr
    assert not (tmp_path / "data").exists()
