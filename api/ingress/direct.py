"""Synchronous SQLite access for the ingress hot path: one writer thread, one loop-thread reader.

Through aiosqlite every statement crosses to the driver's thread and back about four times (cursor,
execute, fetch, close), and each crossing must win the GIL back from a busy event loop. An accepted
delivery is a handful of statements, so those hand-offs, not SQLite, were most of its cost. Here:

- the group-commit writer runs a whole batch transaction (insert, routing, runs, attachments, commit) as
  one call on a dedicated thread that owns one connection: two hand-offs per batch instead of dozens;
- the per-request reads run on the event-loop thread itself, outside any transaction, so each sees the
  latest commit: the ``ingress_generation`` value (a one-row primary-key SELECT, a few microseconds) on
  every request, and the webhook lookup (a primary-key SELECT joined to its secret, tens of
  microseconds) when the webhook cache has no answer for the UID
  (:class:`~api.ingress.webhook_cache.WebhookCache`: the cache is emptied whenever the generation
  changed, so enabling, disabling, deleting and rotating still take effect on the very next delivery,
  whichever process wrote). WAL readers do not wait for writers; should a read ever find the database
  busy (it is given no busy timeout, so the loop never sleeps in SQLite's busy handler), the caller
  falls back to the async path, uncached.

The writer connection uses the same file and pragmas (WAL, ``synchronous=NORMAL``, foreign keys, busy
timeout) as the app's engine, so durability is unchanged; the reader only reads. An in-memory database
cannot be shared with a second engine:
:meth:`DirectSqlite.open` returns None for it and ingress keeps the async path.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from api.ingress.lookup import LIVE_WEBHOOKS_QUERY, WEBHOOK_QUERY, WebhookRow, webhook_row
from api.ingress.webhook_cache import GENERATION_QUERY, GenerationMissing

T = TypeVar("T")
_BUSY_TIMEOUT_MS = 30_000


def _sync_engine(url: Any, busy_timeout_ms: int) -> Engine:
    engine = create_engine(
        url.set(drivername="sqlite+pysqlite"),
        poolclass=NullPool,
        connect_args={"check_same_thread": False},
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.close()

    return engine


class DirectSqlite:
    """The writer thread with its connection, and the loop-thread reader connection."""

    def __init__(self, writer: Engine, path: str) -> None:
        self._writer_engine, self._path = writer, path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingress-writer")
        self._writer: Connection | None = None  # created and used only on the writer thread
        self._reader: sqlite3.Connection | None = None  # created and used only on the event-loop thread
        compiled = WEBHOOK_QUERY.compile(dialect=writer.dialect)
        if compiled.positiontup != ["uid"]:
            raise RuntimeError("the webhook query must take exactly one parameter, the UID")
        self._webhook_sql = str(compiled)  # plain columns, no type conversions: run it on the driver
        live = LIVE_WEBHOOKS_QUERY.compile(dialect=writer.dialect)
        if live.positiontup:
            raise RuntimeError("the live-webhooks query must take no parameter")
        self._live_sql = f"{live} LIMIT ?"
        generation = GENERATION_QUERY.compile(dialect=writer.dialect, compile_kwargs={"literal_binds": True})
        self._generation_sql = str(generation)

    @classmethod
    def open(cls, engine: AsyncEngine) -> DirectSqlite | None:
        """For a file-backed SQLite engine; None for other stores and for in-memory databases."""
        url = engine.url
        if engine.dialect.name != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        if "mode=memory" in str(url.query):
            return None
        return cls(_sync_engine(url, _BUSY_TIMEOUT_MS), url.database)

    def generation(self) -> int | Exception:
        """The ``ingress_generation`` value, read on the calling thread; the error (not raised) when
        SQLite could not answer at once or the row is missing."""
        found = self._read_one(self._generation_sql, ())
        if isinstance(found, Exception):
            return found
        if found is None:
            return GenerationMissing("the ingress_generation row is missing")
        return int(found[0])

    def find_webhook(self, uid: str) -> WebhookRow | sqlite3.Error | None:
        """The live webhook (see :func:`~api.ingress.lookup.find_webhook`), read on the calling thread;
        the error (not raised) when SQLite could not answer at once, so the caller can use the async path.
        """
        found = self._read_one(self._webhook_sql, (uid,))
        return found if isinstance(found, sqlite3.Error) else webhook_row(found)

    def live_webhooks(self, limit: int) -> list[WebhookRow] | sqlite3.Error:
        """Up to ``limit`` live webhooks (every team's), read on the calling thread, or the error."""
        rows = self._read(self._live_sql, (limit,), all_rows=True)
        if isinstance(rows, sqlite3.Error):
            return rows
        return [row for row in map(webhook_row, rows) if row is not None]

    def _read_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        """The first row of a read on the reader connection (None: no row), or the sqlite3 error."""
        return self._read(sql, params, all_rows=False)

    def _read(self, sql: str, params: tuple[Any, ...], *, all_rows: bool) -> Any:
        try:
            if self._reader is None:
                self._reader = sqlite3.connect(self._path, check_same_thread=False, timeout=0)
                self._reader.execute("PRAGMA busy_timeout=0")
            # No BEGIN precedes a SELECT in autocommit mode: the read sees the latest commit and ends
            # with the cursor.
            cursor = self._reader.execute(sql, params)
            try:
                return cursor.fetchall() if all_rows else cursor.fetchone()
            finally:
                cursor.close()
        except sqlite3.Error as exc:
            self._close_reader()
            return exc

    async def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work(conn)`` in one committed transaction on the writer thread (rolled back if it raises)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._transaction, work)

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        if self._writer is None:
            self._writer = self._writer_engine.connect()
        try:
            with self._writer.begin():
                return work(self._writer)
        except OperationalError:
            self._writer.close()  # a connection in an unknown state is not reused
            self._writer = None
            raise

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    async def release(self) -> None:
        """Close both connections until they are next needed (each reopens on its next use), so a quiet
        process can close every connection of the file at once (:mod:`store.pool_trim`)."""
        self._close_reader()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_writer)

    async def close(self) -> None:
        """Close both connections; the writer's on its own thread, after any queued work."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_writer)
        self._executor.shutdown(wait=True)
        self._close_reader()
        self._writer_engine.dispose()
