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
from collections import Counter
from pathlib import Path

import aiohttp
import builders
import pytest
from cryptography.fernet import Fernet
from serve_support import committed, serving

from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.models import Delivery, Run

pytestmark = pytest.mark.slow
TOKEN = "crash-test-token-value"


async def _seed(url: str, key: str) -> tuple[str, list[str]]:
    """A factory with a token webhook and two automations (one filtered to even deliveries)."""
    engine = create_engine(url)
    await migrate(engine)
    clock, box = SystemClock(), SecretBox.from_setting(key)
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        info = await builders.secret(s, box, clock, team.id, "crash-secret", TOKEN)
        factory = await builders.factory(s, clock, team.id, "crash")
        hook = await builders.webhook(
            s, clock, team.id, factory.uid, "stream", secret_name="crash-secret", secret_version=info.version
        )
        automation_uids = []
        for name, flt in (("all", None), ("even", {"even": True})):
            automation = await builders.automation(
                s,
                clock,
                team.id,
                factory.uid,
                name,
                [builders.webhook_trigger([hook.uid], flt)],
                prompt=f"Handle it ({name}).",
            )
            automation_uids.append(automation.uid)
    await engine.dispose()
    return hook.uid, automation_uids


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


async def _post_all(url: str, numbers: list[int]) -> list[int | None]:
    async with aiohttp.ClientSession() as http:
        return await asyncio.gather(*(_post(http, url, n) for n in numbers))


def test_kill_9_loses_no_acknowledged_delivery(db_url: str, tmp_path: Path) -> None:
    """On SQLite (the writer thread's group commit) and PostgreSQL (concurrent committers) alike."""
    key = Fernet.generate_key().decode()
    data_dir = tmp_path / "data"
    url = db_url
    data_dir.mkdir()
    hook_uid, (all_uid, even_uid) = asyncio.run(_seed(url, key))
    env, log = {"FACTORY_SECRET_KEY": key}, tmp_path / "serve.log"
    no_limit = ("--delivery-rate-limit", "1000000")

    with serving(data_dir, *no_limit, env=env, log=log, database=url) as served:
        ingress_url = f"{served.url}/webhooks/w/{hook_uid}"
        results = asyncio.run(_stream_and_kill(ingress_url, served.proc))
    acked = {n for n, status in results.items() if status == 202}
    unacked = set(results) - acked
    assert len(acked) >= 150 and unacked, "the kill must land mid-stream"
    assert {results[n] for n in unacked} == {None}  # only connection failures, never an error status

    with serving(data_dir, *no_limit, env=env, log=log, port=served.port, database=url):  # the same URL
        retried = asyncio.run(_post_all(ingress_url, sorted(unacked)))  # the sender retries the unacked
        assert set(retried) == {202}

    deliveries = committed(url, Delivery.delivery_id, Delivery.status)
    runs = committed(url, Run.delivery_id, Run.automation_id)
    accepted = Counter(d for d, status in deliveries if status == "Accepted")
    assert all(count == 1 for count in accepted.values())
    assert set(accepted) == {f"d-{n}" for n in results}  # every delivery, acked or retried, once
    per_automation = Counter(runs)
    assert all(count == 1 for count in per_automation.values()), "an automation ran twice for a delivery"
    for n in results:
        wanted = {all_uid, even_uid} if n % 2 == 0 else {all_uid}
        assert {a for d, a in runs if d == f"d-{n}"} == wanted, f"d-{n}"
