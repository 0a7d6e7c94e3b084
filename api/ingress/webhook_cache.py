"""The webhook lookup cache of ingress (docs/ingress.md, "Webhook lookup cache").

The webhook lookup is cached in process (:class:`WebhookCache`): live webhooks and "no live webhook here"
answers, by UID, each kind in its own bounded LRU, so a flood of unknown UIDs costs at most one indexed
read per new UID and cannot grow memory, nor push the live webhooks out. The cache is valid under one
value of ``ingress_generation``, a counter the database bumps in the same transaction as every change to
``webhooks`` or ``secrets`` (triggers of migration 0008: whoever writes - this process, another replica,
the CLI - cannot bypass it). When the value changes the cache is emptied. How often the value is read:

- SQLite with the loop-thread reader (:mod:`api.ingress.direct`): on every request (a one-row primary-key
  read, cheaper than the lookup's join), so enabling, disabling, deleting and rotating take effect on the
  very next delivery, whichever process wrote;
- otherwise (PostgreSQL; an in-memory SQLite): at most every 100 ms, one read shared by the requests that
  wait for it, so another replica's change is seen by deliveries that arrive 100 ms or more after its
  commit. A change committed through this process's engine is seen by the next delivery: an engine
  listener notices writes to those tables and the cache then reads the value on every request for a
  second after the commit (:meth:`WebhookCache.watch`).

The cache also keeps a **complete snapshot**: when it sees a new generation it loads every live webhook
(one query, up to ``max_entries``; on the SQLite loop thread, which must not stall, up to
:data:`DIRECT_SNAPSHOT_MAX`), and while the snapshot is current any UID not in it is known not to be
live - a flood of never-seen UIDs costs no lookup at all. With more live webhooks than that, it stays an
LRU of single lookups.

A request whose generation read fails uses the uncached lookup: stale data is never served because the
database could not be asked.
"""

from __future__ import annotations

import asyncio
import enum
import math
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.ingress.lookup import WebhookRow, find_webhook, live_webhooks
from store.models import IngressGeneration

# The counter the database bumps on every change to webhooks or secrets (migration 0008).
GENERATION_QUERY = select(IngressGeneration.value).where(IngressGeneration.id == 1)


class GenerationMissing(LookupError):
    """The ``ingress_generation`` row is gone: nothing can be cached until it is back."""


async def read_generation(readers: async_sessionmaker[AsyncSession]) -> int:
    """The current ``ingress_generation`` value (one primary-key read)."""
    async with readers() as reader, reader.begin():
        value = (await reader.execute(GENERATION_QUERY)).scalar_one_or_none()
    if value is None:
        raise GenerationMissing("the ingress_generation row is missing")
    return int(value)


class Miss(enum.Enum):
    """What :meth:`WebhookCache.get` answers when it knows nothing about a UID."""

    MISS = enum.auto()


MISS = Miss.MISS

# INSERT/UPDATE/DELETE statements on the tables that the generation covers (an optional WITH first).
_WEBHOOK_WRITE = re.compile(
    r'\s*(?:WITH\b.*?)?\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+"?(?:webhooks|secrets)"?(?:[\s(]|$)',
    re.IGNORECASE | re.DOTALL,
)


def writes_webhooks(statement: str) -> bool:
    """Whether a SQL statement inserts, updates or deletes rows of ``webhooks`` or ``secrets``."""
    return _WEBHOOK_WRITE.match(statement) is not None


