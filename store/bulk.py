"""Multi-row INSERTs that run at the driver level on a synchronous SQLite connection.

The ingress writer thread (docs/ingress.md, "Group commit") inserts a batch's log entries, runs,
attachments and run events. Through SQLAlchemy each row costs an execution context, parameter
construction and a type-processor chain in Python, while the writer thread competes with the event loop
for the GIL; that Python was about a third of the writer's time per delivery (docs/benchmarks.md, "Ingress
at production speed"). Here a Core INSERT is compiled by SQLAlchemy once per (statement, columns) and run
with the ``sqlite3`` cursor directly; each value goes through the bind processor SQLAlchemy itself would
apply to its column (datetimes, JSON, binary), so what is stored is byte-for-byte what the ORM path
stores, and the SQL is still written once, as Core.

Any other connection (PostgreSQL, or SQLite through aiosqlite) executes the same statement through
SQLAlchemy: one call site, two executions.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import Insert

_Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Compiled:
    """SQL with ``?`` placeholders and, per placeholder, the row index, key and bind processor."""

    sql: str
    slots: tuple[tuple[int, str, _Processor], ...]

    def params(self, rows: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
        # None goes through the processor too: a JSON column stores Python None as JSON null, as Core does.
        return tuple(rows[i][key] if proc is None else proc(rows[i][key]) for i, key, proc in self.slots)


def insert_rows(conn: Connection, statement: Insert, rows: Sequence[Mapping[str, Any]]) -> None:
    """Execute ``statement`` (without RETURNING) for every row; all rows have the same keys.

    ``statement`` must be built once (a module constant): its compilation is cached by identity
    (:func:`_compile`).
    """
    if not rows:
        return
    driver = _sqlite_driver(conn)
    if driver is None:
        conn.execute(statement, list(rows))
        return
    compiled = _compile(statement, tuple(rows[0]), 1, conn.dialect)
    cursor = driver.cursor()
    try:
        cursor.executemany(compiled.sql, [compiled.params((row,)) for row in rows])
    finally:
        cursor.close()


def insert_returning(conn: Connection, statement: Insert, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Execute ``statement`` (with RETURNING) for every row; the rows it returned.

    On the driver the rows go as one multi-row ``VALUES`` statement (sqlite3's executemany discards
    RETURNING rows, and one call instead of one per row is one GIL hand-off instead of many).
    """
    if not rows:
        return []
    driver = _sqlite_driver(conn)
    if driver is None:
        return list(conn.execute(statement, list(rows)).all())
    compiled = _compile(statement, tuple(rows[0]), len(rows), conn.dialect)
    cursor = driver.cursor()
    try:
        return cursor.execute(compiled.sql, compiled.params(rows)).fetchall()
    finally:
        cursor.close()


def _sqlite_driver(conn: Connection) -> sqlite3.Connection | None:
    driver = conn.connection.driver_connection
    return driver if isinstance(driver, sqlite3.Connection) else None


@functools.lru_cache(maxsize=256)
def _compile(statement: Insert, keys: tuple[str, ...], count: int, dialect: Dialect) -> _Compiled:
    """``statement`` for rows with ``keys``: as is (``count`` 1) or with ``count`` rows of VALUES. Cached
    per shape (statements and dialects hash by identity; a batch has at most a few dozen row counts)."""
    if count == 1:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        where = {key: (0, key) for key in keys}
    else:
        columns = statement.table.c
        where = {f"r{i}_{key}": (i, key) for i in range(count) for key in keys}
        multi = statement.values(
            [{key: bindparam(f"r{i}_{key}", type_=columns[key].type) for key in keys} for i in range(count)]
        )
        compiled = multi.compile(dialect=dialect)
    names = tuple(compiled.positiontup or ())
    if sorted(names) != sorted(where):
        missing = sorted({name.split("_", 1)[1] if count > 1 else name for name in names} - set(keys))
        raise ValueError(f"the rows need a value for every column with a default, missing: {missing}")
    slots = tuple(
        (*where[name], compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect))
        for name in names
    )
    return _Compiled(str(compiled), slots)
