"""What every ingress endpoint shares between its checks: the app's :class:`Ingress`, the failed-request
budget, the capped body read and the 429 (docs/ingress.md, "Order of checks").

The webhook handler (:mod:`api.ingress.routes`) and the GitHub App handler (:mod:`api.ingress.github`)
differ in how they find what a delivery is checked against and how it is routed; they authenticate, cap,
limit and log with these same parts, so a budget or a limit means the same on both.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import StreamReader, web
from prometheus_client import Counter as MetricCounter
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import BadRequest, RateLimited
from api.context import ServerSettings
from api.ingress import pipeline
from api.ingress.direct import DirectSqlite
from api.ingress.lookup import FilterCache, SecretCache, WebhookRow
from api.ingress.webhook_cache import WebhookCache
from api.ratelimit.policy import Decision, Limiter
from store.clock import Clock

_CHUNK = 64 * 1024


@dataclass
class Ingress:
    """Everything the ingress handlers use, built once per app (no module globals)."""

    readers: async_sessionmaker[AsyncSession]  # lookups; autocommit on PostgreSQL (no BEGIN/COMMIT trips)
    clock: Clock
    settings: ServerSettings
    counter: Limiter  # api.ratelimit.counters.counter_for: leases on PostgreSQL, memory on SQLite
    secrets: SecretCache
    filters: FilterCache
    webhooks: WebhookCache  # live webhooks and unknown UIDs, valid under one ingress_generation value
    writer: pipeline.Writer
    outcomes: MetricCounter
    direct: DirectSqlite | None = None  # file-backed SQLite: synchronous hot-path access

    def count(self, outcome: str) -> None:
        self.outcomes.labels(outcome).inc()


INGRESS = web.AppKey("ingress", Ingress)


class TooLarge(Exception):
    def __init__(self, received: int) -> None:
        self.received = received


@dataclass
class Failures:
    """A rejected request of one webhook: counted against its failed-request budget, then logged.

    The budget is taken with :meth:`~api.ratelimit.policy.Limiter.consume` (count, then decide; on
    PostgreSQL only tokens leased from the shared budget are spent), so however many rejected requests
    race on however many replicas, at most ``--auth-failure-limit`` per window reach the delivery log; a
    request over the budget is answered 429 and not logged (docs/ingress.md, "Limits").
    """

    ingress: Ingress
    webhook: WebhookRow
    epoch: float

    @property
    def key(self) -> str:
        return f"wh-auth:{self.webhook.uid}"

    def budget_spent(self, decision: Decision) -> RateLimited:
        self.ingress.count("auth_budget_exhausted")
        return rate_limited("too many failed requests for this webhook", decision)

    async def record(self, delivery_id: str, status: str, size: int, detail: str) -> None:
        """Count the failure; log it if the budget allowed it, else raise the 429 instead."""
        limit = self.ingress.settings.auth_failure_limit
        decision = await self.ingress.counter.consume(self.key, limit, self.epoch)
        if not decision.allowed:
            raise self.budget_spent(decision)
        self.ingress.count(status.lower().replace(" (", "_").replace(")", "").replace(" ", "_"))
        await self.ingress.writer.record(
            self.webhook, delivery_id=delivery_id, status=status, size=size, detail=detail
        )


async def secret_of(ingress: Ingress, webhook: WebhookRow | None) -> str | None:
    """The webhook's captured secret: from the cache (by immutable version), else one read."""
    if webhook is None:
        return None
    cached = ingress.secrets.cached(webhook)
    if cached is not None:
        return cached
    async with ingress.readers() as reader, reader.begin():
        return await ingress.secrets.get(reader, webhook)


async def read_capped(content: StreamReader, limit: int) -> bytes:
    """Read the whole body, giving up (``TooLarge``) as soon as more than ``limit`` bytes arrived."""
    chunks: list[bytes] = []
    received = 0
    while True:
        try:
            chunk = await content.read(min(_CHUNK, limit + 1 - received))
        except ConnectionError:  # the sender went away mid-body: nothing to log, nobody to answer
            raise BadRequest("connection closed before the body was complete") from None
        if not chunk:
            return b"".join(chunks)
        received += len(chunk)
        if received > limit:
            raise TooLarge(received)
        chunks.append(chunk)


def rate_limited(detail: str, decision: Decision) -> RateLimited:
    return RateLimited(detail, headers={"Retry-After": str(decision.retry_after or 1)})
