"""``factoryctl runs ...`` as subprocesses against a real ``factoryctl serve`` subprocess."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import Served, free_port, run_cli, serving

pytestmark = pytest.mark.slow


def runs(
    server: Served, *args: str, key: str | None = "default", stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``factoryctl runs ARGS --server URL`` with ``key`` as ``FACTORY_API_KEY`` (``"default"``: the
    server's admin key, None: none)."""
    env = {"FACTORY_DATA_DIR": str(server.data_dir)}
    if key is not None:
        env["FACTORY_API_KEY"] = server.key if key == "default" else key
    return run_cli("runs", *args, "--server", server.url, env=env, stdin=stdin, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("serve")) as served:
        yield served


def test_create_list_get_followup_cancel(server: Served, tmp_path: Path) -> None:
    attachment = tmp_path / "context.json"
    attachment.write_text('{"issue": 42}')
    created = runs(
        server,
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

    listed = runs(server, "list", "--state", "queued", "--name", "e2e", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [run_id]
    table = runs(server, "list")
    assert run_id in table.stdout and "Summarise issue 42" in table.stdout

    shown = runs(server, "get", run_id, "--format", "json")
    run = json.loads(shown.stdout)
    assert run["source"] == "CLI"
    assert run["agent_config"] == {
        "name": "e2e",
        "model_id": "m-1",
        "mcp_servers": {"docs": {"url": "https://mcp.example"}},
    }
    assert run["metadata"] == {"ticket": "T-42"}
    assert run["attachments"] == ["context.json"]
    text = runs(server, "get", run_id)
    assert "state:" in text.stdout and "QUEUED" in text.stdout and "  with details" in text.stdout

    followup = runs(server, "followup", run_id, "--message", "-", stdin="also check 43")
    assert followup.returncode == 0, followup.stderr
    assert followup.stdout.split()[1] == "queued"

    cancelled = runs(server, "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{run_id}  cancelled"
    again = runs(server, "cancel", run_id)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "(invalid_request)" in again.stderr
    assert "CANCELLED" in again.stderr


def test_errors_print_the_problem_and_exit_1_2_or_3(server: Served) -> None:
    """docs/cli.md: 1 the server refused, 2 usage, 3 cannot connect (the same for every HTTP verb)."""
    missing = runs(server, "get", "run_doesnotexist")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("error: ") and missing.stderr.endswith(" (resource_not_found)\n")
    bad = runs(server, "create", "--prompt", "p", "--metadata", "bad key=v")
    assert bad.returncode == 1
    assert "(invalid_request)" in bad.stderr and "\n  - metadata.bad key: " in bad.stderr
    as_json = runs(server, "get", "run_doesnotexist", "--format", "json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error_code"] == "resource_not_found"
    no_key = runs(server, "list", key=None)
    assert no_key.returncode == 2 and "FACTORY_API_KEY" in no_key.stderr
    bad_flag = runs(server, "create", "--prompt", "p", "--mcp", "docs")
    assert bad_flag.returncode == 2 and "--mcp expects NAME=VALUE" in bad_flag.stderr
    wrong_key = runs(server, "list", key="fk_wrong")
    assert wrong_key.returncode == 1 and "(authentication_required)" in wrong_key.stderr
    nowhere = f"http://127.0.0.1:{free_port()}"
    unreachable = run_cli("runs", "list", "--server", nowhere, env={"FACTORY_API_KEY": "fk_x"}, timeout=60)
    assert unreachable.returncode == 3 and "cannot reach" in unreachable.stderr
    assert unreachable.stderr.endswith(" (connection_failed)\n")
