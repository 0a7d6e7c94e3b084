"""One log format (issue 29, part 5): ``serve`` with a service-hosted worker and a self-hosted ``factoryctl
worker`` each run a run, and every line either process wrote is one JSON object with ``ts``, ``level``,
``logger`` and ``msg`` (docs/operations.md, "Metrics and logs"). The text format and redaction are unit
tests (tests/unit/factoryctl/test_log_lines.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from serve_support import Served, run_cli, running, serving, wait_for

pytestmark = pytest.mark.slow
HOST = "myhost"
FINISHED = ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED")
KEYS = ["ts", "level", "logger", "msg"]


def records(log: Path) -> list[dict[str, Any]]:
    """Every line of ``log`` as a JSON object (a line that is not one fails the test, naming it)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line in {log.name}: {line!r}") from None
        assert isinstance(record, dict), line
        assert list(record)[:4] == KEYS, line
        out.append(record)
    return out


def finished(served: Served, run_id: str) -> dict[str, Any] | None:
    run: dict[str, Any] = served.get(f"/api/v1/agent/runs/{run_id}")
    return run if run["state"] in FINISHED else None


def create_run(served: Served, prompt: str, host: str | None = None) -> str:
    config = {"worker_host": host} if host else {}
    status, body = served.post("/api/v1/agent/run", {"prompt": prompt, "config": config})
    assert status == 200, body
    return str(body["run_id"])


def test_server_and_both_kinds_of_worker_write_only_json_lines(tmp_path: Path) -> None:
    serve_log, worker_log = tmp_path / "serve.log", tmp_path / "worker.log"
    with serving(tmp_path / "data", workers=1, log=serve_log) as served:
        args = ["keys", "create", "--name", "laptop", "--role", "worker", "--worker-host", HOST]
        created = run_cli("--data-dir", served.data_dir, *args, timeout=60)
        assert created.returncode == 0, created.stderr
        key = created.stdout.strip().splitlines()[-1]
        worker_args = ("worker", "--server", served.url, "--host-id", HOST, "--sandbox", "none")
        with running(*worker_args, log=worker_log, env={"FACTORY_API_KEY": key}) as worker:
            hosted = create_run(served, "service-hosted run")
            remote = create_run(served, "self-hosted run", HOST)
            for run_id in (hosted, remote):
                run = wait_for(
                    lambda run_id=run_id: finished(served, run_id),
                    60,
                    f"run {run_id} to finish",
                    alive=[served.proc, worker],
                    logs=[serve_log, worker_log],
                )
                assert run["state"] == "SUCCEEDED", run
        served.stop()

    server_lines, worker_lines = records(serve_log), records(worker_log)
    assert any(r["msg"] == "request" and r["logger"] == "aiohttp.access" for r in server_lines)
    assert [r["msg"] for r in server_lines if hosted in r["msg"]] == [f"run {hosted}: SUCCEEDED"]
    assert [r["msg"] for r in worker_lines if remote in r["msg"]][-1:] == [f"run {remote}: SUCCEEDED"]
    assert any(r["level"] == "warning" and "--sandbox none" in r["msg"] for r in worker_lines)


def test_an_unknown_log_format_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = run_cli(
        "worker",
        "--server",
        "http://127.0.0.1:9",
        "--host-id",
        HOST,
        env={"FACTORY_API_KEY": "fk_not_used", "FACTORY_LOG_FORMAT": "xml"},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: FACTORY_LOG_FORMAT: log format 'xml': expected one of json, text")
