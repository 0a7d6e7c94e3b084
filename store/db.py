"""Engines, sessions and migrations.

SQLite gets WAL, a busy timeout, foreign keys, a bound on the WAL file left after a checkpoint and (for new
databases) incremental auto-vacuum on every connection; PostgreSQL uses asyncpg. The checkpoint and vacuum
helpers below are what the maintenance job calls (docs/operations.md, "SQLite file and WAL size").
Migrations (Alembic, ``store/migrations``) run on start, under an advisory lock on PostgreSQL so
several replicas starting together migrate once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from store.write_gate import INFO_KEY, WriteGate

MIGRATIONS = Path(__file__).parent / "migrations"
_MIGRATION_LOCK = 0x666163746F7279  # "factory"
# After a checkpoint that resets the WAL, SQLite truncates the file to at most this many bytes: without it
# the WAL keeps its high-water mark for ever (docs/operations.md, "SQLite file and WAL size").
WAL_SIZE_LIMIT = 16 * 1024 * 1024


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
            # Only a new database (no tables yet) can take it; on an existing one the pragma would wait for
            # the write lock on every new connection (measured: behind any open write transaction).
            cur.execute("SELECT count(*) FROM sqlite_master")
            if cur.fetchone()[0] == 0:
                cur.execute("PRAGMA auto_vacuum=INCREMENTAL")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
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
    """Sessions on ``engine``; on SQLite the factory carries the process's write gate
    (:mod:`store.write_gate`), so the writers holding this factory take turns instead of meeting in
    SQLite's busy handler."""
    info = {INFO_KEY: WriteGate()} if is_sqlite(engine) else {}
    return async_sessionmaker(engine, expire_on_commit=False, info=info)


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


@dataclass(frozen=True)
class Checkpoint:
    """What ``PRAGMA wal_checkpoint`` answered: ``busy`` when a reader or writer kept it from finishing."""

    busy: bool
    wal_pages: int
    checkpointed_pages: int


async def wal_checkpoint(engine: AsyncEngine, mode: str = "PASSIVE") -> Checkpoint | None:
    """Copy the WAL into the database file (SQLite; None on PostgreSQL, which has nothing to do).

    ``PASSIVE`` never waits for anyone; ``TRUNCATE`` waits (on the busy timeout) for writers and readers to
    finish, then empties the file: the job uses it only after a prune pass (docs/operations.md)."""
    if mode not in ("PASSIVE", "TRUNCATE"):
        raise ValueError(f"unknown checkpoint mode {mode!r}")
    if not is_sqlite(engine):
        return None
    async with engine.connect() as conn:
        row: Any = (await conn.exec_driver_sql(f"PRAGMA wal_checkpoint({mode})")).one()
        busy, wal_pages, done = row
    return Checkpoint(busy=bool(busy), wal_pages=int(wal_pages), checkpointed_pages=int(done))


def wal_bytes(engine: AsyncEngine) -> int | None:
    """The size of a SQLite file database's WAL (0 when absent); None for PostgreSQL or in-memory SQLite."""
    database = engine.url.database
    if not is_sqlite(engine) or not database or database == ":memory:":
        return None
    try:
        return Path(f"{database}-wal").stat().st_size
    except FileNotFoundError:
        return 0


# The tables whose rows are updated or deleted all day: runs change state several times each, deliveries,
# runs and their rows go by retention, rate counters are rewritten every window. A test classifies every
# table of the schema, so a new one is either listed here or declared steady there.
CHURNED_TABLES = (
    "runs",
    "run_events",
    "run_logs",
    "run_attachments",
    "run_artifacts",
    "run_session_states",
    "run_scores",
    "run_followups",
    "notification_messages",
    "notification_attempts",
    "deliveries",
    "rate_counters",
    "console_sessions",
    "schedule_fires",
    "locks",
)


async def vacuum_churned(engine: AsyncEngine) -> list[str] | None:
    """PostgreSQL: ``VACUUM (ANALYZE)`` each of :data:`CHURNED_TABLES`, so the space of dead rows is reused
    and the planner's statistics follow the tables, whether or not the server's autovacuum keeps up (or
    runs at all); returns the tables it could not vacuum. None on SQLite (incremental vacuum instead).
    Plain ``VACUUM`` takes no lock that writers or readers wait for; it cannot run in a transaction."""
    if is_sqlite(engine):
        return None
    failed: list[str] = []
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in CHURNED_TABLES:
            try:
                await conn.exec_driver_sql(f'VACUUM (ANALYZE) "{table}"')
            except DBAPIError:
                failed.append(table)
    return failed


async def release_free_pages(engine: AsyncEngine, max_pages: int) -> int | None:
    """Give up to ``max_pages`` free pages back to the file system (SQLite with ``auto_vacuum=INCREMENTAL``);
    returns how many pages were free before, or None when this database cannot (PostgreSQL, or a SQLite
    file created before incremental vacuum: docs/operations.md says how to switch it)."""
    if not is_sqlite(engine):
        return None
    async with engine.connect() as conn:
        mode = (await conn.exec_driver_sql("PRAGMA auto_vacuum")).scalar_one()
        free = int((await conn.exec_driver_sql("PRAGMA freelist_count")).scalar_one())
        if int(mode) != 2:  # 2 = INCREMENTAL
            return None
        if free:
            # Each step of this pragma frees one page, and a statement without result columns is stepped
            # once by ``execute``: only ``executescript`` runs it to the end.
            driver: Any = (await conn.get_raw_connection()).driver_connection  # aiosqlite's connection
            await driver.executescript(f"PRAGMA incremental_vacuum({int(max_pages)})")
    return free
