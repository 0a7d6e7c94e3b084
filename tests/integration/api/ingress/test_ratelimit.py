"""Per-webhook limits through real HTTP: independent per webhook, separate budgets, shared by replicas;
and on PostgreSQL the leases behind them (api.ratelimit.leases, api.ratelimit.counters): the statement grants
what the policy says, two replicas stay within the documented bound (docs/ingress.md, "Limits"), and
refusals past a limit cost no statement."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import pytest
from sql_support import statements
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.ratelimit.counters import LeasedCounter, counter_for, prune_counters
from api.ratelimit.leases import Lease, LeaseRequest, chunk_cap, grant, room
from api.ratelimit.policy import MemoryCounter, window_position
from store.db import create_engine
from store.models import RateCounter

W = 60
T0 = 1_700_000_040.0  # a window start


def _counter_statements(sent: list[str]) -> list[str]:
    return [s for s in sent if "rate_counters" in s]


@pytest.fixture
async def two_engines(db_url: str, engine: AsyncEngine) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """Two replicas' engines on one PostgreSQL database."""
    if not db_url.startswith("postgresql"):
        pytest.skip("leases are PostgreSQL's: SQLite counts exactly in the one process")
    second = create_engine(db_url)
    try:
        yield engine, second
    finally:
        await second.dispose()


def _request(key: str, limit: int, want: int, now: float) -> LeaseRequest:
    start, elapsed = window_position(now, W)
    return LeaseRequest(key, limit, want, start, W, elapsed, now)


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


