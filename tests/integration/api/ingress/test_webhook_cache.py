"""The webhook lookup cache (api.ingress.webhook_cache.WebhookCache) over the real app and database.

What it promises (docs/ingress.md, "Webhook lookup cache"): changes made through the app's own engine
are seen by the next delivery on every store; on SQLite with the loop-thread reader so are changes from
any other process (the generation is read on every request); elsewhere (PostgreSQL) a change committed
by another engine - another replica, the CLI - is seen by every delivery that arrives 100 ms or more
after its commit. Once cached, a UID costs no webhook read: on PostgreSQL no statement at all within a
100 ms window, on SQLite exactly one (the generation read).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sql_support import statements
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.ingress.routes import INGRESS
from api.ingress.webhook_cache import MISS, WebhookCache
from store import ids
from store import secrets as secret_store
from store.crypto import SecretBox
from store.db import create_engine, session_factory
from store.models import Webhook

RECHECK = 0.1  # the documented bound for changes made by another engine on PostgreSQL
LOOKUP = "FROM webhooks LEFT OUTER JOIN secrets"  # the webhook query (api.ingress.lookup.WEBHOOK_QUERY)
GENERATION = "FROM ingress_generation"
Ingress = Any  # the harness of tests/integration/api/ingress/conftest.py
MakeIngress = Callable[..., Awaitable[Any]]


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def other(db_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions of a second engine on the same database: another replica, or the CLI's process."""
    engine = create_engine(db_url)
    yield session_factory(engine)
    await engine.dispose()


def _cache(ingress: Ingress) -> WebhookCache:
    return ingress.client.app[INGRESS].webhooks


async def _until_seen(
    committed_at: float, attempt: Callable[[], Awaitable[bool]], *, deadline: float = 10.0
) -> tuple[float, list[tuple[float, bool]]]:
    """Send ``attempt`` until it sees the change; (seconds from the commit to the first request that saw
    it, every (sent at - committed at, saw it))."""
    tries: list[tuple[float, bool]] = []
    while True:
        sent = time.monotonic()
        seen = await attempt()
        tries.append((sent - committed_at, seen))
        if seen:
            return sent - committed_at, tries
        assert time.monotonic() - committed_at < deadline, f"change not seen within {deadline} s: {tries}"
        await asyncio.sleep(0.005)  # poll interval, not a wait for the change


def _check_bound(db_url: str, seen_after: float, tries: list[tuple[float, bool]]) -> None:
    if db_url.startswith("sqlite"):
        assert len(tries) == 1, tries  # the generation is read on every request: the next one sees it
        return
    late = [t for t, seen in tries if t >= RECHECK and not seen]
    assert not late, f"requests sent {RECHECK * 1000:.0f} ms or more after the commit saw old data: {tries}"
    assert seen_after < RECHECK + 0.5, tries


async def test_changes_through_the_app_take_effect_on_the_next_delivery(ingress: Ingress) -> None:
    hook = await ingress.webhook()
    cache = _cache(ingress)
    assert (await ingress.post(hook, {"n": 1})).status == 202
    assert cache.get(hook.uid) is not MISS  # the next deliveries are answered from the cache

    await ingress.update_webhook(hook, enabled=False)
    assert (await ingress.post(hook, {"n": 2})).status == 404
    assert cache.get(hook.uid) is None  # cached as "not live"
    await ingress.update_webhook(hook, enabled=True)
    assert (await ingress.post(hook, {"n": 3})).status == 202

    old = hook.secret
    await ingress.rotate(hook, "rotated-token-value")
    stale = await ingress.post(hook, {"n": 4}, auth=False, headers={"Authorization": f"Bearer {old}"})
    assert stale.status == 401
    assert (await ingress.post(hook, {"n": 5})).status == 202

    await ingress.update_webhook(hook, deleted_at=ingress.clock.now())
    assert (await ingress.post(hook, {"n": 6})).status == 404
    assert await ingress.statuses(hook) == ["Accepted", "Accepted", "Rejected (auth)", "Accepted"]


