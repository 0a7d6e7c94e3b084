"""A self-hosted worker's sandboxed run reports its refused destinations over HTTP (issue 27): the real
app on a real socket, ``RemoteWorker`` with the command harness in the real bubblewrap, its egress proxy
refusing a server on the host's loopback; the ``egress_refused`` event reaches the run's event log through
``POST /workers/runs/{id}/events``. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import FINISHED, LocalServer, Store

from factoryctl.worker.agent import RemoteWorker
from factoryctl.worker.sandbox import Sandbox
from store.crypto import SecretBox
from store.models import RunEvent

HOST = "myhost"


async def test_a_refused_destination_reaches_the_server_as_an_event(
    engine: AsyncEngine, box: SecretBox, store: Store, tmp_path: Path
) -> None:
    listener = socket.socket()  # stands for the database or the API on the worker's machine
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    server = await LocalServer(engine, box, tmp_path / "data", claim_wait_max_seconds=1).start()
    key = await store.key("worker", [HOST])
    command = f"cat >/dev/null; curl -sS -m 10 http://127.0.0.1:{port}/; echo; curl -sS -m 10 http://127.0.0.1:{port}/"
    remote = RemoteWorker(
        server.url, key, HOST, harness="command", command=command, workspace_root=tmp_path / "ws",
        wait_seconds=1, harness_env={"PATH": os.environ["PATH"]}, sandbox=Sandbox(), sandbox_required=True,
    )  # fmt: skip
    task = asyncio.create_task(remote.run())
    try:
        run_id = await store.new_run(HOST)
        run = await store.wait_state(run_id, FINISHED, within=30)
        assert run.state == "SUCCEEDED", run.status_message
    finally:
        remote.stop.set()
        await asyncio.wait_for(task, 20)
        await server.stop()
        listener.close()
    async with store.sessions() as s:
        rows = await s.scalars(
            select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == "egress_refused")
        )
        refused = [row.data for row in rows]
    assert refused == [{"host": "127.0.0.1", "port": port, "reason": "not on the network allowlist"}]  # once
    texts = [text for _stream, text in await store.logs(run_id)]
    assert texts.count(f"egress to 127.0.0.1:{port} refused: not on the network allowlist") == 2
    assert f"network: refused 127.0.0.1:{port} (not on the network allowlist)" in texts
