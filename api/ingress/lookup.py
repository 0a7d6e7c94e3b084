"""What a delivery is checked and routed against: the webhook, its secret, its automations' filters.

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

A request whose generation read fails uses the uncached lookup: stale data is never served because the
database could not be asked.

Two more things are cached, both keyed by something immutable, so a cached entry can never be stale:
decrypted secrets by (secret row id, version) - a version's value never changes, and rotation moves the
webhook to a new version - and compiled payload filters by (automation UID, filter JSON text); the
routing rows that name the filters are read inside the accept transaction. All caches are bounded and
owned by the app (no module globals).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import Connection, Text, and_, bindparam, cast, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

import store
from store import payload_filter
from store import secrets as secret_store
from store.crypto import SecretBox
from store.models import Automation, AutomationWebhook, Factory, IngressGeneration, Run, Secret, Webhook

log = logging.getLogger("factoryctl.ingress")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class WebhookRow:
    """The columns of a live (enabled, not deleted) webhook that ingress needs."""

    uid: str
    team_id: str
    factory_uid: str
    name: str
    auth_mode: str
    signature_scheme: str | None
    secret_name: str | None
    secret_version: int | None
    delivery_id_header: str | None
    secret_id: str | None  # the team secret's row id; a recreated secret gets a new one


@dataclass(frozen=True, slots=True)
class AutomationRow:
    """A matching automation with what its run needs from the automation and its factory."""

    uid: str
    name: str
    title: str | None
    prompt: str
    agent: str
    config: dict[str, Any]
    factory_uid: str
    factory_agents: dict[str, Any]
    factory_worker_host: str | None


WEBHOOK_QUERY = (
    select(
        Webhook.uid,
        Webhook.team_id,
        Webhook.factory_uid,
        Webhook.name,
        Webhook.auth_mode,
        Webhook.signature_scheme,
        Webhook.secret_name,
        Webhook.secret_version,
        Webhook.delivery_id_header,
        Secret.id,
    )
    .outerjoin(Secret, and_(Secret.team_id == Webhook.team_id, Secret.name == Webhook.secret_name))
    .where(Webhook.uid == bindparam("uid"), Webhook.enabled.is_(True), Webhook.deleted_at.is_(None))
)

# Routing rows of enabled automations of each webhook's own team and factory; the filter comes back as
# its JSON text so that the compiled-filter cache is consulted without decoding it.
_ROUTES = (
    select(
        AutomationWebhook.webhook_uid,
        AutomationWebhook.automation_uid,
        cast(AutomationWebhook.payload_filter, Text),
    )
    .join(Automation, Automation.uid == AutomationWebhook.automation_uid)
    .join(Webhook, Webhook.uid == AutomationWebhook.webhook_uid)
    .where(
        AutomationWebhook.webhook_uid.in_(bindparam("uids", expanding=True)),
        Automation.enabled.is_(True),
        Automation.team_id == Webhook.team_id,
        Automation.factory_uid == Webhook.factory_uid,
    )
    .order_by(
        AutomationWebhook.webhook_uid, AutomationWebhook.automation_uid, AutomationWebhook.trigger_index
    )
)


# The automations runs start for, with their factories, outer-joined to runs they already have for the
# deliveries' (webhook, delivery ID) pairs; built once so that its compiled form is cached.
_AUTOMATIONS = (
    select(
        Automation.uid,
        Automation.name,
        Automation.title,
        Automation.prompt,
        Automation.agent,
        Automation.config,
        Factory.uid,
        Factory.agents,
        Factory.worker_host,
        Run.webhook_uid,
        Run.delivery_id,
    )
    .join(Factory, Factory.uid == Automation.factory_uid)
    .outerjoin(
        Run,
        and_(
            Run.automation_id == Automation.uid,
            Run.webhook_uid.in_(bindparam("webhooks", expanding=True)),
            Run.delivery_id.in_(bindparam("delivery_ids", expanding=True)),
        ),
    )
    .where(Automation.uid.in_(bindparam("uids", expanding=True)))
)


async def find_webhook(session: AsyncSession, uid: str) -> WebhookRow | None:
    """The live webhook with this UID, or None when it is unknown, disabled or deleted (all alike)."""
    return webhook_row((await session.execute(WEBHOOK_QUERY, {"uid": uid})).first())


def find_webhook_in(conn: Connection, uid: str) -> WebhookRow | None:
    """:func:`find_webhook` on a synchronous connection."""
    return webhook_row(conn.execute(WEBHOOK_QUERY, {"uid": uid}).first())


def webhook_row(row: Sequence[Any] | None) -> WebhookRow | None:
    if row is None:
        return None
    return WebhookRow(
        uid=row[0],
        team_id=row[1],
        factory_uid=row[2],
        name=row[3],
        auth_mode=row[4],
        signature_scheme=row[5],
        secret_name=row[6],
        secret_version=row[7],
        delivery_id_header=row[8],
        secret_id=row[9],
    )


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
    row read before a change can never be cached after the cache learnt of the change.
    """

    def __init__(
        self,
        max_entries: int = 10_000,
        *,
        recheck_seconds: float = 0.1,
        local_write_seconds: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max(1, max_entries)
        self.recheck_seconds = recheck_seconds
        self.local_write_seconds = local_write_seconds
        self._monotonic = monotonic
        self._live: OrderedDict[str, WebhookRow] = OrderedDict()
        self._not_live: OrderedDict[str, None] = OrderedDict()
        self._generation: int | None = None
        self._verified_at = -math.inf  # when the newest successful generation read started
        self._distrust_until = -math.inf
        self._pending: tuple[asyncio.Task[int], float] | None = None
        self._mark = ("factoryctl.ingress.webhook_write", id(self))  # connection info key: a write is pending
        self.generation_reads = 0

    # --- entries -----------------------------------------------------------------------------------

    @property
    def generation(self) -> int | None:
        return self._generation

    def get(self, uid: str) -> WebhookRow | Miss | None:
        """The cached answer for ``uid`` - its live webhook, or None for "no live webhook" - or MISS."""
        row = self._live.get(uid)
        if row is not None:
            self._live.move_to_end(uid)
            return row
        if uid in self._not_live:
            self._not_live.move_to_end(uid)
            return None
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

    async def validate(self, read: Callable[[], Awaitable[int]]) -> int | None:
        """The generation under which the cache may answer this request, reading it with ``read`` when
        the last read is too old; None when that read failed (look up without the cache)."""
        now = self._monotonic()
        need = now if now < self._distrust_until else now - self.recheck_seconds
        while True:
            if self._generation is not None and self._verified_at >= need:
                return self._generation
            if self._pending is None:
                started = self._monotonic()
                task = asyncio.ensure_future(self._refresh(read, started))
                task.add_done_callback(_retrieve)  # waiters may all be gone (cancelled requests)
                self._pending = (task, started)
            task, started = self._pending
            try:
                await asyncio.shield(task)
            except Exception:
                if started >= need:
                    return None
            # else loop: either valid now, or the read we waited for started too early for this request

    async def _refresh(self, read: Callable[[], Awaitable[int]], started: float) -> int:
        try:
            self.generation_reads += 1
            generation = await read()
            self.observe(generation, started)
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


class DirectReader(Protocol):
    """The SQLite loop-thread reader (:class:`api.ingress.direct.DirectSqlite`): errors are returned."""

    def generation(self) -> int | Exception: ...

    def find_webhook(self, uid: str) -> WebhookRow | Exception | None: ...


async def find_live_webhook(
    cache: WebhookCache, readers: async_sessionmaker[AsyncSession], direct: DirectReader | None, uid: str
) -> WebhookRow | None:
    """The live webhook with this UID (None: unknown, disabled or deleted), from ``cache`` while it is
    valid (module docstring), else from the store; the store's answer is cached."""
    if direct is not None:  # on the loop thread, no await: nothing can change the cache in between
        generation = direct.generation()
        if not isinstance(generation, Exception):
            cache.observe(generation)
            cached = cache.get(uid)
            if cached is not MISS:
                return cached
            found = direct.find_webhook(uid)
            if not isinstance(found, Exception):
                cache.put(uid, found, generation)
                return found
        # SQLite could not answer on this thread at once: the async path, uncached.
        async with readers() as reader, reader.begin():
            return await find_webhook(reader, uid)
    valid = await cache.validate(lambda: read_generation(readers))
    if valid is not None:
        cached = cache.get(uid)
        if cached is not MISS:
            return cached
    async with readers() as reader, reader.begin():
        found = await find_webhook(reader, uid)
    if valid is not None:
        cache.put(uid, found, valid)
    return found


class BoundedCache(Generic[K, V]):
    """A dict that drops its oldest eighth when full; for values derived from immutable keys."""

    def __init__(self, max_entries: int) -> None:
        self._max = max(8, max_entries)
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        if len(self._items) >= self._max and key not in self._items:
            for old in list(self._items)[: self._max // 8]:
                del self._items[old]
        self._items[key] = value

    def __len__(self) -> int:
        return len(self._items)


class SecretCache:
    """Decrypted webhook secrets by (secret row id, version). Values are never logged.

    A version of a secret is never rewritten (setting a value adds a version), and a secret that is
    deleted and created again under the same name is a new row with a new id, so a cached value can
    never outlive the value it was decrypted from.
    """

    def __init__(self, box: SecretBox, max_entries: int = 4096) -> None:
        self._box = box
        self._cache: BoundedCache[tuple[str, int], str] = BoundedCache(max_entries)

    def cached(self, webhook: WebhookRow) -> str | None:
        """The webhook's captured secret if it is cached (None says nothing: ask :meth:`get`)."""
        if webhook.secret_id is None or webhook.secret_version is None:
            return None
        return self._cache.get((webhook.secret_id, webhook.secret_version))

    async def get(self, session: AsyncSession, webhook: WebhookRow) -> str | None:
        """The webhook's captured secret value; None when none was supplied or it no longer exists."""
        if webhook.secret_name is None or webhook.secret_version is None:
            return None
        if webhook.secret_id is None:
            log.warning("webhook %s: its secret does not exist; deliveries fail authentication", webhook.uid)
            return None
        key = (webhook.secret_id, webhook.secret_version)
        value = self._cache.get(key)
        if value is None:
            try:
                value, _ = await secret_store.reveal(
                    session, self._box, webhook.team_id, webhook.secret_name, webhook.secret_version
                )
            except store.NotFound:
                log.warning(
                    "webhook %s: secret %r version %s does not exist; deliveries fail authentication",
                    webhook.uid,
                    webhook.secret_name,
                    webhook.secret_version,
                )
                return None
            self._cache.put(key, value)
        return value


_NEVER = payload_filter.compile({"never": {"in": [True], "not_in": [True]}})  # matches nothing


class FilterCache:
    """Compiled payload filters by (automation UID, filter JSON text); compiled once per process."""

    def __init__(self, max_entries: int = 65_536) -> None:
        self._cache: BoundedCache[tuple[str, str | None], payload_filter.CompiledFilter] = BoundedCache(
            max_entries
        )

    def compiled(self, automation_uid: str, filter_text: str | None) -> payload_filter.CompiledFilter:
        key = (automation_uid, filter_text)
        found = self._cache.get(key)
        if found is None:
            found = _compile(automation_uid, filter_text)
            self._cache.put(key, found)
        return found

    def __len__(self) -> int:
        return len(self._cache)


def _compile(automation_uid: str, filter_text: str | None) -> payload_filter.CompiledFilter:
    try:
        spec = json.loads(filter_text) if filter_text else None
        return payload_filter.compile(spec)
    except (ValueError, TypeError) as exc:
        # Filters are validated when definitions apply; a bad one in the store never fires.
        log.error("automation %s has an invalid payload filter (%s); it will not fire", automation_uid, exc)
        return _NEVER


async def match_routes(
    session: AsyncSession, deliveries: Sequence[tuple[WebhookRow, object]], filters: FilterCache
) -> list[list[str]]:
    """For each (webhook, payload): UIDs of the enabled automations with a trigger on that webhook whose
    payload filter matches (any of its triggers). One SELECT for all the webhooks involved."""
    return await session.run_sync(lambda s: match_routes_in(s.connection(), deliveries, filters))


def match_routes_in(
    conn: Connection, deliveries: Sequence[tuple[WebhookRow, object]], filters: FilterCache
) -> list[list[str]]:
    """:func:`match_routes` on a synchronous connection."""
    routes: dict[str, list[tuple[str, str | None]]] = {}
    uids = sorted({webhook.uid for webhook, _ in deliveries})
    for row in conn.execute(_ROUTES, {"uids": uids}).all():
        routes.setdefault(row[0], []).append((row[1], row[2]))
    result: list[list[str]] = []
    for webhook, payload in deliveries:
        matched: list[str] = []
        for automation_uid, filter_text in routes.get(webhook.uid, ()):
            if (not matched or matched[-1] != automation_uid) and filters.compiled(
                automation_uid, filter_text
            ).matches(payload):
                matched.append(automation_uid)
        result.append(matched)
    return result


async def matching_automations(
    session: AsyncSession, webhook: WebhookRow, payload: object, filters: FilterCache
) -> list[str]:
    """UIDs of the enabled automations whose trigger on ``webhook`` matches ``payload``."""
    return (await match_routes(session, [(webhook, payload)], filters))[0]


async def load_automations(
    session: AsyncSession, uids: Sequence[str], deliveries: Sequence[tuple[str, str]]
) -> tuple[dict[str, AutomationRow], set[tuple[str, str, str]]]:
    """The automations that deliveries start runs for (with their factories' agent defaults), and the
    (automation, webhook, delivery ID) triples among them that already have a run - one query."""
    return await session.run_sync(lambda s: load_automations_in(s.connection(), uids, deliveries))


def load_automations_in(
    conn: Connection, uids: Sequence[str], deliveries: Sequence[tuple[str, str]]
) -> tuple[dict[str, AutomationRow], set[tuple[str, str, str]]]:
    """:func:`load_automations` on a synchronous connection."""
    if not uids:
        return {}, set()
    params = {
        "uids": sorted(uids),
        "webhooks": sorted({w for w, _ in deliveries}),
        "delivery_ids": sorted({d for _, d in deliveries}),
    }
    automations: dict[str, AutomationRow] = {}
    already: set[tuple[str, str, str]] = set()
    for r in conn.execute(_AUTOMATIONS, params).all():
        automations[r[0]] = AutomationRow(
            uid=r[0],
            name=r[1],
            title=r[2],
            prompt=r[3],
            agent=r[4],
            config=r[5] or {},
            factory_uid=r[6],
            factory_agents=r[7] or {},
            factory_worker_host=r[8],
        )
        if r[9] is not None:
            already.add((r[0], r[9], r[10]))
    return automations, already
