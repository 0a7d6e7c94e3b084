"""The sandbox of run-controlled processes (docs/workers.md, "Sandbox"), with the real bubblewrap: setup
commands and the command harness see their workspace and nothing else of the worker's machine."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from pathlib import Path

import pytest

from factoryctl.worker.environment import prepare_environment
from factoryctl.worker.errors import SandboxUnavailable
from factoryctl.worker.harness import CommandHarness, EchoHarness
from factoryctl.worker.job import Job
from factoryctl.worker.sandbox import (
    ERROR_CODE,
    Sandbox,
    check_layout,
    run_controlled,
    sandbox_for,
    service_environment,
)

SECRET = "the-data-dir-key-0123456789"
PEEK = (
    'for f in "$DATA/secret.key" "$DATA/factory.db" "$OTHER/other.txt" /etc/shadow; do '
    'if cat "$f" >/dev/null 2>&1; then echo "read $f"; else echo "cannot read $f"; fi; done; '
    'ls "$DATA" >/dev/null 2>&1 && echo "listed data" || echo "cannot list data"; '
    'ls "$(dirname "$PWD")" 2>/dev/null | grep -q other && echo "listed root" || echo "cannot list root"; '
    'echo "procs $(ls /proc | grep -c "^[0-9]")"; '
    '(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && echo "connected" || echo "no network"; '
    'echo home > "$HOME/h" && echo "home $HOME"; echo "id $(id -u)"; echo ok > made-here.txt'
)


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A data directory with a key and a database, and two workspaces side by side under one root."""
    data, root = tmp_path / "data", tmp_path / "workspaces"
    data.mkdir()
    (data / "secret.key").write_text(SECRET)
    (data / "factory.db").write_text(f"SQLite {SECRET}")
    (root / "run-a").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "other" / "other.txt").write_text(SECRET)
    return {"data": data, "ws": root / "run-a", "other": root / "other"}


