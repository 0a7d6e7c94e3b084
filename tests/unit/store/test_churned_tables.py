"""Every table of the schema is classified for the maintenance pass's vacuum (store/db.py,
``CHURNED_TABLES``; docs/operations.md, "PostgreSQL: vacuum after every pass"): a new table fails here
until someone decides whether its rows churn."""

from __future__ import annotations

from store.db import CHURNED_TABLES
from store.models import Base

# Rows written by an apply, a key or secret change, or once per team: a handful of row versions a day.
STEADY_TABLES = {
    "api_keys",
    "apply_history",
    "automation_webhooks",
    "automations",
    "environments",
    "factories",
    "factory_objects",
    "github_connections",
    "ingress_generation",
    "notification_cursor",
    "notification_endpoints",
    "schedules",
    "secret_versions",
    "secrets",
    "teams",
    "webhooks",
}


def test_every_table_is_either_churned_or_steady() -> None:
    tables = set(Base.metadata.tables)
    churned = set(CHURNED_TABLES)
    assert not churned & STEADY_TABLES
    assert churned | STEADY_TABLES == tables, (
        f"unclassified: {sorted(tables - churned - STEADY_TABLES)}; "
        f"not tables: {sorted((churned | STEADY_TABLES) - tables)}"
    )


def test_rows_deleted_with_a_churned_row_churn_too() -> None:
    """Retention deletes runs, messages and schedule fires; what cascades from them goes with them."""
    for name, table in Base.metadata.tables.items():
        for key in table.foreign_keys:
            if key.ondelete == "CASCADE" and key.column.table.name in CHURNED_TABLES:
                assert name in CHURNED_TABLES, f"{name} loses rows with {key.column.table.name}"
