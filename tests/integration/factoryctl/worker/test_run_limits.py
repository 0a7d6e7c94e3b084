"""Limits and the end of a run, with the real app, the self-hosted worker, real bubblewrap and real
processes (docs/workers.md, "Limits"): a run over its memory, process or disk limit ends FAILED with the
limit's error code; cancel and a lost lease leave no process of the run alive, even one that ignores
SIGTERM and double-forked into a session of its own - in the sandbox and with ``--sandbox none``."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import FINISHED, LocalServer, Store, wait_until

from factoryctl.worker.agent import RemoteWorker
from factoryctl.worker.limits import Limits
from factoryctl.worker.sandbox import Sandbox
from store.crypto import SecretBox

HOST = "myhost"
MIB = 1024**2
BWRAP = "/usr/bin/bwrap"
pytestmark = pytest.mark.skipif(not os.path.exists(BWRAP), reason="bubblewrap is not installed")


@pytest.fixture
async def server(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> AsyncIterator[LocalServer]:
    started = await LocalServer(
        engine, box, tmp_path / "data", claim_wait_max_seconds=1, lease_seconds=3
    ).start()
    yield started
    await started.stop()


@pytest.fixture
async def workers(server: LocalServer, store: Store, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await workers(command, sandboxed=..., limits=...)``: a running self-hosted worker; stopped after."""
    running: list[tuple[RemoteWorker, asyncio.Task[int]]] = []
    key = await store.key("worker", [HOST])

    async def start(command: str, *, sandboxed: bool = True, limits: Limits | None = None) -> RemoteWorker:
        remote = RemoteWorker(
            server.url,
            key,
            HOST,
            harness="command",
            command=command,
            workspace_root=tmp_path / "ws",
            wait_seconds=1,
            harness_env={"PATH": "/usr/bin:/bin"},
            sandbox=Sandbox(BWRAP) if sandboxed else None,
            limits=limits or Limits(),
        )
        running.append((remote, asyncio.create_task(remote.run())))
        return remote

    yield start
    for remote, task in running:
        remote.stop.set()
        assert await asyncio.wait_for(task, 30) == 0


def processes_with(token: str) -> list[int]:
    """Live processes (zombies left out) whose environment holds ``KILLTEST=token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if f"KILLTEST={token}".encode() in environ.split(b"\0") and stat[stat.rfind(")") + 2] not in "ZX":
            found.append(int(entry))
    return found


async def failed_with(store: Store, run_id: str) -> tuple[str, str]:
    run = await store.wait_state(run_id, FINISHED, within=30)
    assert run.state == "FAILED", (run.state, run.status_message)
    assert run.status_message is not None
    return run.status_message["error_code"], run.status_message["message"]


async def test_a_run_over_its_memory_limit_fails_naming_it(workers, store: Store) -> None:
    await workers(
        "python3 -c \"import time; b = b'x' * (300 * 1024 * 1024); time.sleep(60)\"",
        limits=Limits(memory_bytes=100 * MIB),
    )
    run_id = await store.new_run(HOST)
    code, message = await failed_with(store, run_id)
    assert code == "memory_limit_exceeded"
    assert "over its memory limit of 100 MiB" in message
    assert (await store.run(run_id)).sandbox == {"kind": "bwrap", "network": "allowlist"}


async def test_a_run_over_its_process_limit_fails_naming_it(workers, store: Store) -> None:
    await workers("for i in $(seq 30); do sleep 60 & done; wait", limits=Limits(processes=12))
    code, message = await failed_with(store, await store.new_run(HOST))
    assert code == "process_limit_exceeded"
    assert "over its process limit of 12" in message


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bwrap", "none"])
async def test_a_run_over_its_disk_limit_fails_naming_it(workers, store: Store, sandboxed: bool) -> None:
    # RLIMIT_FSIZE stops the write one byte over the limit; the watchdog names the breach.
    await workers(
        "head -c 64M /dev/zero > big.bin; sleep 60", sandboxed=sandboxed, limits=Limits(disk_bytes=16 * MIB)
    )
    code, message = await failed_with(store, await store.new_run(HOST))
    assert code == "disk_limit_exceeded"
    assert "over its disk limit of 16 MiB" in message


async def test_a_run_within_its_limits_succeeds(workers, store: Store) -> None:
    await workers("cat; for i in 1 2 3; do sleep 0.2 & done; wait", limits=Limits(MIB * 256, 16, MIB * 64))
    run_id = await store.new_run(HOST, prompt="fine\n")
    run = await store.wait_state(run_id, FINISHED, within=30)
    assert run.state == "SUCCEEDED", run.status_message


# The harness forks a grandchild that ignores SIGTERM, leaves the tree (double fork) and starts its own
# session; the main process ignores SIGTERM too. Every process of it carries KILLTEST in its environment.
STUBBORN = (
    "export KILLTEST={token}; trap '' TERM; "
    "( setsid sh -c 'trap \"\" TERM HUP; while :; do sleep 0.1; done' & ); "
    "cat; while :; do sleep 0.1; done"
)


async def cancel(server: LocalServer, store: Store, run_id: str) -> None:
    member = await store.key("member")
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{server.url}/api/v1/agent/runs/{run_id}/cancel", headers={"Authorization": f"Bearer {member}"}
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bwrap", "none"])
async def test_cancel_leaves_no_process_of_the_run_alive(
    workers, server: LocalServer, store: Store, sandboxed: bool
) -> None:
    token = secrets.token_hex(6)
    await workers(STUBBORN.format(token=token), sandboxed=sandboxed)
    run_id = await store.new_run(HOST)
    await wait_until(lambda: len(processes_with(token)) >= 3, "the run's stubborn processes to start")
    await cancel(server, store, run_id)
    run = await store.wait_state(run_id, FINISHED, within=30)
    assert run.state == "CANCELLED", run.status_message
    assert processes_with(token) == []  # killed before the worker reported the run
    logs = await store.logs(run_id)
    unsandboxed = [text for stream, text in logs if stream == "system" and text.startswith("UNSANDBOXED")]
    assert len(unsandboxed) == (0 if sandboxed else 1)
    assert run.sandbox == (
        {"kind": "bwrap", "network": "allowlist"} if sandboxed else {"kind": "none", "network": "open"}
    )


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bwrap", "none"])
async def test_a_lost_lease_leaves_no_process_of_the_run_alive(
    workers, store: Store, sandboxed: bool
) -> None:
    token = secrets.token_hex(6)
    remote = await workers(STUBBORN.format(token=token), sandboxed=sandboxed)
    run_id = await store.new_run(HOST)
    await wait_until(lambda: len(processes_with(token)) >= 3, "the run's stubborn processes to start")
    assert await store.lapse_lease(run_id) == 1  # the server gave up on the worker
    await wait_until(lambda: not remote.running, "the worker to abandon the run", within=30)
    assert processes_with(token) == []
    assert (await store.run(run_id)).state == "ERROR"