class WebhookCache:
    """Webhook lookups by UID, valid under one ``ingress_generation`` value (module docstring).

    Live webhooks and not-live UIDs (unknown, disabled, deleted: all one answer) are kept in two LRUs of
    ``max_entries`` each, so UIDs nobody registered - however many - never evict a live webhook.

    Validation, for stores read through the async path: :meth:`validate` reads the generation when the last
    read started more than ``recheck_seconds`` ago, or - for ``local_write_seconds`` after this process
    committed a write to ``webhooks``/``secrets`` (:meth:`watch`) - when it started before the request
    arrived. One read is in flight at a time; the requests that need it wait for it together. The SQLite
    loop-thread path reads the generation itself on every request and hands it to :meth:`observe`.

    An entry is stored only under the generation that was current when its row was read (:meth:`put`): a
    row read before a change can never be cached after the cache learnt of the change. The same holds for
    a snapshot (:meth:`fill`), which replaces both LRUs; with ``snapshot`` off (tests of the LRU alone)
    none is ever loaded.
    """

    def __init__(
        self,
        max_entries: int = 10_000,
        *,
        recheck_seconds: float = 0.1,
        local_write_seconds: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        snapshot: bool = False,
    ) -> None:
        self.max_entries = max(1, max_entries)
        self.snapshot = snapshot
        self.recheck_seconds = recheck_seconds
        self.local_write_seconds = local_write_seconds
        self._monotonic = monotonic
        self._live: OrderedDict[str, WebhookRow] = OrderedDict()
        self._not_live: OrderedDict[str, None] = OrderedDict()
        self._generation: int | None = None
        self._verified_at = -math.inf  # when the newest successful generation read started
        self._distrust_until = -math.inf
        self._pending: tuple[asyncio.Task[int], float] | None = None
        self._complete: int | None = None  # the generation under which _live holds every live webhook
        self._snapshot_tried: int | None = None  # the generation a snapshot was last loaded (or tried) for
        self._mark = ("factoryctl.ingress.webhook_write", id(self))  # connection info key: a write is pending

    # --- entries -----------------------------------------------------------------------------------

    def get(self, uid: str) -> WebhookRow | Miss | None:
        """The cached answer for ``uid`` - its live webhook, or None for "no live webhook" - or MISS."""
        row = self._live.get(uid)
        if row is not None:
            self._live.move_to_end(uid)
            return row
        if uid in self._not_live:
            self._not_live.move_to_end(uid)
            return None
        if self.complete:
            return None  # every live webhook is here: this UID is not one
        return MISS

    def put(self, uid: str, row: WebhookRow | None, generation: int) -> None:
        """Cache the answer read for ``uid``; ignored unless ``generation`` (the current value when the
        read started) is still the current one."""
        if generation != self._generation:
            return
        entries: OrderedDict[str, Any] = self._not_live if row is None else self._live
        entries[uid] = row
        entries.move_to_end(uid)
        if len(entries) > self.max_entries:
            entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._live) + len(self._not_live)

    def sizes(self) -> tuple[int, int]:
        """(live entries, not-live entries)."""
        return len(self._live), len(self._not_live)

    def clear(self) -> None:
        self._live.clear()
        self._not_live.clear()
        self._complete = None

    def fill(self, rows: list[WebhookRow], generation: int) -> bool:
        """Hold exactly ``rows`` - every live webhook, read after ``generation`` was - as a complete
        snapshot, so that any other UID is known not to be live without a read. Refused (False) when the
        generation moved on meanwhile, or when there are more than ``max_entries`` (then the cache stays
        an LRU of single lookups)."""
        if generation != self._generation or len(rows) > self.max_entries:
            return False
        self._live = OrderedDict((row.uid, row) for row in rows)
        self._not_live.clear()
        self._complete = generation
        return True

    def wants_snapshot(self, generation: int) -> bool:
        """Whether to load a snapshot now: snapshots are on, and none was loaded for ``generation`` yet,
        nor refused as too large for it (each is tried once per generation; a failed load is tried
        again, :meth:`retry_snapshot`)."""
        if not self.snapshot or self._snapshot_tried == generation:
            return False
        self._snapshot_tried = generation
        return True

    def retry_snapshot(self) -> None:
        """The snapshot load failed: try again at the next chance."""
        self._snapshot_tried = None

    @property
    def complete(self) -> bool:
        """Whether the cache holds every live webhook of the current generation."""
        return self._complete is not None and self._complete == self._generation

    # --- validation --------------------------------------------------------------------------------

    def observe(self, generation: int, started: float | None = None) -> None:
        """A generation read (that started at ``started``, monotonic) answered ``generation``: empty the
        cache if it changed."""
        if generation != self._generation:
            self.clear()
            self._generation = generation
        self._verified_at = max(self._verified_at, self._monotonic() if started is None else started)

    def distrust(self) -> None:
        """Read the generation on every request for the next ``local_write_seconds``."""
        self._distrust_until = self._monotonic() + self.local_write_seconds

    async def validate(
        self,
        read: Callable[[], Awaitable[int]],
        load: Callable[[int], Awaitable[list[WebhookRow]]] | None = None,
    ) -> int | None:
        """The generation under which the cache may answer this request, reading it with ``read`` when
        the last read is too old; None when that read failed (look up without the cache). With
        ``snapshot`` on, a read that finds a new generation also loads every live webhook with ``load``
        (given the most it may return), once per generation."""
        now = self._monotonic()
        need = now if now < self._distrust_until else now - self.recheck_seconds
        while True:
            if self._generation is not None and self._verified_at >= need:
                return self._generation
            if self._pending is None:
                started = self._monotonic()
                task = asyncio.ensure_future(self._refresh(read, load if self.snapshot else None, started))
                task.add_done_callback(_retrieve)  # waiters may all be gone (cancelled requests)
                self._pending = (task, started)
            task, started = self._pending
            try:
                await asyncio.shield(task)
            except Exception:
                if started >= need:
                    return None
            # else loop: either valid now, or the read we waited for started too early for this request

    async def _refresh(
        self,
        read: Callable[[], Awaitable[int]],
        load: Callable[[int], Awaitable[list[WebhookRow]]] | None,
        started: float,
    ) -> int:
        try:
            generation = await read()
            self.observe(generation, started)
            if load is not None and self.wants_snapshot(generation):
                try:
                    self.fill(await load(self.max_entries + 1), generation)
                except Exception:  # meanwhile UIDs are looked up one by one; the next refresh tries again
                    self.retry_snapshot()
            return generation
        finally:
            self._pending = None

    # --- writes through this process's engine ------------------------------------------------------

    def watch(self, engine: Engine) -> Callable[[], None]:
        """Listen on ``engine`` for writes to ``webhooks``/``secrets``; :meth:`distrust` when a connection
        that made one commits and when it goes back to the pool (by then the commit has completed). Returns
        the function that removes the listeners."""
        mark = self._mark

        def before_execute(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if writes_webhooks(statement):
                conn.info[mark] = True

        def commit(conn: Any) -> None:
            if conn.info.get(mark):
                self.distrust()

        def checkin(_dbapi_conn: Any, record: Any) -> None:
            if record is not None and record.info.pop(mark, None):
                self.distrust()

        listeners: list[tuple[Any, str, Callable[..., None]]] = [
            (engine, "before_cursor_execute", before_execute),
            (engine, "commit", commit),
            (engine, "checkin", checkin),
        ]
        for target, name, fn in listeners:
            event.listen(target, name, fn)

        def remove() -> None:
            for target, name, fn in listeners:
                if event.contains(target, name, fn):
                    event.remove(target, name, fn)

        return remove

    def watching(self, engine: Engine) -> Callable[[object], AsyncIterator[None]]:
        """:meth:`watch` for the lifetime of an app (an aiohttp cleanup context)."""

        async def context(_app: object) -> AsyncIterator[None]:
            remove = self.watch(engine)
            try:
                yield
            finally:
                remove()

        return context


def _retrieve(task: asyncio.Task[int]) -> None:
    if not task.cancelled():
        task.exception()


# On the SQLite loop thread a snapshot is read synchronously: keep it small enough not to stall the loop
# (about a millisecond per 500 webhooks); with more, unknown UIDs are looked up one by one (microseconds).
DIRECT_SNAPSHOT_MAX = 1_000


async def _load_live(readers: async_sessionmaker[AsyncSession], limit: int) -> list[WebhookRow]:
    async with readers() as reader, reader.begin():
        return await live_webhooks(reader, limit)


async def _lookup(readers: async_sessionmaker[AsyncSession], uid: str) -> WebhookRow | None:
    async with readers() as reader, reader.begin():
        return await find_webhook(reader, uid)


class DirectReader(Protocol):
    """The SQLite loop-thread reader (:class:`api.ingress.direct.DirectSqlite`): errors are returned."""

    def generation(self) -> int | Exception: ...

    def find_webhook(self, uid: str) -> WebhookRow | Exception | None: ...

    def live_webhooks(self, limit: int) -> list[WebhookRow] | Exception: ...


async def find_live_webhook(
    cache: WebhookCache, readers: async_sessionmaker[AsyncSession], direct: DirectReader | None, uid: str
) -> WebhookRow | None:
    """The live webhook with this UID (None: unknown, disabled or deleted), from ``cache`` while it is
    valid (module docstring), else from the store; the store's answer is cached."""
    if direct is not None:  # on the loop thread, no await: nothing can change the cache in between
        generation = direct.generation()
        if not isinstance(generation, Exception):
            cache.observe(generation)
            if cache.wants_snapshot(generation):
                live = direct.live_webhooks(DIRECT_SNAPSHOT_MAX + 1)
                if isinstance(live, Exception):
                    cache.retry_snapshot()
                elif len(live) <= DIRECT_SNAPSHOT_MAX:
                    cache.fill(live, generation)
            cached = cache.get(uid)
            if cached is not MISS:
                return cached
            found = direct.find_webhook(uid)
            if not isinstance(found, Exception):
                cache.put(uid, found, generation)
                return found
        return await _lookup(readers, uid)  # SQLite could not answer on this thread at once: uncached
    valid = await cache.validate(lambda: read_generation(readers), lambda limit: _load_live(readers, limit))
    if valid is not None:
        cached = cache.get(uid)
        if cached is not MISS:
            return cached
    found = await _lookup(readers, uid)
    if valid is not None:
        cache.put(uid, found, valid)
    return found
