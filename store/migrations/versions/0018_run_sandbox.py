"""run sandbox

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 12:30:00.000000

``runs.sandbox``: where the worker ran the run, as it reported when the run started (docs/workers.md,
"Sandbox"): ``{"kind": "bwrap"|"none", "network": "none"|"allowlist"|"open"}``; NULL until a worker
reports it (runs that never started, and workers from before it).
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("sandbox", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "sandbox")
