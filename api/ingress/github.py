"""``POST /webhooks/github/{uid}``: deliveries of a team's GitHub App (docs/ingress.md, "GitHub App
deliveries").

The same checks, in the same order, as a ``signature`` webhook (:mod:`api.ingress.routes`), with the
shared parts of :mod:`api.ingress.gate` and the same accept transaction (:mod:`api.ingress.pipeline`);
what differs is what the delivery is checked against (the team's connection, :mod:`.github_routing`), its
identity and how it is routed:

1. the connection must exist - else 404 (not logged);
2. the failed-request budget - else 429 (not logged);
3. ``Content-Length`` over the limit - 413;
4. GitHub's ``X-GitHub-Event`` and ``X-GitHub-Delivery`` headers, present and printable, before the body
   is read - 401 (every GitHub delivery carries both);
5. the body, read with a streaming cap - 413;
6. ``X-Hub-Signature-256`` over the raw bytes with the current version of the connection's secret
   (:func:`api.ingress.signatures.verify`, scheme ``github``) - 401;
7. the delivery rate limit - 429 (not logged);
8. JSON within the limits - 400;
9. identity: ``X-GitHub-Delivery`` (normalized like any delivery ID);
10. the accept transaction, routed by the event's ``github`` triggers - then 202. ``ping`` is accepted
    and starts nothing.
"""

from __future__ import annotations

import re

from aiohttp import web

from api import AuthenticationRequired, BadRequest, PayloadTooLarge, ResourceNotFound
from api.http.jsonlimits import InvalidJson, loads_limited
from api.ingress import pipeline
from api.ingress.gate import INGRESS, Failures, Ingress, TooLarge, rate_limited, read_capped, secret_of
from api.ingress.github_routing import DELIVERY_HEADER, EVENT_HEADER, find_connection
from api.ingress.identity import body_identity, normalize_id
from api.ingress.lookup import WebhookRow
from api.ingress.signatures import verify
from api.runs.event_hub import runs_queued

PATH = "/webhooks/github/{uid}"
_NOT_FOUND = "no GitHub App connection accepts deliveries at this URL"
_EVENT = re.compile(r"[a-z][a-z0-9_]{0,63}")  # GitHub's event names: issues, pull_request_review, ...


async def receive(request: web.Request) -> web.Response:
    """``POST /webhooks/github/{uid}``: 202 once the delivery, its log entry and its runs committed."""
    ingress = request.app[INGRESS]
    settings = ingress.settings
    connection = await _connection(ingress, request.match_info["uid"])
    if connection is None:
        ingress.count("not_found")
        raise ResourceNotFound(_NOT_FOUND)
    secret = await secret_of(ingress, connection)
    failed = Failures(ingress, connection, ingress.clock.now().timestamp())
    # (2) Failed-request budget.
    budget = await ingress.counter.check(failed.key, settings.auth_failure_limit, failed.epoch)
    if not budget.allowed:
        raise failed.budget_spent(budget)
    delivery_id = normalize_id(request.headers.get(DELIVERY_HEADER))
    label = delivery_id or "unknown"
    # (3) Declared size.
    declared = request.content_length
    if declared is not None and declared > settings.max_body_bytes:
        detail = f"Content-Length {declared} exceeds {settings.max_body_bytes} bytes"
        await failed.record(label, pipeline.REJECTED_TOO_LARGE, declared, detail)
        raise PayloadTooLarge(f"body exceeds the limit of {settings.max_body_bytes} bytes")
    # (4) GitHub's headers.
    event = request.headers.get(EVENT_HEADER, "").strip()
    missing = _missing_header(event, delivery_id)
    if missing is not None:
        await failed.record(label, pipeline.REJECTED_AUTH, declared or 0, missing)
        raise _unauthenticated()
    assert delivery_id is not None  # checked by _missing_header
    # (5) The body, capped while streaming.
    try:
        raw = await read_capped(request.content, settings.max_body_bytes)
    except TooLarge as exc:
        detail = f"body exceeds {settings.max_body_bytes} bytes"
        await failed.record(label, pipeline.REJECTED_TOO_LARGE, exc.received, detail)
        raise PayloadTooLarge(f"body exceeds the limit of {settings.max_body_bytes} bytes") from None
    # (6) X-Hub-Signature-256 over the raw bytes.
    if secret is None:
        await failed.record(label, pipeline.REJECTED_AUTH, len(raw), "signing secret not supplied yet")
        raise _unauthenticated()
    now = ingress.clock.now()
    verification = verify(connection.signature_scheme or "", secret, request.headers, raw, now)
    if not verification.ok:
        reason = verification.reason or "signature rejected"
        await failed.record(label, pipeline.REJECTED_AUTH, len(raw), reason)
        raise _unauthenticated()
    # (7) Delivery rate limit.
    limit = settings.delivery_rate_limit
    rate = await ingress.counter.consume(f"wh-rate:{connection.uid}", limit, failed.epoch)
    if not rate.allowed:
        ingress.count("rate_limited")
        raise rate_limited(f"more than {settings.delivery_rate_limit} deliveries per minute", rate)
    # (8) JSON within the limits.
    try:
        payload = loads_limited(raw, lone_surrogates=True)
    except InvalidJson as exc:
        await failed.record(delivery_id, pipeline.REJECTED_JSON, len(raw), str(exc))
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    # (9) identity, (10) accept: log entry and runs in one transaction; 202 only after it committed.
    pending = pipeline.Pending(
        connection, delivery_id, raw, payload, event=event, content_key=body_identity(raw)
    )
    committed = await ingress.writer.accept(pending)
    ingress.count("duplicate" if committed.duplicate else "accepted")
    if committed.run_ids:
        runs_queued(request.app)
    return web.json_response({"delivery_id": committed.delivery_id}, status=202)


async def _connection(ingress: Ingress, uid: str) -> WebhookRow | None:
    if not uid.startswith("gh_"):  # not a connection UID: no read
        return None
    async with ingress.readers() as reader:
        return await find_connection(reader, uid)


def _missing_header(event: str, delivery_id: str | None) -> str | None:
    if not event:
        return f"missing {EVENT_HEADER} header"
    if _EVENT.fullmatch(event) is None:
        return f"{EVENT_HEADER} is not a GitHub event name"
    if delivery_id is None:
        return f"missing {DELIVERY_HEADER} header"
    return None


def _unauthenticated() -> AuthenticationRequired:
    return AuthenticationRequired("missing, invalid or expired signature")


def setup(app: web.Application) -> None:
    """The route; the app's :data:`~api.ingress.gate.INGRESS` is built by :func:`api.ingress.routes.setup`."""
    app.router.add_post(PATH, receive)
