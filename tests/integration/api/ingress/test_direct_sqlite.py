"""The synchronous SQLite hot path (api.ingress.direct): fresh reads, one transaction per write call."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from api.ingress.direct import DirectSqlite
from api.ingress.routes import INGRESS
from store.db import create_engine
from store.models import Delivery

MakeIngress = Callable[
    ..., Awaitable[Any]
]  # the make_ingress fixture (tests/integration/ingress/conftest.py)


async def test_direct_access_only_for_a_file_backed_sqlite_store(engine: AsyncEngine, tmp_path: Path) -> None:
    direct = DirectSqlite.open(engine)
    assert (direct is not None) == (engine.dialect.name == "sqlite")
    if direct is not None:
        await direct.close()
    memory = create_engine("sqlite+aiosqlite:///:memory:")
    assert DirectSqlite.open(memory) is None  # a second engine could not see that database
    await memory.dispose()


async def test_webhook_lookup_sees_every_commit_at_once(make_ingress: MakeIngress, db_url: str) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the direct path exists for SQLite only")
    ingress = await make_ingress()
    direct = ingress.client.app[INGRESS].direct
    assert direct is not None
    hook = await ingress.webhook()
    found = direct.find_webhook(hook.uid)
    assert not isinstance(found, Exception) and found is not None and found.uid == hook.uid
    await ingress.update_webhook(hook, enabled=False)
    assert direct.find_webhook(hook.uid) is None  # no read snapshot is held between requests
    await ingress.update_webhook(hook, enabled=True)
    assert (await ingress.post(hook, {"a": 1}, delivery_id="d1")).status == 202


async def test_lookup_returns_the_error_when_sqlite_cannot_answer(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'missing-dir' / 'x.db'}")
    direct = DirectSqlite.open(engine)
    assert direct is not None
    (tmp_path / "missing-dir" / "x.db").mkdir(parents=True)  # a directory: cannot be opened
    assert isinstance(direct.find_webhook("wh_x"), sqlite3.Error)  # the caller then takes the async path
    await direct.close()
    await engine.dispose()


async def test_a_failed_write_call_commits_nothing_and_the_next_one_works(
    make_ingress: MakeIngress, db_url: str
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the direct path exists for SQLite only")
    ingress = await make_ingress()
    direct = ingress.client.app[INGRESS].direct
    assert direct is not None
    hook = await ingress.webhook()
    row: dict[str, Any] = {
        "team_id": ingress.team_id,
        "webhook_uid": hook.uid,
        "status": "Rejected (auth)",
        "size": 1,
    }
    row["received_at"] = ingress.clock.now()

    def insert_then_fail(conn: Connection) -> None:
        conn.execute(insert(Delivery), [{**row, "delivery_id": "first"}])
        conn.execute(insert(Delivery), [{**row, "delivery_id": None}])  # NOT NULL: the call fails

    with pytest.raises(IntegrityError):
        await direct.write(insert_then_fail)
    await direct.write(lambda conn: conn.execute(insert(Delivery), [{**row, "delivery_id": "second"}]))
    async with ingress.sessions() as s:
        ids = (
            await s.execute(select(Delivery.delivery_id).where(Delivery.webhook_uid == hook.uid))
        ).scalars()
        assert list(ids) == ["second"]
        assert (await s.execute(select(func.count()).select_from(Delivery))).scalar_one() == 1