async def test_changes_through_another_engine_are_seen_within_the_bound(
    make_ingress: MakeIngress, other: async_sessionmaker[AsyncSession], db_url: str, box: SecretBox
) -> None:
    ingress = await make_ingress()
    hook = await ingress.webhook("remote", sessions=other)
    born_uid = ids.new_id(ids.WEBHOOK)
    assert (await ingress.post(hook, {"n": 0})).status == 202
    assert (await ingress.post(hook, path=f"/webhooks/w/{born_uid}")).status == 404  # cached: not live
    cache = _cache(ingress)
    assert cache.get(hook.uid) is not MISS and cache.get(born_uid) is None
    n = 0

    async def status(target: Any, **kwargs: Any) -> int:
        nonlocal n
        n += 1
        return (await ingress.post(target, {"n": n}, **kwargs)).status

    async def write(*values: Any) -> float:
        async with other() as s, s.begin():
            for statement in values:
                await s.execute(statement)
        return time.monotonic()

    by_uid = update(Webhook).where(Webhook.uid == hook.uid)

    # disable, enable, delete-like (deleted_at), each by the other engine
    committed = await write(by_uid.values(enabled=False))
    _check_bound(db_url, *await _until_seen(committed, lambda: _is(status(hook), 404)))
    committed = await write(by_uid.values(enabled=True))
    _check_bound(db_url, *await _until_seen(committed, lambda: _is(status(hook), 202)))

    # rotation: the old token stops working
    old = hook.secret
    async with other() as s, s.begin():
        team = ingress.team_id
        info = await secret_store.set_value(s, box, ingress.clock, team, "remote-secret", "new-one")
        await s.execute(by_uid.values(secret_version=info.version))
    committed = time.monotonic()
    headers = {"Authorization": f"Bearer {old}"}
    _check_bound(
        db_url, *await _until_seen(committed, lambda: _is(status(hook, auth=False, headers=headers), 401))
    )
    hook.secret = "new-one"
    assert await status(hook) == 202

    # a webhook created for a UID that is cached as unknown
    born = await ingress.webhook("born", sessions=other, uid=born_uid)
    committed = time.monotonic()
    _check_bound(db_url, *await _until_seen(committed, lambda: _is(status(born), 202)))

    committed = await write(by_uid.values(deleted_at=ingress.clock.now()))
    _check_bound(db_url, *await _until_seen(committed, lambda: _is(status(hook), 404)))


async def _is(status: Awaitable[int], expected: int) -> bool:
    return await status == expected


@contextmanager
def _statements(ingress: Ingress, engine: AsyncEngine) -> Iterator[list[str]]:
    """Every SQL statement the app sends for ingress lookups while the block runs: its engine's, and on
    SQLite its loop-thread reader's (a plain sqlite3 connection)."""
    direct = ingress.client.app[INGRESS].direct
    reader: sqlite3.Connection | None = direct._reader if direct is not None else None
    with statements(engine) as seen:
        if reader is not None:
            reader.set_trace_callback(seen.append)
        try:
            yield seen
        finally:
            if reader is not None:
                reader.set_trace_callback(None)


def _count(statements: list[str], marker: str) -> int:
    return sum(marker in " ".join(s.split()) for s in statements)


