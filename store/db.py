"""Engines, sessions and migrations.

SQLite gets WAL, a busy timeout and foreign keys on every connection; PostgreSQL uses asyncpg.
Migrations (Alembic, ``store/migrations``) run on start, under an advisory lock on PostgreSQL so
several replicas starting together migrate once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

MIGRATIONS = Path(__file__).parent / "migrations"
_MIGRATION_LOCK = 0x666163746F7279  # "factory"


def normalize_url(url: str) -> str:
    """Accept plain driver-less URLs (``postgresql://``, ``sqlite:///``) and pick the async driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif parsed.drivername == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    return parsed.render_as_string(hide_password=False)


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":  # (in memory: one static connection)
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            # A fixed pool here too: an overflow connection is closed when it is returned, and a handler
            # cancelled at shutdown in the middle of that close left a traceback in the log.
            kwargs.setdefault("pool_size", 20)
            kwargs.setdefault("max_overflow", 0)
            kwargs.setdefault("pool_timeout", 10)
        engine = create_async_engine(url, connect_args={"timeout": 30}, **kwargs)

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    # A fixed pool (docs/operations.md, "Database connections"): overflow connections are opened under load
    # and closed again at once, and that churn (a TCP connect and authentication per request) halved
    # ingress throughput on PostgreSQL. Waiting for a pooled connection is cheaper; a request that waits
    # longer than pool_timeout gets a 503. No pre-ping either: it is a round trip on every checkout, and
    # a connection found dead on use invalidates the pool (the request gets a 503, the next ones reconnect).
    kwargs.setdefault("pool_size", 20)
    kwargs.setdefault("max_overflow", 0)
    kwargs.setdefault("pool_timeout", 10)
    kwargs.setdefault("pool_pre_ping", False)
    # asyncpg waits 60 s for a connection by default: a database that drops packets would hold every
    # request that long instead of answering 503 (docs/operations.md, "Faults and recovery").
    kwargs.setdefault("connect_args", {"timeout": 10})
    return create_async_engine(url, **kwargs)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def _alembic_config(connection: Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
    command.upgrade(_alembic_config(connection), "head")


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (idempotent; safe with concurrent replicas)."""
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)