async def test_limits_and_budget_hold_across_replicas_through_the_app(make_ingress: Any, db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite is a single-node deployment: counters live in the one process")
    one = await make_ingress(auth_failure_limit=3, delivery_rate_limit=100)
    two = await make_ingress(auth_failure_limit=3, delivery_rate_limit=100, clock=one.clock)
    hook = await one.webhook()
    wrong = {"Authorization": "Bearer wrong"}
    statuses = [
        (await (one if n % 2 else two).post(hook, {}, auth=False, headers=wrong)).status for n in range(6)
    ]
    assert statuses == [401] * 3 + [429] * 3
    assert (await one.post(hook, {})).status == 429  # a correct credential waits on either replica
    assert (await two.post(hook, {})).status == 429
    assert await one.statuses(hook) == ["Rejected (auth)"] * 3


async def test_floods_past_a_limit_cost_no_counter_statement(
    make_ingress: Any, db_url: str, engine: AsyncEngine
) -> None:
    """Bad credentials (401 then 429) and rate-limited deliveries (429): once a replica knows a limit is
    reached it answers from memory - no lease, no write, no commit - until its Retry-After."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite keeps its counters in memory anyway")
    ingress = await make_ingress(auth_failure_limit=3, delivery_rate_limit=2)
    guessed, flooded = await ingress.webhook(), await ingress.webhook()
    wrong = {"Authorization": "Bearer wrong"}
    with statements(engine) as sent:
        assert [(await ingress.post(guessed, {}, auth=False, headers=wrong)).status for _ in range(3)] == [
            401
        ] * 3
    assert len(_counter_statements(sent)) == 3  # one lease per failure: the third fills the budget
    with statements(engine) as sent:
        for _ in range(20):
            resp = await ingress.post(guessed, {}, auth=False, headers=wrong)
            assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
        assert (await ingress.post(guessed, {})).status == 429
    assert _counter_statements(sent) == []
    assert [s for s in sent if not s.lstrip().upper().startswith("SELECT")] == []  # nothing written
    assert await ingress.statuses(guessed) == ["Rejected (auth)"] * 3

    assert [(await ingress.post(flooded, {"n": n})).status for n in range(2)] == [202, 202]
    with statements(engine) as sent:
        for n in range(20):
            resp = await ingress.post(flooded, {"n": n})
            assert resp.status == 429
    assert _counter_statements(sent) == []
    assert [s for s in sent if not s.lstrip().upper().startswith("SELECT")] == []
    ingress.clock.advance(int(resp.headers["Retry-After"]))
    assert (await ingress.post(flooded, {"n": 99})).status == 202


async def test_counter_choice_and_pruning(engine: AsyncEngine) -> None:
    counter = counter_for(engine)
    if engine.dialect.name == "sqlite":
        assert isinstance(counter, MemoryCounter)
        async with engine.begin() as conn:  # rows as a PostgreSQL deployment would have left them
            await conn.execute(
                insert(RateCounter), [{"key": "k", "window_start": w, "count": 1} for w in (960, 1020, 1140)]
            )
    else:
        assert isinstance(counter, LeasedCounter)
        assert await counter.lease(_request("k", 10, 4, 1000.0)) == Lease(0, 4, 0)
        assert await counter.lease(_request("k", 10, 8, 1001.0)) == Lease(4, 10, 0)  # clamped to the limit
        assert await counter.lease(_request("k", 10, 1, 1010.0)) == Lease(10, 10, 0)  # full: nothing
        # The next window sees the previous one: 10 * (1 - 50/60) still overlap, room for 8.
        assert await counter.lease(_request("k", 10, 6, 1070.0)) == Lease(0, 6, 10)
        assert await counter.lease(_request("k", 10, 6, 1070.0)) == Lease(6, 8, 10)
        assert await counter.lease(_request("k", 10, 1, 1150.0)) == Lease(0, 1, 0)
    await prune_counters(engine, 1200.0)  # keeps the window holding 1200 and the previous one only
    async with engine.connect() as conn:
        assert (await conn.execute(select(RateCounter.window_start))).scalars().all() == [1140]


async def test_the_lease_statement_grants_what_the_policy_grants(
    two_engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    counter = LeasedCounter(two_engines[0])
    limit = 40
    for n, (previous, elapsed, before, want) in enumerate(
        (p, e, b, w) for p in (0, 13, 40) for e in (0.0, 0.3, 0.75) for b in (0, 5, 38) for w in (1, 4)
    ):
        key = f"grid-{n}"
        now = T0 + W + elapsed * W
        if previous:
            assert await counter.lease(_request(key, 10**6, previous, T0)) == Lease(0, previous, 0)
        first = await counter.lease(_request(key, limit, before, now)) if before else Lease(0, 0, previous)
        expected = grant(want, first.after, room(limit, previous, elapsed))
        got = await counter.lease(_request(key, limit, want, now))
        assert got == Lease(first.after, first.after + expected, previous), (previous, elapsed, before, want)


async def test_two_replicas_hammering_one_key_stay_within_the_documented_bound(
    two_engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """Concurrent bursts on both replicas over three windows: the sliding-window estimate of admitted
    events never exceeds the limit, and refusals start only above
    ``limit - 1 - (R - 1) * (c - 1) - R * (c - 1) * (1 - elapsed)`` (R = 2 replicas, c = chunk cap)."""
    replicas = [LeasedCounter(e) for e in two_engines]
    limit, key = 400, "wh-rate:hammered"
    slack = chunk_cap(limit) - 1
    admitted: dict[int, int] = {}
    refusals = 0
    with statements(*two_engines) as sent:
        for step in range(24):  # every 7.5 s for three windows
            now = T0 + step * 7.5
            start, elapsed = window_position(now, W)
            burst = [replicas[n % 2].consume(key, limit, now) for n in range(120)]
            decisions = await asyncio.gather(*burst)
            admitted[start] = admitted.get(start, 0) + sum(d.allowed for d in decisions)
            estimate = admitted.get(start - W, 0) * (1 - elapsed) + admitted[start]
            assert estimate <= limit + 1e-9
            if not all(d.allowed for d in decisions):
                refusals += 1
                assert estimate > limit - 1 - slack - 2 * slack * (1 - elapsed)
    assert refusals >= 3  # every window reached the limit
    assert admitted[int(T0)] <= limit and admitted[int(T0)] >= limit - slack
    # 24 * 120 requests; leases are chunks of up to 10, and refusals are answered from memory.
    assert len(_counter_statements(sent)) < sum(admitted.values()) / 3


async def test_a_flood_after_the_limit_costs_no_statements(
    two_engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    one, two = (LeasedCounter(e) for e in two_engines)
    key = "wh-rate:flooded"
    with statements(*two_engines) as sent:
        decisions = await asyncio.gather(
            *((one if n % 2 else two).consume(key, 60, T0 + 5) for n in range(200))
        )
    assert sum(d.allowed for d in decisions) == 60  # below a limit of 80 the chunk is 1: exact
    assert len(_counter_statements(sent)) <= 60 + 2  # one lease per admitted event, one refused per replica
    with statements(*two_engines) as sent:
        flood = await asyncio.gather(
            *((one if n % 2 else two).consume(key, 60, T0 + 10) for n in range(1000))
        )
    first_refusal = decisions[-1].retry_after
    assert first_refusal is not None
    assert not any(d.allowed for d in flood)
    assert {d.retry_after for d in flood} == {first_refusal - 5}  # counting down, from memory
    assert sent == []


async def test_a_high_limit_leases_a_few_chunks_instead_of_a_write_per_delivery(
    two_engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    one, two = (LeasedCounter(e) for e in two_engines)
    with statements(*two_engines) as sent:
        decisions = await asyncio.gather(
            *((one if n % 2 else two).consume("wh-rate:busy", 10**9, T0 + 1) for n in range(10_000))
        )
    assert all(d.allowed for d in decisions)
    # per replica: chunks of 1, 2, 4, ... 4096 cover its 5,000; plus at most one retry, by the replica whose
    # first lease lost the race to create the window's row (its snapshot had no row to update)
    assert len(sent) <= 2 * 13 + 1


async def test_concurrent_leases_are_serialised_on_the_row(
    two_engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """Leases racing on a row that does not exist yet, from two replicas' pools: each sees the count the
    previous one left, so the grants tile [0, limit) exactly and the row is never counted past it."""
    counters = [LeasedCounter(e) for e in two_engines]
    for round_ in range(3):
        key = f"race-{round_}"
        leases = await asyncio.gather(
            *(counters[n % 2].lease(_request(key, 50, 3, T0 + 1)) for n in range(40))
        )
        granted = sorted((lease.before, lease.after) for lease in leases if lease.granted)
        assert granted[0][0] == 0 and granted[-1][1] == 50
        assert all(a[1] == b[0] for a, b in pairwise(granted))
        assert all(lease.before == lease.after == 50 for lease in leases if not lease.granted)
        async with two_engines[0].connect() as conn:
            stored = await conn.execute(select(RateCounter.count).where(RateCounter.key == key))
            assert stored.scalar_one() == 50
