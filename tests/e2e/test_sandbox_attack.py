"""Issue 23 item 1, the exact attack: team B's admin defines an environment whose setup reads the server's
data directory (``../../secret.key``, ``factory.db``) and decrypts every team's secrets; a run of team B
uses it. On a real ``factoryctl serve --workers 1`` with two teams, on SQLite (the database in the data
directory) and PostgreSQL. Service-hosted workers now run setup in the sandbox (docs/workers.md,
"Sandbox"), with their workspaces outside the data directory, or refuse to run it at all."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import Served, run_cli, running, serving, wait_for

FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}
SERVER_ENV = {"PGPASSWORD": "server-db-password-4711", "CLOUD_SECRET_ACCESS_KEY": "server-cloud-key-0815"}
# Decrypts every secret version of the SQLite store with the data directory's key, as the attacker did.
DECRYPT = (
    "import sqlite3, sys; from cryptography.fernet import Fernet; d = sys.argv[1]; "
    "f = Fernet(open(d + '/secret.key').read().strip()); "
    "[print('DECRYPTED', f.decrypt(c).decode()) for (c,) in "
    "sqlite3.connect(d + '/factory.db').execute('select ciphertext from secret_versions')]"
)


def attack(data: Path) -> list[str]:
    """Setup commands that try everything the attack did, and say what they could reach."""
    d = shlex.quote(str(data))
    return [
        'echo "workspace $PWD"; cat ../../secret.key 2>/dev/null && echo REL-KEY-READ'
        " || echo REL-KEY-UNREACHABLE",
        f"cat {d}/secret.key 2>/dev/null && echo KEY-READ || echo KEY-UNREACHABLE",
        f"ls -la {d} 2>/dev/null && echo DATA-LISTED || echo DATA-UNREACHABLE",
        f"base64 -w0 {d}/factory.db 2>/dev/null | head -c 2000 && echo DB-READ || echo DB-UNREACHABLE",
        'ls -A "$(dirname "$PWD")"; cat ../*/PROMPT.md 2>/dev/null | grep -q CONFIDENTIAL && echo OTHER-READ'
        " || echo OTHER-UNREACHABLE",
        f"{shlex.quote(sys.executable)} -c {shlex.quote(DECRYPT)} {d} 2>/dev/null || echo DECRYPT-FAILED",
        "(exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null && echo POSTGRES-REACHED || echo POSTGRES-UNREACHABLE",
        "env; (cat /proc/*/environ 2>/dev/null || true) | tr '\\0' '\\n'; echo ENV-DONE",
        "echo done > proof.txt; echo ATTACK-DONE",
    ]


class Api:
    def __init__(self, served: Served, key: str) -> None:
        self.served, self.key = served, key

    def call(self, method: str, path: str, body: Any = None, status: int | None = None) -> Any:
        resp = httpx.request(
            method,
            self.served.url + path,
            json=body,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=10,
        )
        assert status is None or resp.status_code == status, (
            f"{method} {path}: {resp.status_code} {resp.text}"
        )
        return resp.json() if resp.content else None

    def finished_run(self, run_id: str) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            run = self.call("GET", f"/api/v1/agent/runs/{run_id}", status=200)
            return run if run["state"] in FINISHED else None

        return wait_for(done, 60, f"run {run_id} to finish", alive=[self.served.proc], logs=[self.served.log])

    def output(self, run_id: str) -> str:
        logs = self.call("GET", f"/api/v1/agent/runs/{run_id}/logs", status=200)["logs"]
        return "\n".join(line["text"] for line in logs)


def new_key(served: Served, database: str | None, team: str, role: str) -> str:
    db = ("--database", database) if database else ()
    made = run_cli(
        "--data-dir",
        served.data_dir,
        *db,
        "keys",
        "create",
        "--name",
        f"{team}-{role}",
        "--role",
        role,
        "--team",
        team,
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> str | None:
    """None: the default SQLite store, ``<data-dir>/factory.db``; else a PostgreSQL URL."""
    return None if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


@pytest.fixture
def served(tmp_path: Path, store: str | None) -> Iterator[Served]:
    # No FACTORY_SECRET_KEY: serve keeps its key in <data-dir>/secret.key, as in the report. Its environment
    # holds a credential of its own, as a server's often does.
    with serving(tmp_path / "data", workers=2, database=store, env=SERVER_ENV) as server:
        yield server


def test_team_b_admin_cannot_read_team_a_secrets_through_environment_setup(
    served: Served, store: str | None
) -> None:
    data = served.data_dir
    team_a = Api(served, served.key)  # the bootstrap admin of team "default"
    factory = team_a.call("POST", "/api/v1/factory", {"name": "team-a"}, status=201)
    hook = team_a.call(
        "POST",
        f"/api/v1/factory/{factory['uid']}/webhooks",
        {"name": "signed", "auth_mode": "token"},
        status=201,
    )
    team_a_secret = hook["secret"]
    key = (data / "secret.key").read_text().strip()
    assert team_a_secret and key
    # A run of team A in its workspace meanwhile (the echo harness waits on its marker).
    busy = team_a.call(
        "POST", "/api/v1/agent/runs", {"prompt": "TEAM-A-CONFIDENTIAL [echo:sleep=60]"}, status=200
    )
    wait_for(
        lambda: team_a.call("GET", f"/api/v1/agent/runs/{busy['run_id']}")["state"] == "INPROGRESS",
        30,
        "team A's run to start",
        alive=[served.proc],
        logs=[served.log],
    )

    team_b_admin = Api(served, new_key(served, store, "team-b", "admin"))
    team_b_member = Api(served, new_key(served, store, "team-b", "member"))
    team_b_admin.call("POST", "/api/v1/environments", {"name": "steal", "setup": attack(data)}, status=201)
    created = team_b_member.call(
        "POST", "/api/v1/agent/run", {"prompt": "go", "config": {"environment_id": "steal"}}, status=200
    )
    run = team_b_member.finished_run(created["run_id"])
    output = team_b_member.output(created["run_id"])
    everything = output + repr(run)

    assert team_a_secret not in everything, output
    assert key not in everything, output
    for value in SERVER_ENV.values():
        assert value not in everything, output
    assert "ENV-DONE" in output.splitlines(), output
    lines = output.splitlines()
    assert not [line for line in lines if line.startswith("DECRYPTED")], output
    for reached in ("REL-KEY-READ", "KEY-READ", "DATA-LISTED", "DB-READ", "OTHER-READ", "POSTGRES-REACHED"):
        assert not [line for line in lines if line.endswith(reached)], output
    for stopped in ("KEY-UNREACHABLE", "DATA-UNREACHABLE", "DB-UNREACHABLE", "OTHER-UNREACHABLE"):
        assert stopped in lines, output
    assert "POSTGRES-UNREACHABLE" in lines and "ATTACK-DONE" in lines, output
    assert run["state"] == "SUCCEEDED", run  # the setup ran, confined, and its workspace was writable
    assert not (data / "workspaces").exists()  # workspaces live outside the data directory
    team_a.call("POST", f"/api/v1/agent/runs/{busy['run_id']}/cancel", status=200)


def test_without_bubblewrap_every_run_is_refused_echo_too(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-bwrap"
    with serving(tmp_path / "data", "--bwrap", missing, workers=1) as served:
        admin = Api(served, served.key)
        admin.call(
            "POST", "/api/v1/environments", {"name": "steal", "setup": attack(served.data_dir)}, status=201
        )
        refused = admin.call(
            "POST", "/api/v1/agent/run", {"prompt": "go", "config": {"environment_id": "steal"}}
        )
        echo = admin.call("POST", "/api/v1/agent/run", {"prompt": "hello"})
        run = admin.finished_run(refused["run_id"])
        assert run["state"] == "FAILED", run
        assert run["status_message"]["error_code"] == "sandbox_unavailable"
        assert "bubblewrap" in run["status_message"]["message"]
        assert "ATTACK-DONE" not in admin.output(refused["run_id"])
        plain = admin.finished_run(echo["run_id"])  # every harness runs a process: none outside the sandbox
        assert plain["state"] == "FAILED" and plain["status_message"]["error_code"] == "sandbox_unavailable"
        assert plain["sandbox"] is None and plain["is_sandbox_running"] is False
        assert "no sandbox" in served.log.read_text()


def test_a_workspace_directory_inside_the_data_directory_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run_cli(
        "--data-dir", data, "serve", "--workers", "1", "--workspace-dir", data / "ws", timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "overlaps" in result.stderr and str(data) in result.stderr


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("auto", "SECRET-UNREACHABLE"),  # bubblewrap works here: the command runs confined
        ("none", "SECRET-READ"),  # documented: on the worker's own host
        ("bwrap-missing", "exit 2"),  # required and not there: the worker does not start
    ],
)
def test_a_self_hosted_worker_sandboxes_as_its_sandbox_option_says(
    tmp_path: Path, mode: str, expected: str
) -> None:
    host_secret = tmp_path / "worker-host-secret.txt"
    host_secret.write_text("HOST-SECRET\n")
    option = (
        ("--sandbox", "bwrap", "--bwrap", str(tmp_path / "no-such-bwrap"))
        if mode == "bwrap-missing"
        else ("--sandbox", mode)
    )
    secret = shlex.quote(str(host_secret))
    command = f"cat >/dev/null; cat {secret} >/dev/null 2>&1 && echo SECRET-READ || echo SECRET-UNREACHABLE"
    with serving(tmp_path / "data") as served:
        made = run_cli(
            "--data-dir",
            served.data_dir,
            "keys",
            "create",
            "--name",
            "w",
            "--role",
            "worker",
            "--worker-host",
            "h",
        )
        assert made.returncode == 0, made.stderr
        admin = Api(served, served.key)
        run_id = admin.call(
            "POST", "/api/v1/agent/run", {"prompt": "p", "config": {"worker_host": "h"}}, status=200
        )["run_id"]
        args = (
            "worker",
            "--host-id",
            "h",
            "--server",
            served.url,
            "--harness",
            "command",
            "--command",
            command,
            *option,
        )
        key = made.stdout.strip().splitlines()[-1]
        if mode == "bwrap-missing":
            refused = run_cli(*args, env={"FACTORY_API_KEY": key}, timeout=60)
            assert refused.returncode == 2, refused.stderr
            assert "--sandbox bwrap, and bubblewrap does not work here" in refused.stderr
            assert admin.call("GET", f"/api/v1/agent/runs/{run_id}")["state"] == "QUEUED"  # never claimed
            return
        log = tmp_path / "worker.log"
        with running(
            *args,
            "--workspace-root",
            str(tmp_path / "ws"),
            log=log,
            env={"FACTORY_API_KEY": key},
        ):
            run = admin.finished_run(run_id)
        assert run["state"] == "SUCCEEDED", (run, log.read_text())
        lines = admin.output(run_id).splitlines()
        assert lines[-1] == expected, lines
        unsandboxed = [line for line in lines if line.startswith("UNSANDBOXED: ")]
        assert len(unsandboxed) == (1 if mode == "none" else 0), lines  # said on the run's own log
        assert run["sandbox"]["kind"] == ("none" if mode == "none" else "bwrap")
        if mode == "none":
            assert "WARNING: --sandbox none" in log.read_text()
