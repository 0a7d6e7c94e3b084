"""Two ``factoryctl serve`` processes on one PostgreSQL store: one Accepted per identity, shared limits."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
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
from store.db import create_engine, session_factory
from store.models import Automation, AutomationWebhook, Delivery, Factory, Run, Webhook
from store.teams import ensure_team

pytestmark = pytest.mark.slow
RATE_LIMIT = 60


async def _seed(url: str, key: str) -> tuple[dict[str, str], str]:
    """Two token webhooks (``dedup`` with an automation, ``rate``); returns {name: uid}, automation uid."""
    engine = create_engine(url)
    clock, box = SystemClock(), SecretBox.from_setting(key)
    now = clock.now()
    hooks: dict[str, str] = {}
    async with session_factory(engine)() as s, s.begin():
        team = await ensure_team(s)
        factory = Factory(
            uid=ids.new_id(ids.FACTORY), team_id=team.id, name="pair", managed_by="api",
            agents={"foreman": {}}, conditions=[], created_at=now, updated_at=now,
        )  # fmt: skip
        s.add(factory)
        await s.flush()
        for name in ("dedup", "rate"):
            info = await secret_store.create(s, box, clock, team.id, f"{name}-secret", f"token-{name}")
            uid = ids.new_id(ids.WEBHOOK)
            s.add(
                Webhook(
                    uid=uid, team_id=team.id, factory_uid=factory.uid, name=name, auth_mode="token",
                    secret_name=f"{name}-secret", secret_version=info.version, enabled=True, managed_by="api",
                    created_at=now, updated_at=now,
                )
            )  # fmt: skip
            hooks[name] = uid
        automation = ids.new_id(ids.AUTOMATION)
        s.add(
            Automation(
                uid=automation, team_id=team.id, factory_uid=factory.uid, name="triage", enabled=True,
                agent="foreman", config={}, prompt="Triage.", triggers=[], created_at=now, updated_at=now,
            )
        )  # fmt: skip
        await s.flush()
        s.add(AutomationWebhook(automation_uid=automation, trigger_index=0, webhook_uid=hooks["dedup"]))
    await engine.dispose()
    return hooks, automation


async def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    await wait_ready(base, proc, log, seconds=20)


async def _scenario(tmp_path: Path, url: str) -> None:
    key = Fernet.generate_key().decode()
    hooks, automation = await _seed(url, key)
    env = {**os.environ, "FACTORY_SECRET_KEY": key, "FACTORY_DATABASE_URL": url}
    procs: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    logs: list[Path] = []
    try:
        for i in range(2):
            port, log = free_port(), tmp_path / f"serve-{i}.log"
            cmd = [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(tmp_path / f"d{i}"), "serve"]
            cmd += ["--workers", "0", "--port", str(port), "--delivery-rate-limit", str(RATE_LIMIT)]
            with log.open("wb") as out:
                procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))  # noqa: ASYNC220
            bases.append(f"http://127.0.0.1:{port}")
            logs.append(log)
        for base, proc, log in zip(bases, procs, logs, strict=True):
            await _wait_ready(base, proc, log)
        if time.time() % 60 > 55:  # keep both bursts inside one rate window
            await asyncio.sleep(61 - time.time() % 60)

        async with aiohttp.ClientSession() as http:

            async def post(i: int, name: str, delivery_id: str) -> int:
                headers = {"Authorization": f"Bearer token-{name}", "X-Factory-Delivery-Id": delivery_id}
                async with http.post(
                    f"{bases[i % 2]}/webhooks/w/{hooks[name]}", json={"i": i}, headers=headers
                ) as r:
                    await r.read()
                    return r.status

            dedup = await asyncio.gather(*(post(i, "dedup", "same-event") for i in range(50)))
            assert dedup == [202] * 50
            rate = await asyncio.gather(*(post(i, "rate", f"evt-{i}") for i in range(RATE_LIMIT + 20)))
            assert Counter(rate) == {202: RATE_LIMIT, 429: 20}
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(10)

    engine = create_engine(url)
    async with engine.connect() as conn:
        rows = (await conn.execute(select(Delivery.webhook_uid, Delivery.status))).all()
        runs = (await conn.execute(select(Run.automation_id, Run.delivery_id))).all()
    await engine.dispose()
    dedup_statuses = Counter(status for uid, status in rows if uid == hooks["dedup"])
    assert dedup_statuses == {"Accepted": 1, "Duplicate": 49}
    assert [tuple(r) for r in runs] == [(automation, "same-event")]
    assert Counter(status for uid, status in rows if uid == hooks["rate"]) == {"Accepted": RATE_LIMIT}


def test_two_servers_share_dedup_and_limits(tmp_path: Path, pg_template) -> None:
    if pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    url = pg_template.new_database()
    try:
        asyncio.run(_scenario(tmp_path, url))
    finally:
        pg_template.drop(url)
