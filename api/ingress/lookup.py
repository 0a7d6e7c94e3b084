"""What a delivery is checked and routed against: the webhook, its secret, its automations' filters.

The webhook lookup is cached in process by :mod:`api.ingress.webhook_cache`, under a generation the
database bumps on every change. Two more things are cached here, both keyed by something immutable, so a
cached entry can never be stale: decrypted secrets by (secret row id, version) - a version's value never
changes, and rotation moves the webhook to a new version - and compiled payload filters by (automation
UID, filter JSON text); the routing rows that name the filters are read inside the accept transaction.
All caches are bounded and owned by the app (no module globals).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection, Text, and_, bindparam, cast, select
from sqlalchemy.ext.asyncio import AsyncSession

import store
from store import secrets as secret_store
from store.crypto import SecretBox
from store.models import Automation, AutomationWebhook, Factory, Run, Secret, Webhook
from store.rules import payload_filter

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


_WEBHOOKS = select(
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
).outerjoin(Secret, and_(Secret.team_id == Webhook.team_id, Secret.name == Webhook.secret_name))
_LIVE = and_(Webhook.enabled.is_(True), Webhook.deleted_at.is_(None))
WEBHOOK_QUERY = _WEBHOOKS.where(Webhook.uid == bindparam("uid"), _LIVE)
# Every live webhook of every team, for the cache's complete snapshot (api.ingress.webhook_cache).
LIVE_WEBHOOKS_QUERY = _WEBHOOKS.where(_LIVE)

# Routing rows of the automations (enabled or not: decisions name disabled ones too) of each webhook's own
# team and factory; the filter comes back as its JSON text so that the compiled-filter cache is consulted
# without decoding it.
_ROUTES = (
    select(
        AutomationWebhook.webhook_uid,
        AutomationWebhook.automation_uid,
        cast(AutomationWebhook.payload_filter, Text),
        AutomationWebhook.trigger_index,
        Automation.name,
        Automation.enabled,
    )
    .join(Automation, Automation.uid == AutomationWebhook.automation_uid)
    .join(Webhook, Webhook.uid == AutomationWebhook.webhook_uid)
    .where(
        AutomationWebhook.webhook_uid.in_(bindparam("uids", expanding=True)),
        Automation.team_id == Webhook.team_id,
        Automation.factory_uid == Webhook.factory_uid,
    )
    .order_by(
        AutomationWebhook.webhook_uid, AutomationWebhook.automation_uid, AutomationWebhook.trigger_index
    )
)


# One routing row: (webhook UID, automation UID, payload filter as JSON text, trigger index, automation
# name, enabled). Rows come ordered by (webhook, automation, trigger), so an automation's triggers on a
# webhook are consecutive; routing keeps them as read (no object per row: ingress reads them per batch).
Route = tuple[str, str, str | None, int, str, bool]


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


async def live_webhooks(session: AsyncSession, limit: int) -> list[WebhookRow]:
    """Up to ``limit`` live webhooks (every team's)."""
    rows = (await session.execute(LIVE_WEBHOOKS_QUERY.limit(limit))).all()
    return [row for row in map(webhook_row, rows) if row is not None]


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

    def explain(
        self, automation_uid: str, filter_text: str | None, payload: object
    ) -> payload_filter.FilterResult:
        """Why ``payload`` passes or fails the filter, worded as "Test filter" words it (an invalid
        filter included: docs/management.md, "Test filter")."""
        compiled = self.compiled(automation_uid, filter_text)
        if compiled is _NEVER:  # rare: say why, as Test filter does, instead of the stand-in's reason
            try:
                payload_filter.compile(json.loads(filter_text) if filter_text else None)
            except (ValueError, TypeError) as exc:
                return payload_filter.FilterResult(False, None, f"the payload filter is invalid: {exc}")
        return compiled.explain(payload)

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


def routes_in(conn: Connection, webhook_uids: Sequence[str]) -> dict[str, list[Route]]:
    """The routing rows of each webhook, in (automation, trigger) order; one SELECT for all of them."""
    routes: dict[str, list[Route]] = {}
    for row in conn.execute(_ROUTES, {"uids": sorted(set(webhook_uids))}).all():
        routes.setdefault(row[0], []).append(row)  # a Row is that tuple
    return routes


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
