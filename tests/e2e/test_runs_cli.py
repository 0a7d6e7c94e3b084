"""``factoryctl runs ...`` as subprocesses against a real ``factoryctl serve`` subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_support import free_port

pytestmark = pytest.mark.slow


class Server:
    def __init__(self, url: str, key: str, data_dir: Path) -> None:
        self.url, self.key, self.data_dir = url, key, data_dir

    def cli(
        self, *args: str, key: str | None = "default", stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        env["FACTORY_DATA_DIR"] = str(self.data_dir)
        if key is not None:
            env["FACTORY_API_KEY"] = self.key if key == "default" else key
        return subprocess.run(
            [sys.executable, "-m", "factoryctl.cli", "runs", *args, "--server", self.url],
            capture_output=True,
            text=True,
            env=env,
            input=stdin,
            timeout=60,
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "factoryctl.cli",
            "--data-dir",
            str(data_dir),
            "serve",
            "--port",
            str(port),
            "--workers",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"factoryctl serve did not start: {err}")
            time.sleep(0.1)
        key = (data_dir / "admin.key").read_text().strip()
        yield Server(url, key, data_dir)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_create_list_get_followup_cancel(server: Server, tmp_path: Path) -> None:
    attachment = tmp_path / "context.json"
    attachment.write_text('{"issue": 42}')
    created = server.cli(
        "create",
        "--prompt",
        "Summarise issue 42\nwith details",
        "--name",
        "e2e",
        "--model",
        "m-1",
        "--metadata",
        "ticket=T-42",
        "--attach",
        str(attachment),
        "--mcp",
        'docs={"url": "https://mcp.example"}',
        "--format",
        "json",
    )
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["run_id"]
    assert json.loads(created.stdout)["state"] == "QUEUED"

    listed = server.cli("list", "--state", "queued", "--name", "e2e", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [run_id]
    table = server.cli("list")
    assert run_id in table.stdout and "Summarise issue 42" in table.stdout

    shown = server.cli("get", run_id, "--format", "json")
    run = json.loads(shown.stdout)
    assert run["source"] == "CLI"
    assert run["agent_config"] == {
        "name": "e2e",
        "model_id": "m-1",
        "mcp_servers": {"docs": {"url": "https://mcp.example"}},
    }
    assert run["metadata"] == {"ticket": "T-42"}
    assert run["attachments"] == ["context.json"]
    text = server.cli("get", run_id)
    assert "state:" in text.stdout and "QUEUED" in text.stdout and "  with details" in text.stdout

    followup = server.cli("followup", run_id, "--message", "-", stdin="also check 43")
    assert followup.returncode == 0, followup.stderr
    assert followup.stdout.split()[1] == "queued"

    cancelled = server.cli("cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{run_id}  cancelled"
    again = server.cli("cancel", run_id)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "(invalid_request)" in again.stderr
    assert "CANCELLED" in again.stderr


def test_errors_print_the_problem_and_exit_1_2_or_3(server: Server) -> None:
    """docs/cli.md: 1 the server refused, 2 usage, 3 cannot connect (the same for every HTTP verb)."""
    missing = server.cli("get", "run_doesnotexist")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("error: ") and missing.stderr.endswith(" (resource_not_found)\n")
    bad = server.cli("create", "--prompt", "p", "--metadata", "bad key=v")
    assert bad.returncode == 1
    assert "(invalid_request)" in bad.stderr and "\n  - metadata.bad key: " in bad.stderr
    as_json = server.cli("get", "run_doesnotexist", "--format", "json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error_code"] == "resource_not_found"
    no_key = server.cli("list", key=None)
    assert no_key.returncode == 2 and "FACTORY_API_KEY" in no_key.stderr
    bad_flag = server.cli("create", "--prompt", "p", "--mcp", "docs")
    assert bad_flag.returncode == 2 and "--mcp expects NAME=VALUE" in bad_flag.stderr
    wrong_key = server.cli("list", key="fk_wrong")
    assert wrong_key.returncode == 1 and "(authentication_required)" in wrong_key.stderr
    unreachable = subprocess.run(
        [
            sys.executable,
            "-m",
            "factoryctl.cli",
            "runs",
            "list",
            "--server",
            f"http://127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "FACTORY_API_KEY": "fk_x"},
        timeout=60,
    )
    assert unreachable.returncode == 3 and "cannot reach" in unreachable.stderr
    assert unreachable.stderr.endswith(" (connection_failed)\n")
