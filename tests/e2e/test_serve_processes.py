"""``factoryctl serve --processes N`` (docs/operations.md, "Several processes"), with real processes.

- On PostgreSQL, ``--processes 2``: connections are answered by both processes (each tags its log lines
  with ``"process": INDEX``), deliveries get 202 from either, ``/readyz`` and a forced reconcile answer
  alike in both, the reconciler runs in the primary only and the service-hosted worker in the workers'
  process the primary started (a queued run is executed once);
  a secondary killed with ``kill -9`` is started again and the port keeps answering;
  SIGTERM stops the whole group, exit 0.
- ``kill -9`` of the primary: the secondaries notice and exit by themselves.
- A SQLite store, ``--processes 0`` or a value that is not a number: exit 2 and a message, nothing started.

Every wait is on a condition with a deadline; each PostgreSQL case uses a scratch database of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import builders
import httpx
import pytest
from cryptography.fernet import Fernet
from serve_support import (
    Served,
    committed,
    log_records,
    process_alive,
    reconcile_records,
    run_cli,
    serving,
    wait_for,
)

from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, session_factory
from store.models import Run

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.slow
KEY = Fernet.generate_key().decode()
ENV = {"FACTORY_SECRET_KEY": KEY}
SPREAD = 40  # requests on fresh connections; all landing in one of two processes would be a 2**-39 chance


def _ready(log: Path) -> dict[int, int]:
    """{secondary index: pid} of the latest ``server process ready`` record of each."""
    return {r["secondary"]: r["pid"] for r in log_records(log) if r.get("msg") == "server process ready"}


def _answered_by(log: Path, method: str, path: str) -> Counter[int]:
    """How many ``method path`` requests each process logged."""
    return Counter(
        r["process"]
        for r in log_records(log)
        if r.get("msg") == "request" and r.get("method") == method and r.get("path") == path
    )


async def _seed(url: str) -> tuple[str, str]:
    """A token webhook ``plain`` (no automation) and ``hook`` (with one); their uids."""
    engine = create_engine(url)
    clock, box = SystemClock(), SecretBox.from_setting(KEY)
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        factory = await builders.factory(s, clock, team.id, "seeded")
        uids = await builders.token_webhooks(s, box, clock, team.id, factory.uid, ("plain", "hook"))
        await builders.automation(
            s, clock, team.id, factory.uid, "triage", [builders.webhook_trigger([uids["hook"]])], prompt="Go."
        )
    await engine.dispose()
    return uids["plain"], uids["hook"]


async def _fresh_connections(method: str, urls: list[str], **kwargs: Any) -> list[int]:
    """Each request on a new connection (the kernel picks a process per connection); the statuses."""
    connector = aiohttp.TCPConnector(force_close=True, limit=10)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def one(url: str) -> int:
            async with http.request(method, url, **kwargs) as resp:
                await resp.read()
                return resp.status

        return await asyncio.gather(*(one(url) for url in urls))


def _deliver(server: Served, uid: str, name: str, ids: list[str]) -> list[int]:
    async def go() -> list[int]:
        connector = aiohttp.TCPConnector(force_close=True, limit=10)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def one(delivery_id: str) -> int:
                headers = {"Authorization": f"Bearer token-{name}", "X-Factory-Delivery-Id": delivery_id}
                async with http.post(f"{server.url}/webhooks/w/{uid}", json={}, headers=headers) as r:
                    await r.read()
                    return r.status

            return await asyncio.gather(*(one(i) for i in ids))

    return asyncio.run(go())


def test_two_processes_share_the_port_and_run_background_jobs_once(tmp_path: Path, pg_url: str) -> None:
    plain, hook = asyncio.run(_seed(pg_url))
    root = tmp_path / "factory"
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: multi\ndescription: from the directory\n")
    (root / "webhooks" / "alerts.yaml").write_text("secretName: plain-secret\n")
    data = tmp_path / "data"
    args = ("--processes", "2", "--repo", root, "--delivery-rate-limit", "10000")
    with serving(data, *args, database=pg_url, env=ENV, workers=1) as server:
        wait_for(lambda: 1 in _ready(server.log), 30, "secondary 1 listening", logs=[server.log])
        first_secondary = _ready(server.log)[1]

        # Both processes answer: deliveries (202 from either), /healthz and /readyz alike.
        statuses = _deliver(server, plain, "plain", [f"evt-{i}" for i in range(SPREAD)])
        assert statuses == [202] * SPREAD
        assert set(_answered_by(server.log, "POST", f"/webhooks/w/{plain}")) == {0, 1}
        readyz = asyncio.run(_fresh_connections("GET", [f"{server.url}/readyz"] * SPREAD))
        assert readyz == [200] * SPREAD
        assert set(_answered_by(server.log, "GET", "/readyz")) == {0, 1}
        bodies = {httpx.get(f"{server.url}/readyz", headers={"Connection": "close"}).text for _ in range(10)}
        assert [json.loads(b) for b in bodies] == [{"status": "ready", "database": "up", "reconciler": "ok"}]

        # The reconciler runs in the primary only; a forced reconcile is accepted by either process.
        multi = wait_for(
            lambda: next(
                (f for f in server.get("/api/v1/factory")["factories"] if f["name"] == "multi"), None
            )
        )
        applied = len(reconcile_records(server.log))
        force = f"{server.url}/api/v1/factory/{multi['uid']}/reconcile"
        headers = {"Authorization": f"Bearer {server.key}"}
        forced = asyncio.run(_fresh_connections("POST", [force] * 16, headers=headers, json={}))
        assert forced == [202] * 16
        assert set(_answered_by(server.log, "POST", f"/api/v1/factory/{multi['uid']}/reconcile")) == {0, 1}
        wait_for(lambda: len(reconcile_records(server.log)) > applied, 10, "a forced reconcile")
        assert {r["process"] for r in reconcile_records(server.log)} == {0}

        # A run queued through either process is executed once, by the service-hosted worker in the
        # workers' process the primary started (process 2: after the primary and its one secondary).
        assert _deliver(server, hook, "hook", ["the-run"]) == [202]
        done = wait_for(
            lambda: [r for r in committed(pg_url, Run.run_id, Run.state, Run.attempt) if r[1] == "SUCCEEDED"],
            20,
            "the run executed",
            logs=[server.log],
        )
        ((run_id, _state, attempt),) = done
        assert attempt == 1
        executed = [
            (r["process"], r["msg"]) for r in log_records(server.log) if f"run {run_id}: " in r["msg"]
        ]
        assert executed == [(2, f"run {run_id}: SUCCEEDED")], executed

        # A secondary killed with -9 is started again; the port keeps answering meanwhile and after.
        os.kill(first_secondary, signal.SIGKILL)
        wait_for(lambda: not process_alive(first_secondary), 5, "the secondary gone")
        restarted = wait_for(
            lambda: _ready(server.log).get(1) not in (None, first_secondary) and _ready(server.log)[1],
            15,
            "secondary 1 restarted",
            alive=[server.proc],
            logs=[server.log],
        )
        assert asyncio.run(_fresh_connections("GET", [f"{server.url}/healthz"] * SPREAD)) == [200] * SPREAD
        assert any(r.get("msg") == "server process exited; restarting" for r in log_records(server.log))

        # SIGTERM stops the whole group; exit 0.
        group = [server.proc.pid, restarted]
        assert server.stop() == 0
    assert not [pid for pid in group if process_alive(pid)]
    text = server.log.read_text()
    assert "Traceback" not in text, text[-3000:]


def test_secondaries_exit_when_the_primary_is_killed(tmp_path: Path, pg_url: str) -> None:
    with serving(tmp_path / "data", "--processes", "2", database=pg_url, env=ENV) as server:
        secondary = wait_for(
            lambda: _ready(server.log).get(1), 30, "secondary 1 listening", logs=[server.log]
        )
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(5)
        wait_for(
            lambda: not process_alive(secondary), 10, "the secondary exiting by itself", logs=[server.log]
        )
    assert any(r.get("msg") == "primary process gone; stopping" for r in log_records(server.log))


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {"FACTORY_PROCESSES": "2"}, "--processes 2 needs PostgreSQL"),
        (("--processes", "0"), {}, "--processes must be a whole number of at least 1, or auto (got '0')"),
        (
            ("--processes", "many"),
            {},
            "--processes must be a whole number of at least 1, or auto (got 'many')",
        ),
    ],
)
def test_refused_process_counts(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    result = run_cli("--data-dir", tmp_path / "data", "serve", *args, env=ENV | env, timeout=30)
    assert result.returncode == 2, result
    assert message in result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was created
