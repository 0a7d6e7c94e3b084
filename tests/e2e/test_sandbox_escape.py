"""Issue 27 part 6: a run that tries every way out of its sandbox, on a ``factoryctl serve`` with the default
sandbox and network settings (``--sandbox auto`` → bubblewrap here, a run without an environment gets an
empty allowlist: docs/workers.md, "Sandbox" and "Network"; docs/security.md, "What a run can and cannot
reach").

The command harness runs the run's prompt as a bash script (``bash "$FACTORY_PROMPT_FILE"``): the prompt is
what a prompt-injected agent would run. Each attempt prints one ``ESCAPE <name> <reached|blocked> <detail>``
line; the test asserts each one failed, and how. A second run stays alive meanwhile, so its workspace
exists while the first one tries to read it. Nothing leaves the loopback: 169.254.169.254 and
``example.invalid`` are refused by the proxy by name, before any DNS or connection, and have no route out
of the sandbox's own network namespace.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import installed_cli
from agents.anthropic_server import anthropic_app
from agents.scripted import Script, ScriptedServer, Text, ToolCall
from serve_support import Served, run_events, serving, wait_for

pytestmark = pytest.mark.slow

FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}
COMMAND = 'bash "$FACTORY_PROMPT_FILE"'  # the run's prompt is its program
PG_PORT = 5432
METADATA = "169.254.169.254"
VICTIM = (
    'echo "VICTIM-WS $PWD"; echo victim-private > victim.txt\nwhile [ ! -e release ]; do sleep 0.1; done\n'
)
ATTEMPT = r"""
attempt() {  # NAME COMMAND...: one line saying whether COMMAND succeeded, and its first output
  local name=$1; shift
  local out how; if out=$("$@" 2>&1); then how=reached; else how=blocked; fi
  echo "ESCAPE $name $how $(printf '%s' "$out" | head -c 300 | tr '\n' ' ')"
}
tcp() { timeout 10 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2"; }
proxied() { curl -fsS -m 10 -x "$HTTP_PROXY" -o /dev/null -w "%{http_code}" "$1"; }
tunnel() { curl -sS -m 10 -x "$HTTP_PROXY" -o /dev/null -w "connect=%{http_connect}" "$1"; }
"""


def attack(data: Path, victim: Path, port: int, marker: str) -> str:
    """The escaping run's program: every attempt of issue 27, part 6, then a daemon that outlives it if it
    can, started just before the run ends (the test releases it once it has seen the daemon alive)."""
    d, v = shlex.quote(str(data)), shlex.quote(str(victim))
    return ATTEMPT + "\n".join(
        [
            'echo "ATTACKER-WS $PWD"',
            f"attempt read-key cat {d}/secret.key",
            f"attempt read-db head -c 100 {d}/factory.db",
            f"attempt list-other-workspace ls -la {v}",
            f"attempt read-other-workspace cat {v}/victim.txt",
            f"attempt write-data-dir sh -c 'echo planted > {d}/planted'",
            "attempt write-usr sh -c 'echo planted > /usr/planted'",
            # The workspace's parent inside is bubblewrap's, on the sandbox's own root: it says what is there.
            'attempt write-workspace-root sh -c \'echo planted > "$(dirname "$PWD")/planted"'
            ' && ls -A "$(dirname "$PWD")"\'',
            f"attempt server-direct tcp 127.0.0.1 {port}",
            f"attempt postgres-direct tcp 127.0.0.1 {PG_PORT}",
            f"attempt metadata-direct tcp {METADATA} 80",
            "attempt resolve-direct getent hosts example.invalid",
            f"attempt server-proxy proxied http://127.0.0.1:{port}/healthz",
            f"attempt postgres-proxy tunnel https://127.0.0.1:{PG_PORT}/",
            f"attempt metadata-proxy proxied http://{METADATA}/latest/meta-data/",
            "attempt unlisted-proxy tunnel https://example.invalid/",
            # A grandchild in its own session, ignoring SIGTERM and SIGHUP, named by the marker.
            f"(setsid bash -c 'trap \"\" TERM HUP INT; exec -a {marker} sleep 600' "
            "</dev/null >/dev/null 2>&1 &)",
            "echo DAEMON-STARTED",
            "for _ in $(seq 600); do [ -e release ] && break; sleep 0.1; done",
            "echo ATTACK-DONE",
        ]
    )


def host_processes(needle: str) -> list[int]:
    """PIDs of the host's processes whose command line contains ``needle`` (this test's own excepted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> str | None:
    """None: the default SQLite store, ``<data-dir>/factory.db``; else a PostgreSQL URL."""
    return None if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


@pytest.fixture
def served(tmp_path: Path, store: str | None) -> Iterator[Served]:
    # Default sandbox and network settings; two workers (serve's default) so a second run can be alive.
    with serving(tmp_path / "data", "--harness", "command", "--command", COMMAND, workers=2,
                 database=store, log=tmp_path / "serve.log") as server:  # fmt: skip
        yield server


def logs(served: Served, run_id: str) -> list[str]:
    return [line["text"] for line in served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"]]


def line_of(served: Served, run_id: str, prefix: str) -> str:
    def seen() -> str | None:
        found = [line for line in logs(served, run_id) if line.startswith(prefix)]
        return found[0] if found else None

    found: str = wait_for(seen, 60, f"{prefix!r} in run {run_id}", alive=[served.proc], logs=[served.log])
    return found


def start(served: Served, prompt: str) -> str:
    status, body = served.post("/api/v1/agent/run", {"prompt": prompt})
    assert status == 200, body
    return str(body["run_id"])


def finished(served: Served, run_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run: dict[str, Any] = served.get(f"/api/v1/agent/runs/{run_id}")
        return run if run["state"] in FINISHED else None

    return wait_for(done, 60, f"run {run_id} to finish", alive=[served.proc], logs=[served.log])


def test_host_processes_finds_a_live_process_by_its_command_line() -> None:
    marker = f"escape-probe-{uuid.uuid4().hex}"
    proc = subprocess.Popen(["bash", "-c", f"exec -a {marker} sleep 60"])
    try:
        assert wait_for(lambda: host_processes(marker), 10, "the probe to show in /proc") == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert host_processes(marker) == []


def test_a_run_on_default_settings_cannot_escape_its_sandbox(served: Served, tmp_path: Path) -> None:
    data = served.data_dir
    key = (data / "secret.key").read_text().strip()
    victim = start(served, VICTIM)
    victim_ws = Path(line_of(served, victim, "VICTIM-WS ").split(" ", 1)[1])
    assert (victim_ws / "victim.txt").read_text() == "victim-private\n"  # it is there, on the host

    marker = f"escape-daemon-{uuid.uuid4().hex}"
    attacker = start(served, attack(data, victim_ws, served.port, marker))
    attacker_ws = Path(line_of(served, attacker, "ATTACKER-WS ").split(" ", 1)[1])
    line_of(served, attacker, "DAEMON-STARTED")
    assert host_processes(marker), "the daemon never started: nothing to prove"
    (attacker_ws / "release").touch()
    run = finished(served, attacker)
    survivors = host_processes(marker) + host_processes(str(attacker_ws))
    assert survivors == [], [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in survivors]
    assert run["state"] == "SUCCEEDED", run
    assert run["sandbox"]["kind"] == "bwrap", run

    output = logs(served, attacker)
    outcomes = {
        parts[1]: (parts[2], parts[3] if len(parts) > 3 else "")
        for parts in (line.split(" ", 3) for line in output if line.startswith("ESCAPE "))
    }
    # Written into the sandbox's private root, beside its own workspace only; not on the host (below).
    how, listed = outcomes.pop("write-workspace-root")
    assert (how, listed.split()) == ("reached", ["planted", attacker_ws.name]), output
    assert [name for name, (how, _) in outcomes.items() if how != "blocked"] == [], "\n".join(output)
    assert len(outcomes) == 14, output

    def says(name: str, *texts: str) -> None:
        detail = outcomes[name][1]
        assert any(text in detail for text in texts), (name, detail)

    # The data directory and the other workspace are not in the sandbox at all.
    for name in ("read-key", "read-db", "list-other-workspace", "read-other-workspace"):
        says(name, "No such file or directory")
    says("write-data-dir", "Directory nonexistent")
    says("write-usr", "Read-only file system")
    # Nothing listens on the sandbox's own loopback; it has no route anywhere else.
    says("server-direct", "Connection refused")
    says("postgres-direct", "Connection refused")
    says("metadata-direct", "Network is unreachable")
    # resolve-direct: getent only fails (exit 2, nothing printed): no resolver is reachable.
    # The proxy refuses by the policy, before DNS and before connecting.
    says("server-proxy", "403")
    says("metadata-proxy", "403")
    says("postgres-proxy", "connect=403")
    says("unlisted-proxy", "connect=403")
    refused = [e["data"] for e in run_events(served, attacker) if e["kind"] == "egress_refused"]
    reason = "not on the network allowlist"
    assert refused == [
        {"host": "127.0.0.1", "port": served.port, "reason": reason},
        {"host": "127.0.0.1", "port": PG_PORT, "reason": reason},
        {"host": METADATA, "port": 80, "reason": reason},
        {"host": "example.invalid", "port": 443, "reason": reason},
    ], refused

    # Writes went nowhere on the host; the secret never left it.
    assert not (data / "planted").exists()
    assert not (attacker_ws.parent / "planted").exists()
    assert not Path("/usr/planted").exists()
    assert key not in "\n".join(output) + repr(run)
    (victim_ws / "release").touch()
    assert finished(served, victim)["state"] == "SUCCEEDED"


def test_claude_code_cannot_read_the_server_s_files_through_its_own_tools(tmp_path: Path) -> None:
    """The same reads by Claude Code's own tools (Read, Bash), scripted by its model, on a worker with the
    default sandbox: every tool result says it failed, and the key is nowhere the run left anything."""
    claude = installed_cli("claude", "@anthropic-ai/claude-code")
    script = Script([])
    data = tmp_path / "data"
    with ScriptedServer(anthropic_app(script)) as model:
        env = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"}
        passed = [arg for name in env for arg in ("--agent-env", name)]
        with serving(data, "--harness", "claude", "--agent-cli", f"claude={claude}", "--command", COMMAND,
                     *passed, workers=2, env=env, log=tmp_path / "serve.log") as served:  # fmt: skip
            key = (data / "secret.key").read_text().strip()
            status, body = served.post(
                "/api/v1/agent/run", {"prompt": VICTIM, "config": {"harness": {"type": "command"}}}
            )
            assert status == 200, body
            victim = str(body["run_id"])
            victim_ws = Path(line_of(served, victim, "VICTIM-WS ").split(" ", 1)[1])
            d, v = shlex.quote(str(data)), shlex.quote(str(victim_ws))
            script.extend(
                [
                    ToolCall("Read", {"file_path": str(data / "secret.key")}),
                    ToolCall("Bash", {"command": f"cat {d}/secret.key; ls -la {v}; ls {d}"}),
                    ToolCall(
                        "Bash",
                        {
                            "command": f"curl -sS -m 10 --noproxy '*' http://127.0.0.1:{served.port}/healthz;"
                            f" curl -sS -m 10 -o /dev/null -w 'proxied=%{{http_code}}'"
                            f" http://127.0.0.1:{served.port}/healthz"
                        },
                    ),
                    Text("Could not get anything."),
                ]
            )
            run_id = start(served, "An alert fired: look around.")
            run = finished(served, run_id)
            output = logs(served, run_id)
            events = run_events(served, run_id)
            (victim_ws / "release").touch()
            finished(served, victim)

    assert run["state"] == "SUCCEEDED", (run["status_message"], output[-40:])
    assert run["sandbox"]["kind"] == "bwrap", run
    results = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert len(results) == 3, events
    read, shell, network = (str(r["output"]) for r in results)
    assert "does not exist" in read or "No such file" in read, read
    assert shell.count("No such file or directory") == 3, shell  # the key, the other workspace, the data dir
    assert "Connection refused" in network or "Couldn't connect" in network, network
    assert "proxied=403" in network, network
    refused = [e["data"] for e in events if e["kind"] == "egress_refused"]
    assert refused == [{"host": "127.0.0.1", "port": served.port, "reason": "not on the network allowlist"}]
    seen = "\n".join(output) + repr(events) + repr(run) + repr([r.body for r in model.recorder.requests])
    assert key not in seen
