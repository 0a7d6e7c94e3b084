"""The aiohttp application factory: one app serves the REST API, the ingress and ops endpoints.

Everything a handler needs travels in typed :class:`web.AppKey` entries; background work (lease
reaper, delivery retention, service-hosted workers, the reconciler loop) is attached by the
caller as ``cleanup_ctx`` lifecycles so it starts and stops with the app.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine

from api import ops
from api.auth_failures import AUTH_FAILURES, budget_for
from api.context import (
    BOX,
    CLOCK,
    ENGINE,
    RECONCILE,
    REGISTRY,
    SESSIONS,
    SETTINGS,
    ReconcileTrigger,
    ServerSettings,
)
from api.http.urls import refuse_nul
from api.problems import problem_middleware
from api.runs.claim_signal import CLAIM_SIGNAL, ClaimSignal
from store.clock import Clock, SystemClock
from store.crypto import SecretBox
from store.db import session_factory

# Each module exposes ``setup(app)`` adding its routes (and, if needed, its own cleanup_ctx).
ROUTE_MODULES: tuple[str, ...] = (
    "api.ops",
    "api.runs.routes",
    "api.factories.routes",
    "api.factories.reconcile",
    "api.management.routes",
    "api.ingress.routes",
    "api.claims.routes",
    "api.environments.routes",
    "api.schedules.routes",
    "api.agents.routes",
    "api.notifications.routes",
    "api.console.routes",
)

Lifecycle = Callable[[web.Application], AsyncIterator[None]]


def create_app(
    settings: ServerSettings,
    engine: AsyncEngine,
    box: SecretBox,
    *,
    clock: Clock | None = None,
    lifecycles: Sequence[Lifecycle] = (),
    route_modules: Sequence[str] = ROUTE_MODULES,
) -> web.Application:
    registry = CollectorRegistry()
    latency = ops.new_latency_histogram(registry)
    app = web.Application(
        middlewares=[ops.metrics_middleware(latency), problem_middleware, refuse_nul],
        client_max_size=max(settings.max_body_bytes, 8 * 1024 * 1024) + 1024,
    )
    app[SETTINGS] = settings
    app[ENGINE] = engine
    app[SESSIONS] = session_factory(engine)
    app[CLOCK] = clock or SystemClock()
    app[BOX] = box
    app[REGISTRY] = registry
    app[RECONCILE] = ReconcileTrigger()
    app[AUTH_FAILURES] = budget_for(
        engine, app[CLOCK], settings.client_auth_failure_limit, settings.trusted_proxies
    )
    app[CLAIM_SIGNAL] = ClaimSignal()
    app[ops.LATENCY] = latency
    for name in route_modules:
        importlib.import_module(name).setup(app)
    app.cleanup_ctx.extend(lifecycles)
    return app
