"""The CLI works right after ``make run`` (issue 28, part 1; docs/cli.md, "CLI context" and "Names or
UIDs"): the demo writes a CLI context, and ``factoryctl`` in a new terminal (no ``FACTORY_*`` variable,
another directory below it) reaches that server with its key and reads that store, naming objects by name.
A busy port fails first; read-only commands never create a store; flags and variables win over a context.

Everything is real: ``python -m factoryctl.demo`` (what ``make run`` starts) and the CLI as subprocesses.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from serve_support import _healthy, clean_env, free_port, run_cli, stop, wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example-factory"
DEMO = (sys.executable, "-m", "factoryctl.demo")
NEW_TERMINAL: dict[str, str | None] = {"FACTORY_CONTEXT": None}  # clean_env turns the lookup off; not here


@dataclass
class Demo:
    home: Path  # where `make run` ran: the context is found here and below
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text()

    def cli(self, *args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
        """``factoryctl ARGS`` in a new terminal: another directory below ``home``, no FACTORY_* set."""
        elsewhere = self.home / "work" / "deeper"
        elsewhere.mkdir(parents=True, exist_ok=True)
        return run_cli(*args, cwd=elsewhere, env=NEW_TERMINAL | (env or {}))

    def ok(self, *args: str) -> str:
        done = self.cli(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    home = tmp_path_factory.mktemp("clone")
    port = free_port()
    log = home / "demo.log"
    command = [*DEMO, "--data-dir", ".factory/demo", "--port", str(port), str(EXAMPLE)]
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            command, cwd=home, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            env=clean_env(), start_new_session=True,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url), 60, "the demo answering /healthz", alive=[proc], logs=[log])
        yield Demo(home, url, log)
    finally:
        stop(proc)


def test_the_demo_writes_a_context_and_prints_commands_for_a_new_terminal(demo: Demo) -> None:
    local = demo.home / ".factory" / "context.json"
    context = json.loads(local.read_text())
    data_dir = demo.home / ".factory" / "demo"
    assert context == {
        "version": 1,
        "server": demo.url,
        "key_file": str(data_dir / "admin.key"),
        "data_dir": str(data_dir),
    }
    assert json.loads((data_dir / "context.json").read_text()) == context
    out = demo.output()
    assert f"  cd {demo.home} && . {Path(sys.executable).parent / 'activate'}\n" in out
    assert "  factoryctl schedules list\n" in out and "  factoryctl webhooks list example\n" in out


def test_http_verbs_in_a_new_terminal_use_the_demo_server_and_key_by_name(demo: Demo) -> None:
    schedules = demo.ok("schedules", "list")
    assert "nightly-report" in schedules and "weekly-dependencies" in schedules
    hooks = demo.ok("webhooks", "list", "example")  # a factory's name
    assert re.search(r"wh_\w{26}\s+alerts\s", hooks), hooks
    curl = re.search(r"curl -sS -X POST (\S+) -H 'Authorization: Bearer (\S+)'", demo.output())
    assert curl is not None
    headers = {"Authorization": f"Bearer {curl[2]}", "X-Alert-Id": "ctx-1"}
    sent = httpx.post(curl[1], headers=headers, json={"service": "api", "severity": "high"}, timeout=30)
    assert sent.status_code == 202, sent.text

    def run_of_delivery() -> str | None:
        listed = demo.ok("deliveries", "list", "example", "alerts")  # names for both
        found = re.search(r"ctx-1\s+Accepted\s+\d+\s+\S+\s+(run_\w+)", listed)
        return found[1] if found else None

    run_id = wait_for(run_of_delivery, 30, "the delivery's run in `deliveries list example alerts`")
    assert run_id in demo.ok("runs", "list", "--factory", "example")
    verdict = demo.ok(
        "automations",
        "test-filter",
        "example",
        "alert-triage",
        "--delivery-id",
        "ctx-1",
        "--webhook",
        "alerts",
    )
    assert "payload check: passed" in verdict, verdict


def test_a_prompt_schedules_run_is_found_by_its_factorys_name(demo: Demo) -> None:
    run_id = demo.ok("schedules", "run-now", "weekly-dependencies").strip()
    assert run_id.startswith("run_")
    listed = json.loads(demo.ok("runs", "list", "--factory", "example", "--format", "json"))
    assert run_id in [r["run_id"] for r in listed["runs"]]
    only = json.loads(
        demo.ok(
            "runs", "list", "--factory", "example", "--schedule-id", "weekly-dependencies", "--format", "json"
        )
    )
    assert [r["run_id"] for r in only["runs"]] == [run_id]


def test_names_nothing_has_are_clear_errors(demo: Demo) -> None:
    unknown = demo.cli("runs", "list", "--factory", "nope")
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == "error: no factory is named 'nope' (give a factory's name or UID)\n"
    missing = demo.cli("webhooks", "get", "example", "nope", "--format", "json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["error_code"] == "resource_not_found"


def test_store_commands_read_the_demo_store_not_a_new_one(demo: Demo) -> None:
    secrets = demo.ok("secrets", "list")
    assert "alerts-token  webhook" in secrets
    assert not (demo.home / "work" / "deeper" / ".factory").exists()


def test_flags_and_variables_win_over_the_context(demo: Demo) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    by_env = demo.cli("runs", "list", env={"FACTORY_API_URL": nowhere})
    assert by_env.returncode == 3 and f"cannot reach {nowhere}" in by_env.stderr
    by_flag = demo.cli("runs", "list", "--server", nowhere)
    assert by_flag.returncode == 3
    bad_key = demo.cli("runs", "list", env={"FACTORY_API_KEY": "fk_wrong"})
    assert bad_key.returncode == 1 and "(authentication_required)" in bad_key.stderr, bad_key.stderr


def test_without_a_context_read_only_commands_name_the_data_dir_and_create_nothing(
    demo: Demo, tmp_path: Path
) -> None:
    for args in (("secrets", "list"), ("keys", "list")):
        done = run_cli(*args, cwd=tmp_path, env=NEW_TERMINAL)  # no context above tmp_path
        assert (done.returncode, done.stdout) == (1, ""), (args, done.stderr)
        assert done.stderr.startswith(
            f"error: no store in {tmp_path / '.factory'} (factory.db does not exist"
        )
        off = demo.cli("--context", "none", *args)
        assert off.returncode == 1 and "no store in" in off.stderr
    # A first plan is against an empty store (everything to add), made in a scratch directory.
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "factory.yaml").write_text("name: first\n")
    (tree / "schedules").mkdir()
    (tree / "schedules" / "nightly.yaml").write_text('cron: "0 2 * * *"\nprompt: Write the report.\n')
    planned = run_cli("plan", str(tree), cwd=tmp_path, env=NEW_TERMINAL)
    assert planned.returncode == 0 and "Plan: 2 to add, 0 to change, 0 to destroy." in planned.stdout
    assert planned.stderr.startswith(f"note: no store in {tmp_path / '.factory'} (factory.db does not exist")
    assert [p.name for p in tmp_path.iterdir()] == ["tree"]
    keyless = run_cli("runs", "list", cwd=tmp_path, env=NEW_TERMINAL)
    assert keyless.returncode == 2 and keyless.stderr.startswith("error: no API key: set FACTORY_API_KEY")


def test_a_named_context_file_is_used_and_a_broken_one_is_a_usage_error(demo: Demo, tmp_path: Path) -> None:
    context = demo.home / ".factory" / "demo" / "context.json"
    named = run_cli("--context", str(context), "schedules", "list", cwd=tmp_path)  # the flag wins over none
    assert "nightly-report" in named.stdout, named.stderr
    by_env = run_cli("schedules", "list", cwd=tmp_path, env={"FACTORY_CONTEXT": str(context.parent)})
    assert by_env.returncode == 0 and "nightly-report" in by_env.stdout
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    done = run_cli("--context", str(broken), "schedules", "list", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"error: cannot read context file {broken}: ")


def test_a_busy_port_fails_first_with_a_hint(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*DEMO, "--data-dir", ".factory/demo", "--port", str(port), str(EXAMPLE)],
            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")  # no URL, no "Ctrl-C stops the server"
    assert done.stderr == (
        f"error: port {port} on 127.0.0.1 is already in use; stop what listens there, or pick another "
        "port: make run PORT=8081\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing validated, created or applied
