"""Operational endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document, JSON logs, and
what a trusted proxy's ``X-Forwarded-Proto`` changes (docs/operations.md, "Behind a reverse proxy")."""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from aiohttp.abc import AbstractAccessLogger
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from sqlalchemy import text

from api.auth_failures import AUTH_FAILURES, CLIENT, Network
from api.context import ENGINE, RECONCILE, REGISTRY
from api.redaction import redact_path

LATENCY = web.AppKey("latency_histogram", Histogram)


class JsonAccessLogger(AbstractAccessLogger):
    """One JSON object per request; never logs headers, bodies or query strings (they may carry secrets),
    and shows a ``url_token`` webhook's secret path segment as ``{token}`` (:func:`redact_path`).

    ``remote`` is the TCP peer; behind ``--trusted-proxy`` networks ``client`` is the address they forwarded
    (docs/operations.md, "Behind a reverse proxy"), never an ``X-Forwarded-For`` an untrusted peer wrote."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        record: dict[str, object] = {
            "msg": "request",
            "method": request.method,
            "path": redact_path(request.path),
            "status": response.status,
            "duration_ms": round(time * 1000, 2),
            "remote": request.remote,
        }
        if CLIENT in request:
            record["client"] = request[CLIENT]
        self.logger.info(json.dumps(record))


def route_label(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


def metrics_middleware(histogram: Histogram) -> Any:
    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            histogram.labels(request.method, route_label(request), str(status)).observe(
                time.perf_counter() - start
            )

    return middleware


def new_latency_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "factoryctl_http_request_duration_seconds",
        "HTTP request latency by method, route and status.",
        ["method", "route", "status"],
        registry=registry,
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready when the database answers and, in a process that follows a definitions source, the
    reconciler loop runs (docs/operations.md, "Readiness").

    A loop that runs but keeps failing to read its source is reported (``reconciler: failing`` and a
    ``reason``) without taking the replica out: ingress and the run API do not need the git host, and
    every replica would fail together. Only a loop that stopped makes the replica unready."""
    body: dict[str, str] = {"status": "ready", "database": "up"}
    try:
        async with request.app[ENGINE].connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        logging.getLogger("factoryctl.api").warning("readiness check failed: %s", type(exc).__name__)
        body = {"status": "unavailable", "database": "down"}
    trigger = request.app.get(RECONCILE)
    health = trigger.health if trigger is not None else None
    if health is not None:
        state = health()
        body["reconciler"] = "ok" if state.healthy else "failing" if state.running else "stopped"
        if not state.healthy:
            body["reason"] = state.reason
        if not state.running:
            body["status"] = "unavailable"
    return web.json_response(body, status=200 if body["status"] == "ready" else 503)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def peer_is_trusted(remote: str | None, trusted: tuple[Network, ...]) -> bool:
    """Whether the TCP peer is one of the ``--trusted-proxy`` networks (an IPv4-mapped IPv6 peer as IPv4)."""
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == net.version and address in net for net in trusted)


def forwarded_https(request: web.BaseRequest, trusted: tuple[Network, ...]) -> bool:
    """The client reached a trusted proxy over https: the proxy nearest to us (the right-most
    ``X-Forwarded-Proto`` value) says so, and the TCP peer is that proxy. Any other peer's header is
    ignored: a client talking to the server directly cannot claim https."""
    if not trusted or not peer_is_trusted(request.remote, trusted):
        return False
    values = [
        v.strip().lower() for h in request.headers.getall("X-Forwarded-Proto", []) for v in h.split(",")
    ]
    return bool(values) and values[-1] == "https"


def _secure(cookie: str) -> str:
    attributes = [part.strip().lower() for part in cookie.split(";")[1:]]
    return cookie if "secure" in attributes else f"{cookie}; Secure"


def secure_cookies_behind_https(trusted: tuple[Network, ...]) -> Callable[..., Awaitable[None]]:
    """An ``on_response_prepare`` hook: behind a trusted proxy that terminated TLS every cookie the
    response sets is ``Secure``, whatever ``--public-url`` says (the console's own rule: docs/console.md,
    "Signing in"). It rewrites the rendered ``Set-Cookie`` headers: aiohttp renders cookies before the
    hook runs."""

    async def hook(request: web.Request, response: web.StreamResponse) -> None:
        cookies = response.headers.getall(hdrs.SET_COOKIE, [])
        if not cookies or not forwarded_https(request, trusted):
            return
        del response.headers[hdrs.SET_COOKIE]
        for cookie in cookies:
            response.headers.add(hdrs.SET_COOKIE, _secure(cookie))

    return hook


def setup(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    budget = app.get(AUTH_FAILURES)
    if budget is not None and budget.trusted:
        app.on_response_prepare.append(secure_cookies_behind_https(budget.trusted))
