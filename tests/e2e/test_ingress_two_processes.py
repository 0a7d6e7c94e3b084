"""Two ``factoryctl serve`` processes on one PostgreSQL store: one Accepted per identity, shared limits."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import builders
import pytest
from cryptography.fernet import Fernet
from serve_support import committed, serving

from api.ratelimit.leases import chunk_cap
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, session_factory
from store.models import Delivery, Run

pytestmark = pytest.mark.slow
RATE_LIMIT = 60
REPLICAS = 2
# docs/ingress.md, "Limits": never more than the limit, and a refusal only once at least
# limit - (R - 1) * (c - 1) were admitted in a window after an idle one (c = max(1, limit // 40)): exact here.
LOWEST_ADMITTED = RATE_LIMIT - (REPLICAS - 1) * (chunk_cap(RATE_LIMIT) - 1)


async def _seed(url: str, key: str) -> tuple[dict[str, str], str]:
    """Two token webhooks (``dedup`` with an automation, ``rate``); returns {name: uid}, automation uid."""
    engine = create_engine(url)
    clock, box = SystemClock(), SecretBox.from_setting(key)
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        factory = await builders.factory(s, clock, team.id, "pair")
        hooks = await builders.token_webhooks(s, box, clock, team.id, factory.uid, ("dedup", "rate"))
        automation = await builders.automation(
            s,
            clock,
            team.id,
            factory.uid,
            "triage",
            [builders.webhook_trigger([hooks["dedup"]])],
            prompt="Triage.",
        )
    await engine.dispose()
    return hooks, automation.uid


async def _bursts(bases: list[str], hooks: dict[str, str]) -> tuple[list[int], list[int]]:
    """50 deliveries with one identity to ``dedup``, then ``RATE_LIMIT + 20`` distinct ones to ``rate``,
    alternating between the servers; the statuses answered."""
    async with aiohttp.ClientSession() as http:

        async def post(i: int, name: str, delivery_id: str) -> int:
            headers = {"Authorization": f"Bearer token-{name}", "X-Factory-Delivery-Id": delivery_id}
            async with http.post(
                f"{bases[i % 2]}/webhooks/w/{hooks[name]}", json={"i": i}, headers=headers
            ) as r:
                await r.read()
                return r.status

        dedup = await asyncio.gather(*(post(i, "dedup", "same-event") for i in range(50)))
        rate = await asyncio.gather(*(post(i, "rate", f"evt-{i}") for i in range(RATE_LIMIT + 20)))
    return dedup, rate


def _scenario(tmp_path: Path, url: str) -> None:
    key = Fernet.generate_key().decode()
    hooks, automation = asyncio.run(_seed(url, key))
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                serving(
                    tmp_path / f"d{i}",
                    "--delivery-rate-limit",
                    str(RATE_LIMIT),
                    env={"FACTORY_SECRET_KEY": key},
                    database=url,
                    log=tmp_path / f"serve-{i}.log",
                )
            )
            for i in range(REPLICAS)
        ]
        if time.time() % 60 > 55:  # keep both bursts inside one rate window
            time.sleep(61 - time.time() % 60)
        dedup, rate = asyncio.run(_bursts([served.url for served in servers], hooks))
        assert dedup == [202] * 50
        admitted = Counter(rate)
        assert LOWEST_ADMITTED <= admitted[202] <= RATE_LIMIT
        assert set(admitted) == {202, 429} and admitted.total() == RATE_LIMIT + 20
        assert LOWEST_ADMITTED == RATE_LIMIT  # a limit below 80 leases one token at a time

    rows = committed(url, Delivery.webhook_uid, Delivery.status)
    runs = committed(url, Run.automation_id, Run.delivery_id)
    dedup_statuses = Counter(status for uid, status in rows if uid == hooks["dedup"])
    assert dedup_statuses == {"Accepted": 1, "Duplicate": 49}
    assert runs == [(automation, "same-event")]
    assert Counter(status for uid, status in rows if uid == hooks["rate"]) == {"Accepted": admitted[202]}


def test_two_servers_share_dedup_and_limits(tmp_path: Path, pg_url: str) -> None:
    _scenario(tmp_path, pg_url)
