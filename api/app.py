"""The aiohttp application factory: one app serves the REST API, the ingress and ops endpoints.

Everything a handler needs travels in typed :class:`web.AppKey` entries; background work (lease
reaper, delivery retention, service-hosted workers, the reconciler loop) is attached by the
caller as ``cleanup_ctx`` lifecycles so it starts and stops with the app.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import MappingProxyType

from aiohttp import web
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine

from api import ops
from api.agents import routes as agents_routes
from api.auth_failures import AUTH_FAILURES, budget_for, forwarded_client_middleware
from api.claims import artifacts as claims_artifacts
from api.claims import routes as claims_routes
from api.console import routes as console_routes
from api.context import (
    BOX,
    CLOCK,
    ENGINE,
    RECONCILE,
    REGISTRY,
    SESSIONS,
    SETTINGS,
    SIDE_CONNECTIONS,
    ReconcileTrigger,
    ServerSettings,
)
from api.environments import routes as environments_routes
from api.factories import reconcile as factories_reconcile
from api.factories import routes as factories_routes
from api.http.urls import refuse_nul
from api.ingress import routes as ingress_routes
from api.management import routes as management_routes
from api.notifications import routes as notifications_routes
from api.periodic import finish
from api.problems import problem_middleware
from api.runs import artifacts as runs_artifacts
from api.runs import routes as runs_routes
from api.runs.claim_signal import CLAIM_SIGNAL, ClaimSignal
from api.schedules import routes as schedules_routes
from store.clock import Clock, SystemClock
from store.crypto import SecretBox
from store.db import session_factory
from store.pool_trim import trim_when_quiet

# Each module exposes ``setup(app)`` adding its routes (and, if needed, its own cleanup_ctx). They are
# imported here, not looked up by name, so the import graph and its contracts see these arrows
# (docs/architecture.md, "Floors of api"); callers still choose modules by name.
ROUTES: Mapping[str, Callable[[web.Application], None]] = MappingProxyType(
    {
        "api.ops": ops.setup,
        "api.runs.routes": runs_routes.setup,
        "api.runs.artifacts": runs_artifacts.setup,
        "api.factories.routes": factories_routes.setup,
        "api.factories.reconcile": factories_reconcile.setup,
        "api.management.routes": management_routes.setup,
        "api.ingress.routes": ingress_routes.setup,
        "api.claims.routes": claims_routes.setup,
        "api.claims.artifacts": claims_artifacts.setup,
        "api.environments.routes": environments_routes.setup,
        "api.schedules.routes": schedules_routes.setup,
        "api.agents.routes": agents_routes.setup,
        "api.notifications.routes": notifications_routes.setup,
        "api.console.routes": console_routes.setup,
    }
)
ROUTE_MODULES: tuple[str, ...] = tuple(ROUTES)

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
    app[SIDE_CONNECTIONS] = []
    app[AUTH_FAILURES] = budget_for(
        engine, app[CLOCK], settings.client_auth_failure_limit, settings.trusted_proxies
    )
    if settings.trusted_proxies:
        app.middlewares.insert(0, forwarded_client_middleware(app[AUTH_FAILURES]))
    app[CLAIM_SIGNAL] = ClaimSignal()
    app[ops.LATENCY] = latency
    for name in route_modules:
        ROUTES[name](app)
    app.cleanup_ctx.append(_trim_quiet_pool)
    app.cleanup_ctx.extend(lifecycles)
    return app


async def _trim_quiet_pool(app: web.Application) -> AsyncIterator[None]:
    """Pooled connections beyond the last minute's peak use close, so descriptors and threads return to
    idle after load (:mod:`store.pool_trim`; docs/operations.md, "Fair sharing (SQLite)")."""
    closers = app[SIDE_CONNECTIONS]
    side = tuple(closers)
    stop = asyncio.Event()
    task = asyncio.create_task(trim_when_quiet(app[ENGINE], side=side, stop=stop), name="pool-trim")
    try:
        yield
    finally:
        stop.set()
        await finish(task)
