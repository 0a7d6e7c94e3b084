"""Every harness in the sandbox, and the worker's ``--sandbox`` modes (docs/workers.md, "Sandbox"): the
echo harness's work happens inside bubblewrap with the same result as before; ``--sandbox bwrap`` on a
machine without a working bubblewrap refuses to start (exit 2); ``--sandbox none`` warns at start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factoryctl.worker.harness import EchoHarness
from factoryctl.worker.job import Job
from factoryctl.worker.sandbox import Sandbox

BWRAP = "/usr/bin/bwrap"
needs_bwrap = pytest.mark.skipif(not os.path.exists(BWRAP), reason="bubblewrap is not installed")


async def echo(harness: EchoHarness, job: Job, workspace: Path) -> tuple[str, list[str], str]:
    await asyncio.to_thread(workspace.mkdir)
    await asyncio.to_thread((workspace / "PROMPT.md").write_text, job.prompt)
    lines: list[str] = []

    async def collect(stream: str, text: str) -> None:
        lines.append(f"{stream}: {text}")

    outcome = await harness.run(job, workspace, cancel=asyncio.Event(), on_output=collect)
    return outcome.state, lines, await asyncio.to_thread((workspace / "RESULT.md").read_text)


@needs_bwrap
async def test_the_echo_harness_in_the_sandbox_gives_what_it_gave_on_the_host(tmp_path: Path) -> None:
    job = Job(run_id="run_e", prompt="\n  Fix the bug [echo:sleep=0.2]\nmore", model_id="m-1")
    hosted = await echo(EchoHarness(), job, tmp_path / "host")
    sandboxed = await echo(EchoHarness(sandbox=Sandbox(BWRAP)), job, tmp_path / "box")
    assert sandboxed == hosted
    assert hosted[0] == "SUCCEEDED" and "- first line: Fix the bug [echo:sleep=0.2]" in hosted[2]
    assert not (tmp_path / "box" / ".RESULT.md.echo-tmp").exists()


@needs_bwrap
async def test_the_sandboxed_echo_harness_replaces_a_link_and_honours_its_markers(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "RESULT.md").symlink_to(outside)
    harness = EchoHarness(sandbox=Sandbox(BWRAP))
    done = await harness.run(Job(run_id="r", prompt="hi"), workspace, cancel=asyncio.Event())
    assert done.state == "SUCCEEDED"
    assert outside.read_text() == "untouched" and not (workspace / "RESULT.md").is_symlink()

    failed = await harness.run(Job(run_id="r", prompt="[echo:fail]"), workspace, cancel=asyncio.Event())
    assert failed.status_message is not None and failed.status_message["error_code"] == "echo_fail"
    slow = Job(run_id="r", prompt="[echo:sleep=30]", timeout_seconds=0.3)
    timed_out = await harness.run(slow, workspace, cancel=asyncio.Event())
    assert timed_out.state == "FAILED" and timed_out.status_message is not None
    assert timed_out.status_message["error_code"] == "timeout"
    cancel = asyncio.Event()
    task = asyncio.create_task(
        harness.run(Job(run_id="r", prompt="[echo:sleep=30]"), workspace, cancel=cancel)
    )
    cancel.set()
    assert (await asyncio.wait_for(task, 15)).state == "CANCELLED"


def worker_cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``factoryctl worker`` against a server that does not exist: what happens before it connects."""
    env = {"PATH": os.environ["PATH"], "FACTORY_API_KEY": "fk_test", "HOME": str(tmp_path)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "factoryctl.cli",
            "--data-dir",
            str(tmp_path / "data"),
            "worker",
            "--host-id",
            "box",
            "--server",
            "http://127.0.0.1:9",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_sandbox_bwrap_without_a_working_bubblewrap_refuses_to_start(tmp_path: Path) -> None:
    done = worker_cli("--sandbox", "bwrap", "--bwrap", str(tmp_path / "no-bwrap"), tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--sandbox bwrap, and bubblewrap does not work here" in done.stderr
    assert "not installed" in done.stderr and "apt-get install bubblewrap" in done.stderr


def test_bad_limits_are_refused_at_start(tmp_path: Path) -> None:
    done = worker_cli("--memory-limit", "lots", tmp_path=tmp_path)
    assert done.returncode == 2 and "'lots' is not a size" in done.stderr


def test_sandbox_none_warns_at_start(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "factoryctl.cli",
            "--data-dir",
            str(tmp_path / "data"),
            "worker",
            "--host-id",
            "box",
            "--server",
            "http://127.0.0.1:9",
            "--sandbox",
            "none",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"], "FACTORY_API_KEY": "fk_test", "HOME": str(tmp_path)},
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the warning comes before the worker tries its server
        assert "WARNING: --sandbox none" in first and "each run's log says so too" in first
    finally:
        proc.terminate()
        proc.wait(timeout=30)
