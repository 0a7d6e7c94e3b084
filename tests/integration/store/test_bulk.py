"""store.bulk: INSERTs run on the sqlite3 driver store exactly what SQLAlchemy would, and decide
conflicts the same way on every connection (docs/ingress.md, "Group commit")."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from typing import Any, cast

import builders
import pytest
from sql_support import statements
from sqlalchemy import Connection, Engine, Table, create_engine, insert, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from store import bulk
from store.models import Delivery, Run

_RUNS = insert(cast(Table, Run.__table__))
_DELIVERIES_TABLE = cast(Table, Delivery.__table__)
_DELIVERIES = insert(_DELIVERIES_TABLE)
_ACCEPT = {
    dialect.__name__.rsplit(".", 1)[-1]: dialect.insert(_DELIVERIES_TABLE)
    .on_conflict_do_nothing(
        index_elements=["webhook_uid", "delivery_id"], index_where=text("status = 'Accepted'")
    )
    .returning(_DELIVERIES_TABLE.c.delivery_id)
    for dialect in (sqlite, postgresql)
}
_NOW = dt.datetime(2026, 11, 24, 12, 30, 15, 123456, tzinfo=dt.UTC)


@pytest.fixture
def sync_sqlite(sqlite_url: str) -> Iterator[Engine]:
    """The migrated SQLite file through the synchronous pysqlite driver (as the ingress writer uses it)."""
    engine = create_engine(sqlite_url.replace("sqlite+aiosqlite", "sqlite+pysqlite"))
    yield engine
    engine.dispose()


def _run(run_id: str, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": run_id,
        "team_id": "tm_1",
        "title": "Bulk",
        "prompt": "Do it — ünïcode",
        "state": "QUEUED",
        "created_at": _NOW,
        "updated_at": _NOW,
        "queued_at": _NOW,
        "agent_config": {"name": "cfg", "nested": [1, 2.5, None]},
        "config_name": "cfg",
        "source": "CUSTOM_WEBHOOK",
        "creator_type": "service_account",
        "creator_uid": "wh_1",
        "run_metadata": {},
        "schedule": None,
        "attempt": 0,
        "cancel_requested": False,
        "worker_host": "",
        "log_lines": 0,
        "log_bytes": 0,
        "log_dropped": 0,
    }
    keys = {attr.key: attr.columns[0].key for attr in Run.__mapper__.column_attrs}
    return {keys[k]: v for k, v in {**row, **changes}.items()}


def _stored(engine: Engine, table: str, key: str, value: str) -> dict[str, Any]:
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        cursor = raw.execute(f"SELECT * FROM {table} WHERE {key} = ?", (value,))
        names = [d[0] for d in cursor.description]
        return dict(zip(names, cursor.fetchone(), strict=True))


def test_a_run_row_on_the_driver_is_stored_as_sqlalchemy_stores_it(sync_sqlite: Engine) -> None:
    with sync_sqlite.begin() as conn:
        with statements(sync_sqlite) as seen:
            bulk.insert_rows(conn, _RUNS, [_run("run_driver")])
        assert seen == [], "the insert went through SQLAlchemy's execution, not the driver"
        conn.execute(_RUNS, [_run("run_core")])
    driver, core = (
        _stored(sync_sqlite, "runs", "run_id", "run_driver"),
        _stored(sync_sqlite, "runs", "run_id", "run_core"),
    )
    assert {**driver, "run_id": None} == {**core, "run_id": None}
    assert driver["created_at"] == "2026-11-24 12:30:15.123456"  # UTC, as the ORM writes it
    assert driver["schedule"] == core["schedule"]  # Python None: what Core stores for a JSON column


def test_binary_payloads_and_many_rows(sync_sqlite: Engine) -> None:
    rows = [
        {
            "team_id": "tm_1",
            "webhook_uid": "wh_1",
            "delivery_id": f"d{n}",
            "status": "Duplicate",
            "size": 3,
            "received_at": _NOW,
            "payload": bytes([0, n, 255]),
            "detail": None,
        }
        for n in range(50)
    ]
    with sync_sqlite.begin() as conn:
        bulk.insert_rows(conn, _DELIVERIES, rows)
    assert _stored(sync_sqlite, "deliveries", "delivery_id", "d7")["payload"] == bytes([0, 7, 255])
    with sync_sqlite.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deliveries")).scalar_one() == 50


def test_a_missing_column_is_an_error_not_a_silent_default(sync_sqlite: Engine) -> None:
    row = _run("run_short")
    del row["agent_config"]  # has a Python-side default, which the driver path would not apply
    with sync_sqlite.begin() as conn, pytest.raises(ValueError, match=r"missing: .*agent_config"):
        bulk.insert_rows(conn, _RUNS, [row])


def _accept_rows(*ids: str) -> list[dict[str, Any]]:
    return [
        {
            "team_id": "tm_1",
            "webhook_uid": "wh_1",
            "delivery_id": d,
            "status": "Accepted",
            "size": 1,
            "received_at": _NOW,
            "payload": b"x",
            "detail": None,
        }
        for d in ids
    ]


def _accept(conn: Connection, ids: tuple[str, ...]) -> list[str]:
    return sorted(r[0] for r in bulk.insert_returning(conn, _ACCEPT[conn.dialect.name], _accept_rows(*ids)))


def test_insert_returning_on_the_driver_decides_conflicts_in_one_statement(sync_sqlite: Engine) -> None:
    with sync_sqlite.begin() as conn:
        assert _accept(conn, ("a",)) == ["a"]
    with sync_sqlite.begin() as conn, statements(sync_sqlite) as seen:
        # "a" exists; the second "b" of the batch loses to the first.
        assert _accept(conn, ("a", "b", "c", "b")) == ["b", "c"]
    assert seen == []
    with sync_sqlite.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deliveries")).scalar_one() == 3


async def test_other_connections_go_through_sqlalchemy_with_the_same_outcome(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """aiosqlite and PostgreSQL: the same calls, executed by SQLAlchemy."""
    async with sessions() as s, s.begin():
        team_id = (await builders.team(s)).id
    async with engine.begin() as conn:
        assert await conn.run_sync(_accept, ("a",)) == ["a"]
    async with engine.begin() as conn:
        assert await conn.run_sync(_accept, ("a", "b", "c", "b")) == ["b", "c"]
        await conn.run_sync(lambda c: bulk.insert_rows(c, _RUNS, [_run("run_async", team_id=team_id)]))
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM deliveries"))).scalar_one() == 3
        found = (await conn.execute(text("SELECT title FROM runs WHERE run_id = 'run_async'"))).scalar_one()
    assert found == "Bulk"
