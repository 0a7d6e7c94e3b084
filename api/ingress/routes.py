"""``POST /webhooks/w/{uid}`` and ``POST /webhooks/w/{uid}/{token}``: the webhook ingress (docs/ingress.md).

Checks run cheapest-first, and nothing unauthenticated is read into memory:

1. the webhook must be live (answered by the app's webhook cache while the database's
   ``ingress_generation`` says it is current, else one indexed SELECT: :mod:`api.ingress.webhook_cache`)
   - else the same 404 for unknown, disabled and deleted; a token segment on a webhook that is not
   ``url_token`` is also that 404;
2. the failed-request budget (``--auth-failure-limit``) must not be spent - else 429 (not logged);
3. ``Content-Length`` over the limit - 413, without reading the body;
4. ``token``/``url_token`` credentials, in constant time, before the body is read - 401;
5. the body is read in chunks and abandoned at limit + 1 bytes - 413;
6. provider signatures over the raw bytes with the injected clock - 401 (400 for a Linear body that
   verifies but is not JSON);
7. the delivery rate limit (authenticated deliveries per webhook per minute) - 429 (not logged);
8. the body must be JSON (object, array or scalar; strict UTF-8) within the limits of
   :mod:`api.http.jsonlimits` - 400;
9. the delivery identity (:mod:`api.ingress.identity`: signed material only for ``signature`` webhooks);
10. the accept transaction (:mod:`api.ingress.pipeline`) - then, and only then, 202.

Every 413, 401 and 400 is one failure against the webhook's failed-request budget and is logged while
the budget lasts; once it is spent they become 429s that are not logged, so no sender - authenticated
or not - can grow the delivery log faster than the budget.

Application logs never carry payloads, credentials or secret values; the delivery log keeps payloads of
Accepted entries only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping

from aiohttp import web
from prometheus_client import Counter as MetricCounter
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import AuthenticationRequired, BadRequest, PayloadTooLarge, ResourceNotFound
from api.context import BOX, CLOCK, ENGINE, REGISTRY, SESSIONS, SETTINGS, SIDE_CONNECTIONS
from api.http.jsonlimits import InvalidJson, loads_limited
from api.ingress import github, pipeline
from api.ingress.direct import DirectSqlite
from api.ingress.gate import INGRESS, Failures, Ingress, TooLarge, rate_limited, read_capped, secret_of
from api.ingress.identity import (
    FACTORY_DELIVERY_ID_HEADER,
    delivery_identity,
    normalize_id,
    signed_delivery_identity,
)
from api.ingress.lookup import FilterCache, SecretCache, WebhookRow
from api.ingress.signatures import Verification, bearer_token, token_matches, verify
from api.ingress.webhook_cache import WebhookCache, find_live_webhook
from api.ratelimit.counters import counter_for
from api.runs.event_hub import runs_queued
from store.db import session_factory

TOKEN, URL_TOKEN, SIGNATURE = "token", "url_token", "signature"
_NOT_FOUND = "no webhook accepts deliveries at this URL"
# Accept transactions in flight at once on PostgreSQL (each holds one pooled connection while it commits).
_PG_COMMITTERS = 4


async def receive(request: web.Request) -> web.Response:
    """``POST /webhooks/w/{uid}[/{token}]``. The handler opens no database session: the writer owns the
    accept and rejection transactions, and the lookups use the cache or their own reads (a session per
    request cost about 15% of a 404 or 429: docs/benchmarks.md, "Ingress at production speed")."""
    ingress = request.app[INGRESS]
    uid, token = request.match_info["uid"], request.match_info.get("token")
    settings = ingress.settings
    # (1) The live webhook (cached while ingress_generation is unchanged) and its captured secret (cached
    # by immutable version).
    webhook = await _find_webhook(ingress, uid)
    secret = await secret_of(ingress, webhook)
    if webhook is None or (token is not None and webhook.auth_mode != URL_TOKEN):
        ingress.count("not_found")
        raise ResourceNotFound(_NOT_FOUND)
    now = ingress.clock.now()
    failed = Failures(ingress, webhook, now.timestamp())
    # (2) Failed-request budget.
    budget = await ingress.counter.check(failed.key, settings.auth_failure_limit, failed.epoch)
    if not budget.allowed:
        raise failed.budget_spent(budget)
    token_failure = _token_failure(webhook, secret, request, token)
    # (3) Declared size (counted once, whether or not the credential was also wrong).
    declared = request.content_length
    if declared is not None and declared > settings.max_body_bytes:
        await failed.record(
            _header_identity(request, webhook),
            pipeline.REJECTED_TOO_LARGE,
            declared,
            f"Content-Length {declared} exceeds {settings.max_body_bytes} bytes",
        )
        raise PayloadTooLarge(f"body exceeds the limit of {settings.max_body_bytes} bytes")
    # (4) Token credentials, before reading the body.
    if token_failure is not None:
        await failed.record(
            _header_identity(request, webhook), pipeline.REJECTED_AUTH, declared or 0, token_failure
        )
        raise _unauthenticated(webhook)
    # (5) The body, capped while streaming.
    try:
        raw = await read_capped(request.content, settings.max_body_bytes)
    except TooLarge as exc:
        await failed.record(
            _header_identity(request, webhook),
            pipeline.REJECTED_TOO_LARGE,
            exc.received,
            f"body exceeds {settings.max_body_bytes} bytes",
        )
        raise PayloadTooLarge(f"body exceeds the limit of {settings.max_body_bytes} bytes") from None
    # (6) Provider signature over the raw bytes.
    signed_id: str | None = None
    if webhook.auth_mode == SIGNATURE:
        verification = _verify(webhook, secret, request, raw, now)
        if not verification.ok:
            unverified = delivery_identity(
                request.headers, raw, delivery_id_header=webhook.delivery_id_header
            )
            reason = verification.reason or "signature rejected"
            if verification.invalid_body:  # a good MAC over a body the scheme cannot read (Linear)
                await failed.record(unverified, pipeline.REJECTED_JSON, len(raw), reason)
                raise BadRequest(f"body is not valid JSON: {reason}")
            await failed.record(unverified, pipeline.REJECTED_AUTH, len(raw), reason)
            raise _unauthenticated(webhook)
        signed_id = verification.signed_delivery_id
    # (7) Delivery rate limit.
    rate = await ingress.counter.consume(f"wh-rate:{webhook.uid}", settings.delivery_rate_limit, failed.epoch)
    if not rate.allowed:
        ingress.count("rate_limited")
        raise rate_limited(f"more than {settings.delivery_rate_limit} deliveries per minute", rate)
    # (8) JSON, within the depth and number limits of every request body; (9) identity.
    if webhook.auth_mode == SIGNATURE:  # from signed material only: a replay cannot pick a new identity
        delivery_id = signed_delivery_identity(raw, signed_id=signed_id)
    else:
        delivery_id = delivery_identity(request.headers, raw, delivery_id_header=webhook.delivery_id_header)
    try:
        payload = loads_limited(raw, lone_surrogates=True)
    except InvalidJson as exc:
        await failed.record(delivery_id, pipeline.REJECTED_JSON, len(raw), str(exc))
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    # (10) Accept: log entry and runs in one transaction; 202 only after it committed.
    committed = await ingress.writer.accept(pipeline.Pending(webhook, delivery_id, raw, payload))
    ingress.count("duplicate" if committed.duplicate else "accepted")
    if committed.run_ids:
        runs_queued(request.app)  # queued runs reach waiting workers now, not at their next poll
    return web.json_response({"delivery_id": committed.delivery_id}, status=202)


def _verify(
    webhook: WebhookRow, secret: str | None, request: web.Request, raw: bytes, now: dt.datetime
) -> Verification:
    if secret is None or not webhook.signature_scheme:
        return Verification(False, "signing secret not supplied yet")
    return verify(webhook.signature_scheme, secret, request.headers, raw, now)


async def _find_webhook(ingress: Ingress, uid: str) -> WebhookRow | None:
    # On file-backed SQLite the generation (and, on a cache miss, the row) is read on this thread.
    return await find_live_webhook(ingress.webhooks, ingress.readers, ingress.direct, uid)


def _token_failure(
    webhook: WebhookRow, secret: str | None, request: web.Request, token: str | None
) -> str | None:
    """Why a ``token``/``url_token`` credential fails (None when it passes or the mode is not a token)."""
    if webhook.auth_mode == TOKEN:
        presented = bearer_token(request.headers.get("Authorization"))
        missing = "missing bearer token"
    elif webhook.auth_mode == URL_TOKEN:
        presented, missing = token, "missing URL token"
    elif webhook.auth_mode == SIGNATURE:
        return None
    else:
        return "unsupported authentication mode"
    if secret is None:
        return "webhook secret not available"
    if not presented:
        return missing
    return None if token_matches(secret, presented) else "credential does not match"


def _header_identity(request: web.Request, webhook: WebhookRow) -> str:
    """The identity of a delivery whose body was not read: a sender header, else ``unknown``."""
    headers: Mapping[str, str] = request.headers
    for name in (webhook.delivery_id_header, FACTORY_DELIVERY_ID_HEADER):
        found = normalize_id(headers.get(name)) if name else None
        if found is not None:
            return found
    return "unknown"


def _unauthenticated(webhook: WebhookRow) -> AuthenticationRequired:
    if webhook.auth_mode == TOKEN:
        return AuthenticationRequired(
            "missing or invalid bearer token", headers={"WWW-Authenticate": 'Bearer realm="webhook"'}
        )
    if webhook.auth_mode == URL_TOKEN:
        return AuthenticationRequired("missing or invalid URL token")
    return AuthenticationRequired("missing, invalid or expired signature")


async def _writer_lifecycle(app: web.Application) -> AsyncIterator[None]:
    yield
    ingress = app[INGRESS]
    await ingress.writer.close()
    if ingress.direct is not None:
        await ingress.direct.close()


def _readers(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> async_sessionmaker[AsyncSession]:
    """Read-only lookups: autocommit connections on PostgreSQL; on SQLite plain sessions (reads there start
    no transaction anyway, and switching a pooled connection's isolation level costs a thread hop)."""
    if engine.dialect.name == "sqlite":
        return sessions
    return session_factory(engine.execution_options(isolation_level="AUTOCOMMIT"))


def setup(app: web.Application) -> None:
    engine, filters = app[ENGINE], FilterCache()
    direct = DirectSqlite.open(engine)
    # A snapshot of every live webhook: an unknown UID costs no lookup (docs/ingress.md, "Webhook lookup
    # cache").
    webhooks = WebhookCache(snapshot=True)
    if direct is None:  # the generation is read at most every 100 ms: see this process's writes at once
        app.cleanup_ctx.append(webhooks.watching(engine.sync_engine))
    app[INGRESS] = Ingress(
        readers=_readers(engine, app[SESSIONS]),
        clock=app[CLOCK],
        settings=app[SETTINGS],
        counter=counter_for(engine),
        secrets=SecretCache(app[BOX]),
        filters=filters,
        webhooks=webhooks,
        writer=pipeline.Writer(
            app[SESSIONS],
            app[CLOCK],
            filters,
            committers=1 if engine.dialect.name == "sqlite" else _PG_COMMITTERS,
            direct=direct,
        ),
        outcomes=MetricCounter(
            "factoryctl_ingress_deliveries",
            "Webhook deliveries by outcome.",
            ["outcome"],
            registry=app[REGISTRY],
        ),
        direct=direct,
    )
    if direct is not None:
        app[SIDE_CONNECTIONS].append(direct.release)
    app.cleanup_ctx.append(_writer_lifecycle)
    app.router.add_post("/webhooks/w/{uid}", receive)
    app.router.add_post("/webhooks/w/{uid}/{token}", receive)
    github.setup(app)  # the GitHub App deliveries share this app's Ingress
