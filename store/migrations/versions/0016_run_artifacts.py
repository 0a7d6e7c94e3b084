"""run artifacts

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 11:00:00.000000

A run's artifacts (docs/agents.md, "Artifacts"): ``run_artifacts`` holds the files its agent wrote under
``FACTORY_OUTPUTS`` (with their bytes) and the pull requests and external references it declared, one row
each, deleted with the run; listed by (run, created_at).
"""

from alembic import op
import sqlalchemy as sa
import store.models


revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_artifacts",
        sa.Column("uid", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("artifact_type", sa.String(length=30), nullable=False),
        sa.Column("created_at", store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=True),
        sa.Column("filepath", sa.String(length=500), nullable=True),
        sa.Column("mime_type", sa.String(length=200), nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=True),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.Column("url", sa.String(length=2048), nullable=True),
        sa.Column("branch", sa.String(length=300), nullable=True),
        sa.Column("reference_type", sa.String(length=300), nullable=True),
        sa.Column("title", sa.String(length=300), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("uid"),
    )
    op.create_index("ix_run_artifacts_run", "run_artifacts", ["run_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_run_artifacts_run", table_name="run_artifacts")
    op.drop_table("run_artifacts")
