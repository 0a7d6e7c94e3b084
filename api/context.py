"""Typed application keys and server settings: everything a handler may reach, and nothing global."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from store.clock import Clock
from store.crypto import SecretBox


@dataclass(frozen=True)
class ServerSettings:
    """Resolved configuration of one server process (flags and env are read at the CLI edge)."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None  # base of ingress URLs; defaults to http://host:port
    delivery_rate_limit: int = 60  # per webhook per minute
    auth_failure_limit: int = 30  # failed auth attempts per webhook per minute
    # Failed API-key authentications per client address per minute, API and console together, and the
    # proxies whose X-Forwarded-For names that address (docs/api.md, "Authentication").
    client_auth_failure_limit: int = 30
    trusted_proxies: tuple[str, ...] = ()
    max_body_bytes: int = 262_144
    delivery_retention_days: float = 7  # fractions too (0.5: twelve hours)
    delivery_retention_count: int = 50
    lease_seconds: float = 30.0
    claim_wait_max_seconds: float = 30.0
    max_attachment_bytes: int = 1_048_576
    # Per-run bounds on worker output and queued follow-ups (docs/workers.md, "Log limits", "Follow-ups").
    run_log_max_lines: int = 100_000
    run_log_max_bytes: int = 16 * 1024 * 1024
    followups_max_pending: int = 20
    followups_max_pending_bytes: int = 1_048_576
    run_log_retention_days: int = 30  # 0 keeps run logs forever (docs/operations.md, "Run log retention")
    skills_source: str | None = None
    # The skills clone cache (docs/agent-config.md, "Skill repositories and the clone cache").
    skills_cache_max_bytes: int = 512 * 1024 * 1024
    skills_cache_max_entries: int = 64
    skills_clone_max_bytes: int = 64 * 1024 * 1024
    skills_failure_seconds: float = 60.0

    @property
    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"


SETTINGS = web.AppKey("settings", ServerSettings)
ENGINE = web.AppKey("engine", AsyncEngine)
SESSIONS: web.AppKey[async_sessionmaker[AsyncSession]] = web.AppKey("sessions")
CLOCK = web.AppKey("clock", Clock)
BOX = web.AppKey("box", SecretBox)
REGISTRY = web.AppKey("registry", CollectorRegistry)


@dataclass(frozen=True)
class ReconcilerHealth:
    """The reconciler loop's health as ``/readyz`` reports it (docs/operations.md, "Readiness")."""

    healthy: bool
    reason: str = ""
    running: bool = True  # False: the loop stopped or died; only then is the replica not ready


@dataclass
class ReconcileTrigger:
    """Lets ``POST /factory/{uid}/reconcile`` wake the reconciler loop of this process (if any), and
    ``/readyz`` ask whether that loop runs and makes progress (``health``: None when there is no loop)."""

    source: str | None = None  # what the loop follows: a directory or "git URL@branch"
    force: Callable[[], None] | None = None
    health: Callable[[], ReconcilerHealth] | None = None


RECONCILE = web.AppKey("reconcile_trigger", ReconcileTrigger)
# Closers of the store's connections held outside the engine's pool (SQLite's ingress writer and reader),
# run when the quiet-pool trim empties the pool (store/pool_trim.py).
SIDE_CONNECTIONS: web.AppKey[list[Callable[[], Awaitable[None]]]] = web.AppKey("side_connections")


def sessions(request: web.Request) -> async_sessionmaker[AsyncSession]:
    """The session factory; handlers open one session per request and own its transaction."""
    return request.app[SESSIONS]
