"""WebhookCache (api.ingress.webhook_cache): entries, bounds, when it reads the generation - no database."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import create_engine, text

from api.ingress.lookup import WebhookRow
from api.ingress.webhook_cache import MISS, WebhookCache, writes_webhooks


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _row(uid: str) -> WebhookRow:
    return WebhookRow(uid, "team", "fa_1", uid, "token", None, "s", 1, None, "sec_1")


class Generations:
    """A generation source: counts reads, can be held open or made to fail."""

    def __init__(self, value: int = 7) -> None:
        self.value, self.reads, self.fail = value, 0, False
        self.gate: asyncio.Event | None = None

    async def __call__(self) -> int:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("database down")
        return self.value


def test_entries_are_kept_per_generation() -> None:
    cache = WebhookCache()
    cache.put("wh_a", _row("wh_a"), 1)
    assert cache.get("wh_a") is MISS  # no generation observed yet: nothing is stored
    cache.observe(1)
    cache.put("wh_a", _row("wh_a"), 1)
    cache.put("wh_gone", None, 1)
    assert cache.get("wh_a") == _row("wh_a") and cache.get("wh_gone") is None
    assert cache.get("wh_other") is MISS
    cache.put("wh_b", _row("wh_b"), 0)  # read under an older generation: dropped
    assert cache.get("wh_b") is MISS
    cache.observe(1)
    assert len(cache) == 2  # same generation: kept
    cache.observe(2)
    assert len(cache) == 0 and cache.get("wh_a") is MISS  # changed: emptied


def test_unknown_uids_never_evict_live_webhooks_and_each_kind_is_bounded() -> None:
    cache = WebhookCache(max_entries=8)
    cache.observe(1)
    for i in range(8):
        cache.put(f"wh_live{i}", _row(f"wh_live{i}"), 1)
    for i in range(1000):
        cache.put(f"wh_unknown{i}", None, 1)
    assert cache.sizes() == (8, 8)
    assert all(cache.get(f"wh_live{i}") is not MISS for i in range(8))
    assert cache.get("wh_unknown999") is None and cache.get("wh_unknown0") is MISS
    # least recently used goes first
    cache.get("wh_live0")
    cache.put("wh_live8", _row("wh_live8"), 1)
    assert cache.get("wh_live0") is not MISS and cache.get("wh_live1") is MISS


async def test_one_read_per_recheck_interval_shared_by_concurrent_requests() -> None:
    ticks, source = Ticks(), Generations()
    cache = WebhookCache(monotonic=ticks)
    source.gate = asyncio.Event()
    waiting = [asyncio.ensure_future(cache.validate(source)) for _ in range(10)]
    await asyncio.sleep(0)
    source.gate.set()
    assert await asyncio.gather(*waiting) == [7] * 10
    assert source.reads == 1
    source.gate = None
    ticks.now += 0.1
    assert await cache.validate(source) == 7 and source.reads == 1  # read 100 ms ago: still valid
    ticks.now += 0.001
    assert await cache.validate(source) == 7 and source.reads == 2


async def test_a_read_that_started_too_long_ago_is_not_enough() -> None:
    """A request that arrives while a read is in flight may rely on it only if it started recently
    enough; otherwise it waits for it and then for a fresh read."""
    ticks, source = Ticks(), Generations()
    cache = WebhookCache(monotonic=ticks)
    source.gate = asyncio.Event()
    first = asyncio.ensure_future(cache.validate(source))
    await asyncio.sleep(0)
    ticks.now += 0.5  # the read is slow; a request arrives 500 ms after it started
    late = asyncio.ensure_future(cache.validate(source))
    await asyncio.sleep(0)
    source.gate.set()
    assert await first == 7 and await late == 7
    assert source.reads == 2


async def test_after_a_local_write_every_request_needs_a_read_started_after_it_arrived() -> None:
    ticks, source = Ticks(), Generations()
    cache = WebhookCache(monotonic=ticks)
    await cache.validate(source)
    cache.distrust()
    for expected in (2, 3, 4):
        ticks.now += 0.001
        await cache.validate(source)
        assert source.reads == expected
    await cache.validate(source)  # same instant as the last read: it started when this request arrived
    assert source.reads == 4
    ticks.now += 1.0
    await cache.validate(source)  # the window is over; the last read is older than 100 ms
    await cache.validate(source)
    assert source.reads == 5


async def test_a_failed_read_means_no_cache_for_the_requests_that_relied_on_it() -> None:
    ticks, source = Ticks(), Generations()
    cache = WebhookCache(monotonic=ticks)
    assert await cache.validate(source) == 7
    cache.put("wh_a", _row("wh_a"), 7)
    ticks.now += 1
    source.fail = True
    assert await cache.validate(source) is None  # the caller looks the webhook up uncached
    assert await cache.validate(source) is None and source.reads == 3  # and the next request retries
    source.fail = False
    assert await cache.validate(source) == 7
    assert cache.get("wh_a") is not MISS  # the generation did not change: the entries were valid


async def test_a_cancelled_request_does_not_cancel_the_shared_read() -> None:
    ticks, source = Ticks(), Generations()
    cache = WebhookCache(monotonic=ticks)
    source.gate = asyncio.Event()
    first = asyncio.ensure_future(cache.validate(source))
    second = asyncio.ensure_future(cache.validate(source))
    await asyncio.sleep(0)
    first.cancel()
    source.gate.set()
    assert await second == 7 and source.reads == 1
    with pytest.raises(asyncio.CancelledError):
        await first


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO webhooks (uid, team_id) VALUES (?, ?)",
        'UPDATE "webhooks" SET enabled=$1::BOOLEAN WHERE webhooks.uid = $2::VARCHAR',
        "update webhooks set enabled = false",
        "DELETE FROM secrets WHERE secrets.id = ?",
        "\n  INSERT OR REPLACE INTO secrets(id) VALUES (1)",
        "WITH gone AS (SELECT 1) UPDATE webhooks SET deleted_at = now()",
    ],
)
def test_writes_to_webhooks_and_secrets_are_recognised(statement: str) -> None:
    assert writes_webhooks(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT webhooks.uid FROM webhooks WHERE webhooks.uid = ?",
        "INSERT INTO deliveries (webhook_uid, delivery_id) VALUES (?, ?)",
        "UPDATE webhooks_archive SET x = 1",
        "INSERT INTO secret_versions (secret_id) VALUES (?)",
        "SELECT ingress_generation.value FROM ingress_generation WHERE ingress_generation.id = 1",
    ],
)
def test_other_statements_are_not(statement: str) -> None:
    assert not writes_webhooks(statement)


def test_watch_distrusts_after_a_commit_that_wrote_webhooks_and_removes_its_listeners() -> None:
    engine = create_engine("sqlite://")
    ticks = Ticks()
    cache = WebhookCache(monotonic=ticks)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE webhooks (uid TEXT)"))
        conn.execute(text("CREATE TABLE other (uid TEXT)"))
    remove = cache.watch(engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO other VALUES ('x')"))
    assert cache._distrust_until < ticks.now  # not a webhook write
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO webhooks VALUES ('x')"))
    assert cache._distrust_until == ticks.now + cache.local_write_seconds
    remove()
    ticks.now += 10
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM webhooks"))
    assert cache._distrust_until < ticks.now
    engine.dispose()


class Snapshots:
    """A live-webhooks source: counts loads, can fail."""

    def __init__(self, uids: list[str]) -> None:
        self.uids, self.loads, self.fail = uids, 0, False

    async def __call__(self, limit: int) -> list[WebhookRow]:
        self.loads += 1
        if self.fail:
            raise OSError("database down")
        return [_row(uid) for uid in self.uids[:limit]]


async def test_a_complete_snapshot_answers_every_uid_and_is_loaded_once_per_generation() -> None:
    ticks, generations, snapshots = Ticks(), Generations(1), Snapshots(["wh_a", "wh_b"])
    cache = WebhookCache(monotonic=ticks, snapshot=True)
    assert await cache.validate(generations, snapshots) == 1
    assert cache.complete and snapshots.loads == 1
    assert cache.get("wh_a") == _row("wh_a") and cache.get("wh_never_seen") is None  # no read needed
    ticks.now += 1
    assert await cache.validate(generations, snapshots) == 1
    assert generations.reads == 2 and snapshots.loads == 1  # same generation: not loaded again
    generations.value, snapshots.uids = 2, ["wh_b", "wh_c"]
    ticks.now += 1
    assert await cache.validate(generations, snapshots) == 2
    assert snapshots.loads == 2 and cache.get("wh_c") == _row("wh_c") and cache.get("wh_a") is None
    cache.observe(3)  # a change seen before the next snapshot: nothing is known complete
    assert not cache.complete and cache.get("wh_b") is MISS


async def test_without_a_snapshot_the_cache_stays_an_lru_of_single_lookups() -> None:
    ticks, generations, snapshots = Ticks(), Generations(1), Snapshots([f"wh_{i}" for i in range(9)])
    too_many = WebhookCache(max_entries=8, monotonic=ticks, snapshot=True)
    assert await too_many.validate(generations, snapshots) == 1
    assert not too_many.complete and too_many.get("wh_0") is MISS and too_many.get("wh_x") is MISS
    ticks.now += 1
    await too_many.validate(generations, snapshots)
    assert snapshots.loads == 1  # not retried for the same generation
    failing, snapshots.fail = WebhookCache(monotonic=ticks, snapshot=True), True
    assert await failing.validate(generations, snapshots) == 1  # the generation still validates
    assert not failing.complete and failing.get("wh_x") is MISS
    snapshots.fail = False
    ticks.now += 1
    await failing.validate(generations, snapshots)
    assert failing.complete and snapshots.loads == 3  # a failed load is retried at the next read
    off = WebhookCache(monotonic=ticks)  # snapshot off (the SQLite loop-thread path): never loaded
    await off.validate(generations, snapshots)
    assert snapshots.loads == 3 and not off.complete
    # a snapshot read under a generation that has moved on is refused
    assert not failing.fill([_row("wh_z")], 0) and failing.get("wh_z") is None
