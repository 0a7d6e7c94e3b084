"""Revision 0002 classifies the secrets a database already holds (docs/operations.md, "Upgrading to secret
scopes"): those a webhook names become ``webhook``, every other one ``run``; on both databases."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Boolean, column, inspect, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from store.db import _alembic_config, migrate
from store.models import UTCDateTime

BEFORE = "0001"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _table(name: str, *names: str) -> Any:
    """A typed table as revision 0001 has it (timestamps as the store writes them; no ORM model)."""
    stamp = UTCDateTime()
    typed: dict[str, Any] = {
        "created_at": stamp,
        "updated_at": stamp,
        "deleted_at": stamp,
        "enabled": Boolean(),
    }
    return table(name, *(column(n, typed.get(n)) for n in names))


TEAMS = _table("teams", "id", "name", "created_at")
FACTORIES = _table(
    "factories", "uid", "team_id", "name", "managed_by", "agents", "conditions", "created_at", "updated_at"
)
SECRETS = _table("secrets", "id", "team_id", "name", "current_version", "created_at", "updated_at")
WEBHOOKS = _table(
    "webhooks",
    "uid",
    "team_id",
    "factory_uid",
    "name",
    "auth_mode",
    "secret_name",
    "enabled",
    "managed_by",
    "created_at",
    "updated_at",
    "deleted_at",
)


def _to(revision: str, *, down: bool = False) -> Callable[[Connection], None]:
    def go(conn: Connection) -> None:
        (command.downgrade if down else command.upgrade)(_alembic_config(conn), revision)

    return go


def _rows(conn: Connection) -> None:
    """Two teams as revision 0001 stored them: secrets used by live, disabled and deleted webhooks, by
    runs only, and a same-named secret in another team that no webhook of *that* team uses."""
    stamps: dict[str, Any] = {"created_at": NOW, "updated_at": NOW}
    conn.execute(TEAMS.insert(), [{"id": t, "name": t, "created_at": NOW} for t in ("t_a", "t_b")])
    conn.execute(
        FACTORIES.insert(),
        [
            {"uid": "fa_a", "team_id": "t_a", "name": "shop", "managed_by": "definitions", "agents": "{}"}
            | {"conditions": "[]"}
            | stamps
        ],
    )
    secrets = [
        ("sec_1", "t_a", "alerts-token"),
        ("sec_2", "t_a", "github-signing"),
        ("sec_3", "t_a", "old-hook-secret"),
        ("sec_4", "t_a", "GH_TOKEN"),
        ("sec_5", "t_b", "alerts-token"),
    ]
    conn.execute(
        SECRETS.insert(),
        [{"id": i, "team_id": t, "name": n, "current_version": 1} | stamps for i, t, n in secrets],
    )
    hooks = [
        ("wh_1", "alerts", "alerts-token", True, None),
        ("wh_2", "github", "github-signing", False, None),
        ("wh_3", "gone", "old-hook-secret", True, NOW),
    ]
    conn.execute(
        WEBHOOKS.insert(),
        [
            {"uid": u, "team_id": "t_a", "factory_uid": "fa_a", "name": n, "auth_mode": "token"}
            | {"secret_name": sec, "enabled": on, "managed_by": "definitions", "deleted_at": gone}
            | stamps
            for u, n, sec, on, gone in hooks
        ],
    )


async def test_existing_secrets_are_classified_by_webhook_use(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_to(BEFORE, down=True))
        await conn.run_sync(_rows)
    await migrate(engine)
    async with engine.connect() as conn:
        found = {
            (team, name): scope
            for team, name, scope in await conn.execute(text("SELECT team_id, name, scope FROM secrets"))
        }
    assert found == {
        ("t_a", "alerts-token"): "webhook",  # a live webhook's
        ("t_a", "github-signing"): "webhook",  # a disabled one's
        ("t_a", "old-hook-secret"): "webhook",  # a deleted one's: a sender may still hold the value
        ("t_a", "GH_TOKEN"): "run",  # only runs could use it
        ("t_b", "alerts-token"): "run",  # same name, another team: team a's webhook is not its user
    }


async def test_the_database_refuses_an_unknown_scope_and_defaults_to_webhook(engine: AsyncEngine) -> None:
    row = {"team_id": "t", "current_version": 1, "created_at": NOW, "updated_at": NOW}
    scoped = _table(
        "secrets", "id", "team_id", "name", "current_version", "created_at", "updated_at", "scope"
    )
    async with engine.begin() as conn:
        await conn.execute(TEAMS.insert(), [{"id": "t", "name": "t", "created_at": NOW}])
        await conn.execute(SECRETS.insert(), [{"id": "s1", "name": "plain"} | row])
        scope = await conn.scalar(text("SELECT scope FROM secrets WHERE id = 's1'"))
    assert scope == "webhook"  # the closed scope, for any writer that names none
    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(scoped.insert(), [{"id": "s2", "name": "x", "scope": "everything"} | row])


async def test_downgrade_and_upgrade_again(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_to(BEFORE, down=True))
        columns = await conn.run_sync(lambda c: [col["name"] for col in inspect(c).get_columns("secrets")])
        assert "scope" not in columns
    await migrate(engine)
    async with engine.connect() as conn:
        columns = await conn.run_sync(lambda c: [col["name"] for col in inspect(c).get_columns("secrets")])
    assert "scope" in columns
