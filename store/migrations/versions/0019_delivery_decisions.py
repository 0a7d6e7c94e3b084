"""delivery decisions

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 12:40:00.000000

``deliveries.decisions``: for an Accepted (or Replayed) entry, the decision for every automation that
selects its webhook - matched, or not and why (docs/ingress.md, "Decisions"). NULL for other entries and
for entries logged before this migration.
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("decisions", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    op.drop_column("deliveries", "decisions")
