"""``kill -9`` of ``factoryctl serve`` mid-stream loses no acknowledged delivery and runs nothing twice.

A real server process on SQLite takes a continuous stream of deliveries; it is killed with SIGKILL while
requests are in flight, restarted on the same data directory, and the sender retries whatever did not
get a 202. Every delivery acknowledged before the crash must be in the log as Accepted with exactly one
run per matching automation, and no delivery may have started an automation twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from cryptography.fernet import Fernet
from serve_support import free_port, wait_ready
from sqlalchemy import select

from store import ids
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.models import Automation, AutomationWebhook, Delivery, Factory, Run, Webhook
from store.teams import ensure_team

pytestmark = pytest.mark.slow
TOKEN = "crash-test-token-value"


async def _seed(url: str, key: str) -> tuple[str, list[str]]:
    """A factory with a token webhook and two automations (one filtered to even deliveries)."""
    engine = create_engine(url)
    await migrate(engine)
    clock, box = SystemClock(), SecretBox.from_setting(key)
    now = clock.now()
    async with session_factory(engine)() as s, s.begin():
        team = await ensure_team(s)
        info = await secret_store.create(s, box, clock, team.id, "crash-secret", TOKEN)
        factory = Factory(
            uid=ids.new_id(ids.FACTORY), team_id=team.id, name="crash", managed_by="api",
            agents={"foreman": {}}, conditions=[], created_at=now, updated_at=now,
        )  # fmt: skip
        hook = Webhook(
            uid=ids.new_id(ids.WEBHOOK), team_id=team.id, factory_uid=factory.uid, name="stream",
            auth_mode="token", secret_name="crash-secret", secret_version=info.version, enabled=True,
            managed_by="api", created_at=now, updated_at=now,
        )  # fmt: skip
        s.add_all([factory, hook])
        await s.flush()
        automation_uids = []
        for name, flt in (("all", None), ("even", {"even": True})):
            uid = ids.new_id(ids.AUTOMATION)
            s.add(
                Automation(
                    uid=uid, team_id=team.id, factory_uid=factory.uid, name=name, enabled=True,
                    agent="foreman", config={}, prompt=f"Handle it ({name}).", triggers=[],
                    created_at=now, updated_at=now,
                )
            )  # fmt: skip
            await s.flush()
            s.add(
                AutomationWebhook(
                    automation_uid=uid, trigger_index=0, webhook_uid=hook.uid, payload_filter=flt
                )
            )
            automation_uids.append(uid)
    await engine.dispose()
    return hook.uid, automation_uids


def _start(data_dir: Path, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data_dir), "serve", "--workers", "0"]
    cmd += ["--port", str(port), "--delivery-rate-limit", "1000000"]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


async def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    await wait_ready(base, proc, log, seconds=15)


async def _post(http: aiohttp.ClientSession, url: str, n: int) -> int | None:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Factory-Delivery-Id": f"d-{n}"}
    try:
        async with http.post(url, json={"n": n, "even": n % 2 == 0}, headers=headers) as resp:
            await resp.read()
            return resp.status
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None


async def _stream_and_kill(url: str, proc: subprocess.Popen[bytes]) -> dict[int, int | None]:
    """Post from 8 concurrent senders; SIGKILL the server once ~150 deliveries were acknowledged."""
    results: dict[int, int | None] = {}
    counter = iter(range(1_000_000))
    acked = 0
    killed = False

    async def sender(http: aiohttp.ClientSession) -> None:
        nonlocal acked, killed
        while True:
            n = next(counter)
            results[n] = status = await _post(http, url, n)
            if status == 202:
                acked += 1
                if acked >= 150 and not killed:  # other senders still have requests in flight
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
            elif status is None and killed:
                return

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await asyncio.wait_for(asyncio.gather(*(sender(http) for _ in range(8))), 15)
    proc.wait(5)
    return results


async def _entries(url: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    engine = create_engine(url)
    async with engine.connect() as conn:
        deliveries = (await conn.execute(select(Delivery.delivery_id, Delivery.status))).all()
        runs = (await conn.execute(select(Run.delivery_id, Run.automation_id))).all()
    await engine.dispose()
    return [tuple(r) for r in deliveries], [tuple(r) for r in runs]  # type: ignore[misc]


async def _scenario(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    data_dir = tmp_path / "data"
    url = f"sqlite+aiosqlite:///{data_dir / 'factory.db'}"
    data_dir.mkdir()
    hook_uid, (all_uid, even_uid) = await _seed(url, key)
    env = {**os.environ, "FACTORY_SECRET_KEY": key, "FACTORY_DATA_DIR": str(data_dir)}
    env.pop("FACTORY_DATABASE_URL", None)
    port, log = free_port(), tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    ingress_url = f"{base}/webhooks/w/{hook_uid}"

    proc = _start(data_dir, port, env, log)
    await _wait_ready(base, proc, log)
    results = await _stream_and_kill(ingress_url, proc)
    acked = {n for n, status in results.items() if status == 202}
    unacked = set(results) - acked
    assert len(acked) >= 150 and unacked, "the kill must land mid-stream"
    assert {results[n] for n in unacked} == {None}  # only connection failures, never an error status

    proc = _start(data_dir, port, env, log)
    try:
        await _wait_ready(base, proc, log)
        async with aiohttp.ClientSession() as http:  # the sender retries everything not acknowledged
            retried = await asyncio.gather(*(_post(http, ingress_url, n) for n in sorted(unacked)))
        assert set(retried) == {202}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)

    deliveries, runs = await _entries(url)
    accepted = Counter(d for d, status in deliveries if status == "Accepted")
    assert all(count == 1 for count in accepted.values())
    assert set(accepted) == {f"d-{n}" for n in results}  # every delivery, acked or retried, once
    per_automation = Counter(runs)
    assert all(count == 1 for count in per_automation.values()), "an automation ran twice for a delivery"
    for n in results:
        wanted = {all_uid, even_uid} if n % 2 == 0 else {all_uid}
        assert {a for d, a in runs if d == f"d-{n}"} == wanted, f"d-{n}"


def test_kill_9_loses_no_acknowledged_delivery(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
