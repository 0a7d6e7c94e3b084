"""A v1alpha1 runner on a self-hosted worker with real bubblewrap (docs/workers.md, "Runners and skills"):
its ``setupCommands`` run inside the run's sandbox, its ``instanceShape`` memory becomes the run's memory
limit (lower than the worker's), and what the worker cannot honour (vCPUs, the docker image) is said on
the run's log."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import builders
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import FINISHED, LocalServer, Store

from factoryctl.worker.agent import RemoteWorker
from factoryctl.worker.limits import Limits
from factoryctl.worker.sandbox import Sandbox
from store import ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import FactoryObject

HOST = "myhost"
BWRAP = "/usr/bin/bwrap"
RUNNER = {
    "description": None,
    # PID 1 of a bubblewrap sandbox is bwrap's own init; on the worker's host it is not.
    "setup_commands": ['test "$(cat /proc/1/comm)" = bwrap && echo "setup in the sandbox"'],
    "instance_shape": {"vcpus": 2, "memory_gb": 0.0625},
    "platform": {"os": "linux", "arch": "x86_64", "docker_image": "ubuntu:24.04", "mac_version": None},
}
pytestmark = pytest.mark.skipif(not os.path.exists(BWRAP), reason="bubblewrap is not installed")


async def runner_run(store: Store) -> str:
    clock = SystemClock()
    async with store.sessions() as s, s.begin():
        team = await builders.team(s, "default")
        factory = await builders.factory(s, clock, team.id, "defs")
        s.add(
            FactoryObject(
                uid=ids.new_id("rn"),
                team_id=team.id,
                factory_uid=factory.uid,
                kind="runner",
                name="small",
                spec=RUNNER,
                created_at=clock.now(),
                updated_at=clock.now(),
            )
        )
        config = {"worker_host": HOST, "runner": "small"}
        run = await builders.run(s, clock, team.id, agent_config=config, factory_uid=factory.uid)
        return run.run_id


async def test_a_runners_shape_limits_memory_and_its_setup_runs_in_the_sandbox(
    engine: AsyncEngine, box: SecretBox, store: Store, tmp_path: Path
) -> None:
    server = await LocalServer(engine, box, tmp_path / "data", claim_wait_max_seconds=1).start()
    remote = RemoteWorker(
        server.url,
        await store.key("worker", [HOST]),
        HOST,
        harness="command",
        command="cat >/dev/null; python3 -c \"import time; b = b'x' * (256 * 1024 * 1024); time.sleep(60)\"",
        workspace_root=tmp_path / "ws",
        wait_seconds=1,
        harness_env={"PATH": "/usr/bin:/bin"},
        sandbox=Sandbox(BWRAP),
        limits=Limits(),  # 4 GiB: the shape's 64 MiB is lower
    )
    task = asyncio.create_task(remote.run())
    try:
        run_id = await runner_run(store)
        run = await store.wait_state(run_id, FINISHED, within=30)
    finally:
        remote.stop.set()
        assert await asyncio.wait_for(task, 30) == 0
        await server.stop()
    assert run.state == "FAILED" and run.status_message is not None, run.status_message
    assert run.status_message["error_code"] == "memory_limit_exceeded"
    assert "over its memory limit of 64 MiB" in run.status_message["message"]
    logs = [text for _stream, text in await store.logs(run_id)]
    assert "setup in the sandbox" in "\n".join(logs), logs
    notes = [line for line in logs if line.startswith("runner 'small'")]
    assert any("docker image 'ubuntu:24.04' is not used" in line for line in notes), notes
    assert any("the run's memory limit is 64 MiB" in line for line in notes), notes
    assert any("2 vCPUs is not enforced" in line for line in notes), notes
