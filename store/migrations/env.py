"""Alembic environment: runs on the connection handed over by :func:`store.db.migrate`."""

from __future__ import annotations

from alembic import context

from store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only the programmatic path is supported
    raise RuntimeError("run migrations through store.db.migrate() or `factoryctl migrate`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
context.run_migrations()
