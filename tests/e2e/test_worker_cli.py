"""``factoryctl worker`` as a subprocess against a real ``factoryctl serve`` subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_support import free_port

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "factoryctl.cli"]


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


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"factoryctl serve did not start:\n{log.read_text()}")
        time.sleep(0.1)


def test_self_hosted_worker_executes_a_run_routed_to_its_host(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve_log = tmp_path / "serve.log"
    worker_log = tmp_path / "worker.log"
    with serve_log.open("wb") as out:
        serve = subprocess.Popen(
            [*CLI, "--data-dir", str(data_dir), "serve", "--port", str(port), "--workers", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            start_new_session=True,
        )
    worker: subprocess.Popen[bytes] | None = None
    try:
        _wait_healthy(url, serve, serve_log)
        admin = (data_dir / "admin.key").read_text().strip()
        created = subprocess.run(
            [
                *CLI,
                "--data-dir",
                str(data_dir),
                "keys",
                "create",
                "--name",
                "laptop",
                "--role",
                "worker",
                "--worker-host",
                "myhost",
            ],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=60,
            check=True,
        )
        worker_key = created.stdout.strip().splitlines()[-1]
        headers = {"Authorization": f"Bearer {admin}"}
        resp = httpx.post(
            f"{url}/api/v1/agent/run",
            json={"prompt": "hello from the e2e test", "config": {"worker_host": "myhost"}},
            headers=headers,
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        run_id = resp.json()["run_id"]

        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [
                    *CLI,
                    "worker",
                    "--server",
                    url,
                    "--host-id",
                    "myhost",
                    "--harness",
                    "command",
                    "--command",
                    "bash -c 'cat; echo done'",
                    "--workspace-root",
                    str(tmp_path / "ws"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_clean_env(FACTORY_API_KEY=worker_key),
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while True:
            run = httpx.get(f"{url}/api/v1/agent/runs/{run_id}", headers=headers, timeout=10).json()
            if run["state"] in ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED"):
                break
            if time.monotonic() > deadline or worker.poll() is not None:
                pytest.fail(f"run is {run['state']}; worker log:\n{worker_log.read_text()}")
            time.sleep(0.2)
        assert run["state"] == "SUCCEEDED", worker_log.read_text()
        logs = httpx.get(f"{url}/api/v1/agent/runs/{run_id}/logs", headers=headers, timeout=10).json()
        stdout = "\n".join(x["text"] for x in logs["logs"] if x["stream"] == "stdout")
        assert stdout == "hello from the e2e testdone"  # the prompt on stdin (no newline), then "done"

        assert _stop(worker) == 0  # SIGTERM: a clean stop
        worker = None
    finally:
        if worker is not None:
            _stop(worker)
        _stop(serve)


def test_worker_without_a_key_explains_what_is_missing() -> None:
    result = subprocess.run(
        [*CLI, "worker", "--server", "http://127.0.0.1:9", "--host-id", "myhost"],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=60,
    )
    assert result.returncode == 2
    assert "FACTORY_API_KEY" in result.stderr


def test_worker_retries_while_the_server_is_down(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*CLI, "worker", "--server", f"http://127.0.0.1:{free_port()}", "--host-id", "myhost"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(FACTORY_API_KEY="fk_nothing"),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while "retrying in" not in log.read_text():  # backing off, not crashing
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(1.0)
        assert worker.poll() is None, log.read_text()
    finally:
        assert _stop(worker) == 0  # SIGTERM while backing off: a clean stop