async def test_a_flood_of_unknown_uids_is_answered_from_memory_once_cached(
    make_ingress: MakeIngress, engine: AsyncEngine
) -> None:
    ingress = await make_ingress()
    hook = await ingress.webhook()
    state = ingress.client.app[INGRESS]
    ticks = Ticks()
    cache = state.webhooks = WebhookCache(max_entries=64, monotonic=ticks)  # time moves when told
    remove = cache.watch(engine.sync_engine) if state.direct is None else None
    sqlite_direct = state.direct is not None
    unknown = [f"/webhooks/w/{ids.new_id(ids.WEBHOOK)}" for _ in range(50)]
    try:
        assert (await ingress.post(hook, {"warm": True})).status == 202  # opens the SQLite reader too

        with _statements(ingress, engine) as first:
            for path in unknown:
                assert (await ingress.post(hook, path=path)).status == 404
        assert _count(first, LOOKUP) == len(unknown)  # one webhook read per new UID
        # SQLite: the generation on every request; PostgreSQL: at most once per 100 ms
        assert _count(first, GENERATION) == (len(unknown) if sqlite_direct else 0)

        with _statements(ingress, engine) as again:
            for i, path in enumerate(unknown):
                assert (await ingress.post(hook, path=path)).status == 404
                assert (await ingress.post(hook, {"i": i})).status == 202
        assert _count(again, LOOKUP) == 0
        assert _count(again, GENERATION) == (2 * len(unknown) if sqlite_direct else 0)
        with _statements(ingress, engine) as not_found:
            for path in unknown:
                assert (await ingress.post(hook, path=path)).status == 404
        if sqlite_direct:  # exactly the generation read, nothing else
            assert _count(not_found, GENERATION) == len(not_found) == len(unknown), not_found
        else:
            assert not_found == []  # no statement at all

        # A flood of new UIDs stays within the bound and does not evict the live webhook.
        flood = [f"/webhooks/w/{ids.new_id(ids.WEBHOOK)}" for _ in range(300)]
        for i, path in enumerate(flood):
            assert (await ingress.post(hook, path=path)).status == 404
            assert cache.sizes() == (1, min(64, len(unknown) + i + 1))
        with _statements(ingress, engine) as live:
            assert (await ingress.post(hook, {"after": "flood"})).status == 202
        assert _count(live, LOOKUP) == 0

        if sqlite_direct:
            return
        # PostgreSQL: once the last read is 100 ms old, one request reads the generation, for everyone.
        ticks.now += RECHECK + 0.001
        recent = flood[-20:]  # still cached
        with _statements(ingress, engine) as later:
            answers = await asyncio.gather(*(ingress.post(hook, path=p) for p in recent))
        assert {r.status for r in answers} == {404}
        assert _count(later, GENERATION) == 1 and _count(later, LOOKUP) == 0

        # After this process commits a write to webhooks, every request reads the generation for 1 s.
        await ingress.update_webhook(hook, description="touched")
        with _statements(ingress, engine) as distrust:
            for path in recent[:5]:
                ticks.now += 0.001  # each request arrives after the previous one's read started
                assert (await ingress.post(hook, path=path)).status == 404
        # one generation read per request; the first saw the change and emptied the cache
        assert _count(distrust, GENERATION) == 5 and _count(distrust, LOOKUP) == 5
        ticks.now += 1.0 + RECHECK
        with _statements(ingress, engine) as calm:
            for path in recent[:5]:
                assert (await ingress.post(hook, path=path)).status == 404
        assert _count(calm, GENERATION) == 1
    finally:
        if remove is not None:
            remove()


async def test_unknown_uids_cost_no_lookup_once_every_live_webhook_is_in_memory(
    make_ingress: MakeIngress, engine: AsyncEngine, db_url: str
) -> None:
    ingress = await make_ingress()
    hook, second = await ingress.webhook(), await ingress.webhook()
    cache = _cache(ingress)
    sqlite_direct = ingress.client.app[INGRESS].direct is not None
    assert cache.snapshot
    assert (await ingress.post(hook, {"warm": True})).status == 202
    assert cache.complete and cache.sizes() == (2, 0)
    with _statements(ingress, engine) as flood:
        for _ in range(100):  # every one a UID never seen before
            path = f"/webhooks/w/{ids.new_id(ids.WEBHOOK)}"
            assert (await ingress.post(hook, path=path)).status == 404
    assert _count(flood, LOOKUP) == 0 and cache.sizes() == (2, 0)  # nothing looked up, nothing grew
    # only generation reads: SQLite's on every request; PostgreSQL's on every request for a second after
    # this process wrote webhooks (it just created two), then at most one per 100 ms
    assert len(flood) == _count(flood, GENERATION) and (len(flood) == 100 or not sqlite_direct), flood
    await ingress.update_webhook(second, enabled=False)  # through this process: seen at once
    with _statements(ingress, engine) as after:
        assert (await ingress.post(second, {"n": 1})).status == 404
        assert (await ingress.post(hook, {"n": 2})).status == 202
    assert _count(after, LOOKUP) == 1 and cache.complete and cache.sizes() == (1, 0)  # one new snapshot
