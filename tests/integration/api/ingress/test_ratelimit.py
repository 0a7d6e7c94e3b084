"""Per-webhook limits through real HTTP: independent per webhook, separate budgets, shared by replicas."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select

from api.ingress.counters import StoreCounter, counter_for, prune_counters
from api.ingress.ratelimit import MemoryCounter
from store.models import RateCounter


async def test_limits_are_per_webhook(make_ingress) -> None:
    ingress = await make_ingress(delivery_rate_limit=2)
    a, b = await ingress.webhook(), await ingress.webhook()
    assert [(await ingress.post(a, {"n": n})).status for n in range(3)] == [202, 202, 429]
    assert [(await ingress.post(b, {"n": n})).status for n in range(2)] == [202, 202]


async def test_duplicates_count_as_deliveries(make_ingress) -> None:
    ingress = await make_ingress(delivery_rate_limit=2)
    hook = await ingress.webhook()
    statuses = [(await ingress.post(hook, {"same": 1}, delivery_id="x")).status for _ in range(3)]
    assert statuses == [202, 202, 429]
    assert await ingress.statuses(hook) == ["Accepted", "Duplicate"]


async def test_failed_auth_does_not_spend_the_delivery_limit(make_ingress) -> None:
    ingress = await make_ingress(delivery_rate_limit=2, auth_failure_limit=10)
    hook = await ingress.webhook()
    for _ in range(5):
        assert (await ingress.post(hook, {}, auth=False)).status == 401
    assert [(await ingress.post(hook, {"n": n})).status for n in range(3)] == [202, 202, 429]


async def test_rejected_deliveries_are_not_counted_and_sliding_window_recovers(make_ingress) -> None:
    ingress = await make_ingress(delivery_rate_limit=4)
    hook = await ingress.webhook()
    for n in range(4):
        assert (await ingress.post(hook, {"n": n})).status == 202
    for _ in range(10):  # a sender ignoring Retry-After does not push its own wait further out
        resp = await ingress.post(hook, {"n": 99})
        assert resp.status == 429
    wait = int(resp.headers["Retry-After"])
    ingress.clock.advance(wait - 1)
    assert (await ingress.post(hook, {"n": 5})).status == 429
    ingress.clock.advance(1)
    assert (await ingress.post(hook, {"n": 6})).status == 202


async def test_limits_hold_across_replicas_on_postgres(make_ingress, db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite is a single-node deployment: counters live in the one process")
    one = await make_ingress(delivery_rate_limit=5)
    two = await make_ingress(delivery_rate_limit=5, clock=one.clock)  # a second app on the same store
    hook = await one.webhook()
    statuses = [(await (one if n % 2 else two).post(hook, {"n": n})).status for n in range(8)]
    assert statuses.count(202) == 5 and statuses.count(429) == 3


async def test_counter_choice_and_pruning(engine) -> None:
    counter = counter_for(engine)
    if engine.dialect.name == "sqlite":
        assert isinstance(counter, MemoryCounter)
        async with engine.begin() as conn:  # rows as a PostgreSQL deployment would have left them
            await conn.execute(
                insert(RateCounter), [{"key": "k", "window_start": w, "count": 1} for w in (960, 1020, 1140)]
            )
    else:
        assert isinstance(counter, StoreCounter)
        assert await counter.hit("k", 1000.0) == (1, 0)
        assert await counter.hit("k", 1001.0) == (2, 0)
        assert await counter.hit("k", 1070.0) == (1, 2)  # the next window sees the previous one
        await counter.undo("k", 1070.0)
        assert await counter.peek("k", 1070.0) == (0, 2)
        assert await counter.hit("k", 1150.0) == (1, 0)
    await prune_counters(engine, 1200.0)  # keeps the window holding 1200 and the previous one only
    async with engine.connect() as conn:
        assert (await conn.execute(select(RateCounter.window_start))).scalars().all() == [1140]
