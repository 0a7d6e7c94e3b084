"""The self-hosted worker against the real app on a real socket: what each kind of failure does.

The retry policy (docs/workers.md) promises: a final report outlives a server restart; a refused
key (401/403) stops the worker with exit code 1; a lost lease (409) abandons the run, stopping its
harness and leaving the run as the server decided; a report whose answer was lost is recognised
as recorded when repeated.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import FINISHED, LocalServer, LossyProxy, Store, gone, wait_until

from factoryctl.worker.agent import RemoteWorker
from store.crypto import SecretBox

HOST = "myhost"
# Records its process ID, echoes the prompt, then sleeps for the run's model ID seconds.
SLEEPER = 'echo $$ > "$PIDS/$FACTORY_RUN_ID.pid"; cat; exec sleep {model}'


@pytest.fixture
async def servers(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await servers(**settings)`` starts the real app; every server is stopped afterwards."""
    started: list[LocalServer] = []

    async def start(**settings: Any) -> LocalServer:
        server = LocalServer(engine, box, tmp_path / "data", claim_wait_max_seconds=1, **settings)
        started.append(server)
        return await server.start()

    yield start
    for server in started:
        await server.stop()


def worker(url: str, key: str, tmp_path: Path, command: str = SLEEPER) -> RemoteWorker:
    (tmp_path / "pids").mkdir(exist_ok=True)
    return RemoteWorker(
        url,
        key,
        HOST,
        harness="command",
        command=command,
        workspace_root=tmp_path / "ws",
        wait_seconds=1,
        harness_env={"PATH": os.environ["PATH"], "PIDS": str(tmp_path / "pids")},
    )


async def pid_of(tmp_path: Path, run_id: str) -> int:
    path = tmp_path / "pids" / f"{run_id}.pid"

    def read() -> int | None:
        text = path.read_text().strip() if path.exists() else ""
        return int(text) if text else None

    return await wait_until(read, f"the harness of {run_id} to start")


async def finish(remote: RemoteWorker, task: asyncio.Task[int]) -> int:
    remote.stop.set()
    return await asyncio.wait_for(task, 20)


async def test_a_final_report_outlives_a_server_restart(
    servers: Callable[..., Any], store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="factoryctl")
    server = await servers(lease_seconds=60)
    key = await store.key("worker", [HOST])
    release = tmp_path / "release"
    command = f"cat; echo; while [ ! -e {release} ]; do sleep 0.05; done; echo finished"
    remote = worker(server.url, key, tmp_path, command)
    task = asyncio.create_task(remote.run())
    try:
        run_id = await store.new_run(HOST, prompt="before the restart\n")
        await store.wait_state(run_id, {"INPROGRESS"})

        async def prompt_logged() -> bool:
            return ("stdout", "before the restart") in await store.logs(run_id)

        await wait_until(prompt_logged, "the harness output to reach the server")

        await server.stop()
        release.touch()  # the run ends while nobody listens
        report = f"retrying POST /api/v1/workers/runs/{run_id}/state"
        await wait_until(
            lambda: any(r.getMessage().startswith(report) for r in caplog.records),
            "the worker to retry its final report",
        )
        await server.start()  # same port, same database: a restart

        run = await store.wait_state(run_id, FINISHED, within=30)
        assert run.state == "SUCCEEDED", run.status_message
        await wait_until(lambda: remote.completed == 1, "the worker to count the run")
        assert not task.done()  # it serves on
        later = await store.new_run(HOST, prompt="after the restart\n")
        assert (await store.wait_state(later, FINISHED)).state == "SUCCEEDED"
    finally:
        release.touch()
        assert await finish(remote, task) == 0


async def test_a_key_revoked_mid_run_stops_the_worker_with_exit_1(
    servers: Callable[..., Any], store: Store, tmp_path: Path
) -> None:
    server = await servers(lease_seconds=3)  # heartbeats every second
    key = await store.key("worker", [HOST])
    remote = worker(server.url, key, tmp_path)
    task = asyncio.create_task(remote.run())
    try:
        run_id = await store.new_run(HOST, model="60")
        pid = await pid_of(tmp_path, run_id)
        await store.revoke(key)
        assert await asyncio.wait_for(task, 20) == 1  # the next heartbeat is refused (401)
    finally:
        remote.stop.set()
        await asyncio.wait_for(task, 20)
    assert remote.fatal is not None and "refused" in remote.fatal and "401" in remote.fatal
    await wait_until(lambda: gone(pid), "the harness to be stopped")
    run = await store.run(run_id)
    assert run.state == "INPROGRESS"  # nothing more could be reported: the lease decides
    assert await store.lapse_lease(run_id) == 1
    run = await store.run(run_id)
    assert run.state == "ERROR" and run.status_message is not None
    assert run.status_message["error_code"] == "resource_unavailable"


@pytest.mark.parametrize("hosts", [None, ["otherhost"]], ids=["unknown-key-401", "other-host-403"])
async def test_a_refused_claim_stops_the_worker_with_exit_1(
    servers: Callable[..., Any], store: Store, tmp_path: Path, hosts: list[str] | None
) -> None:
    server = await servers()
    key = "fk_not_a_key" if hosts is None else await store.key("worker", hosts)
    run_id = await store.new_run(HOST)
    remote = worker(server.url, key, tmp_path)
    assert await asyncio.wait_for(remote.run(), 20) == 1
    status = "401" if hosts is None else "403"
    assert remote.fatal is not None and status in remote.fatal
    assert await store.state(run_id) == "QUEUED"  # never claimed


async def test_a_lost_lease_abandons_the_run_and_the_worker_serves_on(
    servers: Callable[..., Any], store: Store, tmp_path: Path
) -> None:
    server = await servers(lease_seconds=3)  # heartbeats every second
    key = await store.key("worker", [HOST])
    remote = worker(server.url, key, tmp_path)
    task = asyncio.create_task(remote.run())
    try:
        run_id = await store.new_run(HOST, model="60")
        pid = await pid_of(tmp_path, run_id)
        # The worker looked dead to the server (a partition, a paused VM): the reaper ended the run.
        assert await store.lapse_lease(run_id) == 1
        await wait_until(lambda: gone(pid), "the next heartbeat's 409 to stop the harness")
        await wait_until(lambda: not remote.running, "the worker to let go of the run")
        run = await store.run(run_id)
        assert run.state == "ERROR" and run.status_message is not None  # as the server decided
        assert run.status_message["error_code"] == "resource_unavailable"

        quick = await store.new_run(HOST, model="0")
        assert (await store.wait_state(quick, FINISHED)).state == "SUCCEEDED"
    finally:
        assert await finish(remote, task) == 0


async def test_a_report_whose_answer_was_lost_counts_as_recorded(
    servers: Callable[..., Any], store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="factoryctl")
    server = await servers()
    proxy = await LossyProxy(server.url).start()
    key = await store.key("worker", [HOST])
    proxy.lose_answer("/state")
    remote = worker(proxy.url, key, tmp_path)
    task = asyncio.create_task(remote.run())
    try:
        run_id = await store.new_run(HOST, model="0")
        assert (await store.wait_state(run_id, FINISHED)).state == "SUCCEEDED"
        await wait_until(lambda: remote.completed == 1, "the worker to finish the run")
        assert proxy.lost["/state"] == 1 and proxy.hits["/state"] == 2  # landed, lost, repeated: 409
        assert any("SUCCEEDED was already recorded" in r.getMessage() for r in caplog.records)
        assert not any("abandoned" in r.getMessage() for r in caplog.records)
    finally:
        assert await finish(remote, task) == 0
        await proxy.stop()
