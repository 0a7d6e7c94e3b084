"""Migrations and models must describe the same schema, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from store.db import migrate
from store.models import Base


async def test_models_match_migrations(engine: AsyncEngine) -> None:
    await migrate(engine)  # idempotent on an already-migrated database

    def diff(conn):  # type: ignore[no-untyped-def]
        ctx = MigrationContext.configure(conn, opts={"compare_type": False})
        return compare_metadata(ctx, Base.metadata)

    async with engine.connect() as conn:
        changes = await conn.run_sync(diff)
    assert changes == [], f"models and migrations differ; run tools/new_migration.py: {changes}"