@pytest.fixture
def listener() -> socket.socket:
    """A TCP listener on the host's loopback, standing for the database or the API."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def env_for(layout: dict[str, Path], listener: socket.socket) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "DATA": str(layout["data"]),
        "OTHER": str(layout["other"]),
        "PORT": str(listener.getsockname()[1]),
        "HOME": str(Path.home()),
    }


def seen(lines: list[tuple[str, str]]) -> set[str]:
    return {text for _stream, text in lines}


async def test_setup_commands_reach_only_their_workspace(layout, listener) -> None:
    lines: list[tuple[str, str]] = []

    async def collect(stream: str, text: str) -> None:
        lines.append((stream, text))

    env = env_for(layout, listener)
    await prepare_environment(
        {"setup": [PEEK]}, layout["ws"], base_env=env, on_output=collect, sandbox=Sandbox()
    )
    out = seen(lines)
    assert {
        f"cannot read {layout['data']}/secret.key",
        f"cannot read {layout['data']}/factory.db",
        f"cannot read {layout['other']}/other.txt",
        "cannot read /etc/shadow",
        "cannot list data",
        "cannot list root",
        "no network",
        "home /home/sandbox",
    } <= out, out
    procs = next(int(text.split()[1]) for text in out if text.startswith("procs "))
    assert procs <= 5, out  # bwrap's init, bash and the pipeline: no process of the host
    assert not any(SECRET in text for text in out)
    assert (layout["ws"] / "made-here.txt").read_text() == "ok\n"  # the workspace is writable
    assert not (Path.home() / "h").exists() or (Path.home() / "h").read_text() != "home\n"


async def test_without_a_sandbox_the_same_setup_reads_everything(layout, listener) -> None:
    """The control: what the sandbox stops is reachable on the host (what the attack used)."""
    lines: list[tuple[str, str]] = []

    async def collect(stream: str, text: str) -> None:
        lines.append((stream, text))

    peek = PEEK.replace('"$HOME/h"', '"$PWD/h"')
    await prepare_environment(
        {"setup": [peek]}, layout["ws"], base_env=env_for(layout, listener), on_output=collect
    )
    out = seen(lines)
    assert {f"read {layout['data']}/secret.key", "listed data", "listed root", "connected"} <= out, out


async def test_the_command_harness_and_what_it_starts_run_inside(layout, listener, tmp_path) -> None:
    lines: list[tuple[str, str]] = []

    async def collect(stream: str, text: str) -> None:
        lines.append((stream, text))

    harness = CommandHarness(f"cat >/dev/null; {PEEK}", env=env_for(layout, listener), sandbox=Sandbox())
    job = Job(run_id="run_x", prompt="p")
    outcome = await harness.run(job, layout["ws"], cancel=asyncio.Event(), on_output=collect)
    assert outcome.state == "SUCCEEDED", outcome
    out = seen(lines)
    assert {f"cannot read {layout['data']}/secret.key", "cannot list data", "no network"} <= out, out
    assert (layout["ws"] / "made-here.txt").exists()


async def test_cancelling_kills_everything_in_the_sandbox(layout) -> None:
    nap = f"sleep 300.{secrets.randbelow(10**6):06d}"  # this test's processes, whatever else runs here
    command = f"({nap} & {nap}) & echo started; {nap}"
    harness = CommandHarness(command, env={"PATH": "/usr/bin:/bin"}, grace_seconds=0.5, sandbox=Sandbox())
    cancel = asyncio.Event()
    started = asyncio.Event()

    async def watch(stream: str, text: str) -> None:
        if text == "started":
            started.set()

    job = Job(run_id="r", prompt="")
    task = asyncio.create_task(harness.run(job, layout["ws"], cancel=cancel, on_output=watch))
    await asyncio.wait_for(started.wait(), 10)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while len(_host_processes(nap)) < 3:  # the three sleeps, seen from the host
        assert loop.time() < deadline, _host_processes(nap)
        await asyncio.sleep(0.02)
    cancel.set()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.state == "CANCELLED"
    assert _host_processes(nap) == []


def _host_processes(needle: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmd == needle and state not in ("Z", "X"):
            found.append(f"{cmd.split()[0]} {pid}")
    return found


async def test_secrets_never_appear_on_a_command_line(layout) -> None:
    """Variables reach the sandbox through bwrap's environment, never as ``--setenv`` arguments (every
    user of the machine can read a command line)."""
    argv = Sandbox().argv(["bash", "-c", "true"], layout["ws"])
    assert "--setenv" not in argv and "--clearenv" not in argv
    assert Sandbox.environment({"TOKEN": "x", "HOME": "/root"}) == {
        "TOKEN": "x",
        "HOME": "/home/sandbox",
        "TMPDIR": "/tmp",
    }


def test_a_missing_bwrap_is_reported_and_cached(tmp_path: Path) -> None:
    missing = Sandbox(str(tmp_path / "no-such-bwrap"))
    problem = missing.problem()
    assert problem is not None and "not installed" in problem and "no-such-bwrap" in problem
    assert not missing.available()
    assert Sandbox().available()


async def test_which_runs_need_a_sandbox_and_the_refusal(tmp_path: Path) -> None:
    plain = Job(run_id="r", prompt="p")
    repos_only = Job(run_id="r", prompt="p", environment={"repos": [{"url": "x"}], "setup": []})
    setup = Job(run_id="r", prompt="p", environment={"setup": ["make"]})
    mcp = Job(run_id="r", prompt="p", mcp_servers={"s": {"command": "srv"}, "u": {"url": "https://x"}})
    assert run_controlled(plain, harness=False) == []
    assert run_controlled(repos_only, harness=False) == []
    assert run_controlled(setup, harness=False) == ["environment setup commands"]
    assert run_controlled(mcp, harness=True) == ["stdio MCP servers", "the run's harness"]

    missing = Sandbox(str(tmp_path / "no-such-bwrap"))
    assert await sandbox_for(plain, harness=False, sandbox=missing, required=True) is None
    with pytest.raises(SandboxUnavailable) as refused:
        await sandbox_for(setup, harness=False, sandbox=missing, required=True)
    assert refused.value.error_code == ERROR_CODE == "sandbox_unavailable"
    assert "environment setup commands" in str(refused.value) and "bubblewrap" in str(refused.value)
    # self-hosted --sandbox auto: no working sandbox means the host
    assert await sandbox_for(setup, harness=False, sandbox=missing, required=False) is None
    works = Sandbox()
    assert await sandbox_for(setup, harness=False, sandbox=works, required=True) is works


def test_layouts_that_put_the_data_directory_within_reach_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "workspaces").mkdir(parents=True)
    (tmp_path / "cache").mkdir()
    with pytest.raises(ValueError, match="overlaps"):
        check_layout([data], data / "workspaces")
    with pytest.raises(ValueError, match="overlaps"):
        check_layout([data / "workspaces"], data)  # a workspace root holding the data directory
    with pytest.raises(ValueError, match="overlaps"):
        check_layout([data], tmp_path / "ws", read_only=[tmp_path])
    (tmp_path / "ws" / "shared").mkdir(parents=True)
    with pytest.raises(ValueError, match="overlaps"):
        check_layout([data], tmp_path / "ws", writable=[tmp_path / "ws" / "shared"])
    with pytest.raises(ValueError, match="inside /usr"):
        check_layout([Path("/usr/local/factory")], tmp_path / "ws")
    with pytest.raises(ValueError, match="does not exist"):
        check_layout([data], tmp_path / "ws", read_only=[tmp_path / "missing"])
    check_layout([data], tmp_path / "ws", read_only=[tmp_path / "cache"])


def test_service_hosted_runs_get_only_the_named_parts_of_the_servers_environment() -> None:
    server = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "PGPASSWORD": "pw",
        "ANTHROPIC_API_KEY": "k",
    }
    assert service_environment(server) == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C"}
    assert service_environment(server, ["ANTHROPIC_API_KEY"])["ANTHROPIC_API_KEY"] == "k"


async def test_a_runs_environment_never_reaches_the_bwrap_on_the_host(layout, listener) -> None:
    """A setup writes a ``bwrap`` into its workspace and puts it first on PATH (or preloads a library):
    the next command must still start the real bwrap, which gives the run exactly its environment."""
    lines: list[tuple[str, str]] = []

    async def collect(stream: str, text: str) -> None:
        lines.append((stream, text))

    marker = layout["data"] / "ran-on-the-host"
    fake = f"mkdir -p bin && printf '#!/bin/sh\\ntouch {marker}\\n' > bin/bwrap && chmod +x bin/bwrap"
    spec = {
        "setup": [fake, 'echo "second $FOO $PATH"'],
        "env": {"PATH": "bin:/usr/bin:/bin", "FOO": "bar", "LD_PRELOAD": "./missing.so"},
    }
    await prepare_environment(
        spec, layout["ws"], base_env=env_for(layout, listener), on_output=collect, sandbox=Sandbox()
    )
    assert not marker.exists()
    assert "second bar bin:/usr/bin:/bin" in seen(lines), lines


async def test_the_host_never_writes_through_a_symlink_setup_left(layout, tmp_path) -> None:
    """RESULT.md and PROMPT.md are written by the worker on the host after setup ran: a symlink at either
    name, to the data directory's key or to a new file of the host's, is replaced, never followed."""
    planted = tmp_path / "planted.pth"
    key = layout["data"] / "secret.key"
    setup = f"ln -s {key} RESULT.md; rm -f PROMPT.md; ln -s {planted} PROMPT.md"
    await prepare_environment(
        {"setup": [setup]}, layout["ws"], base_env={"PATH": "/usr/bin:/bin"}, sandbox=Sandbox()
    )
    assert (layout["ws"] / "RESULT.md").is_symlink()
    job = Job(run_id="run_x", prompt="import os; os.system('id')")
    outcome = await EchoHarness().run(job, layout["ws"], cancel=asyncio.Event())
    assert outcome.state == "SUCCEEDED", outcome
    assert key.read_text() == SECRET  # not overwritten by the echo report
    assert not (layout["ws"] / "RESULT.md").is_symlink()
    harness = CommandHarness("cat >/dev/null", env={"PATH": "/usr/bin:/bin"}, sandbox=Sandbox())
    assert (await harness.run(job, layout["ws"], cancel=asyncio.Event())).state == "SUCCEEDED"
    assert not planted.exists()  # the prompt was not written through the dangling symlink
