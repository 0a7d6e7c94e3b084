"""One failure, one answer: every HTTP verb maps the same failure to the same exit code and output.

The contract (docs/cli.md, "Exit codes"): 0 ok, 1 the server refused, 2 usage, 3 cannot connect.
``--format json`` adds one JSON object on stdout: the server's problem body, or
``{"error", "error_code"}`` when no answer came. Every verb runs as its own process against a real
``factoryctl serve``; "cannot connect" uses a port nothing listens on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from serve_support import free_port

from factoryctl.client import FactoryClient

pytestmark = pytest.mark.slow

# One verb of each command group that talks HTTP, each naming objects that do not exist.
VERBS: dict[str, tuple[str, ...]] = {
    "runs get": ("runs", "get", "run_doesnotexist"),
    "runs list": ("runs", "list"),
    "webhooks get": ("webhooks", "get", "fa_doesnotexist", "wh_doesnotexist"),
    "webhooks list": ("webhooks", "list", "fa_doesnotexist"),
    "deliveries list": ("deliveries", "list", "fa_doesnotexist", "wh_doesnotexist"),
    "deliveries get": ("deliveries", "get", "fa_doesnotexist", "wh_doesnotexist", "d-1"),
    "automations test-filter": (
        "automations",
        "test-filter",
        "fa_doesnotexist",
        "au_doesnotexist",
        "--delivery-id",
        "d-1",
    ),
}
NOT_FOUND = [name for name in VERBS if name != "runs list"]  # an empty list is not an error


@dataclass
class Server:
    url: str
    key: str
    data_dir: Path

    def cli(
        self, *args: str, key: str | None = "default", server: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        env |= {"FACTORY_DATA_DIR": str(self.data_dir), "NO_COLOR": "1"}
        if key is not None:
            env["FACTORY_API_KEY"] = self.key if key == "default" else key
        return subprocess.run(
            [sys.executable, "-m", "factoryctl.cli", *args, "--server", server or self.url],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
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
            time.sleep(0.05)
        yield Server(url, (data_dir / "admin.key").read_text().strip(), data_dir)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def without_instance(problem: dict[str, object]) -> dict[str, object]:
    """A problem body minus ``instance`` (the request path, which differs by verb by design)."""
    return {k: v for k, v in problem.items() if k != "instance"}


def test_a_refused_key_is_exit_1_with_one_message_on_every_verb(server: Server, tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: refused\n")
    verbs = {**VERBS, "validate --server": ("validate", str(tmp_path))}
    texts = {name: server.cli(*argv, key="fk_wrong") for name, argv in verbs.items()}
    for name, done in texts.items():
        assert (done.returncode, done.stdout) == (1, ""), f"{name}: {done.stderr}"
    assert {done.stderr for done in texts.values()} == {texts["runs get"].stderr}
    assert texts["runs get"].stderr.endswith(" (authentication_required)\n")
    assert texts["runs get"].stderr.startswith("error: ")

    jsons = {name: server.cli(*argv, "--format", "json", key="fk_wrong") for name, argv in verbs.items()}
    problems = {}
    for name, done in jsons.items():
        assert done.returncode == 1, f"{name}: {done.stderr}"
        assert done.stderr == texts[name].stderr  # the person reading stderr sees the same line
        problems[name] = json.loads(done.stdout)
    first = problems["runs get"]
    assert first["status"] == 401 and first["error_code"] == "authentication_required"
    assert {"type", "title", "detail", "error"} <= first.keys()  # the server's problem body, as sent
    assert all(without_instance(p) == without_instance(first) for p in problems.values())


@pytest.mark.parametrize("name", NOT_FOUND)
def test_not_found_is_exit_1_with_the_problem(server: Server, name: str) -> None:
    text = server.cli(*VERBS[name])
    assert (text.returncode, text.stdout) == (1, ""), text.stderr
    [line] = text.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(" (resource_not_found)")

    as_json = server.cli(*VERBS[name], "--format", "json")
    assert as_json.returncode == 1 and as_json.stderr == text.stderr
    problem = json.loads(as_json.stdout)
    assert (problem["status"], problem["error_code"]) == (404, "resource_not_found")
    assert line == f"error: {problem['detail']} (resource_not_found)"


def test_field_errors_follow_the_message_on_every_verb(server: Server) -> None:
    run = server.cli("runs", "create", "--prompt", "p", "--metadata", "bad key=v")
    with FactoryClient(server.url, server.key) as client:
        factory = client.factories.create("field-errors").uid
    hook = server.cli("webhooks", "create", factory, "--name", "Bad Name")
    for done, field in ((run, "metadata.bad key"), (hook, "name")):
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        first, *fields = done.stderr.splitlines()
        assert first.startswith("error: ") and first.endswith(" (invalid_request)")
        assert any(line.startswith(f"  - {field}: ") for line in fields), done.stderr


def test_cannot_connect_is_exit_3_on_every_verb(server: Server, tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: unreachable\n")
    nowhere = f"http://127.0.0.1:{free_port()}"
    verbs = {**VERBS, "validate --server": ("validate", str(tmp_path))}
    calls = [(name, fmt) for name in verbs for fmt in ("text", "json")]
    with ThreadPoolExecutor(len(calls)) as pool:  # each process retries for ~1.5 s before it gives up
        done = dict(
            zip(
                calls,
                pool.map(lambda c: server.cli(*verbs[c[0]], "--format", c[1], server=nowhere), calls),
                strict=True,
            )
        )
    for name in verbs:
        text, as_json = done[name, "text"], done[name, "json"]
        assert (text.returncode, text.stdout) == (3, ""), f"{name}: {text.stderr}"
        [line] = text.stderr.splitlines()
        message = line.removeprefix("error: ").removesuffix(" (connection_failed)")
        assert message.startswith(f"cannot reach {nowhere}: "), line
        assert line == f"error: {message} (connection_failed)"
        assert (as_json.returncode, as_json.stderr) == (3, text.stderr), name
        assert json.loads(as_json.stdout) == {"error": message, "error_code": "connection_failed"}


def test_usage_errors_are_exit_2_with_nothing_on_stdout(server: Server, tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: usage\n")
    for name, argv in {**VERBS, "validate --server": ("validate", str(tmp_path))}.items():
        no_key = server.cli(*argv, "--format", "json", key=None)
        assert (no_key.returncode, no_key.stdout) == (2, ""), f"{name}: {no_key.stderr}"
        assert "FACTORY_API_KEY" in no_key.stderr
    for argv in (
        ("runs", "create", "--prompt", "p", "--mcp", "docs={not json"),
        ("runs", "create"),  # neither --prompt nor --skill
        ("deliveries", "list", "fa_x", "wh_x", "--limit", "0"),
        ("webhooks", "create", "fa_x", "--name", "n", "--secret-from-stdin"),  # stdin is empty
        ("runs", "list", "--limit", "many"),  # argparse's own check
    ):
        done = server.cli(*argv, "--format", "json")
        assert (done.returncode, done.stdout) == (2, ""), f"{argv}: {done.stderr}"
        assert "error: " in done.stderr
