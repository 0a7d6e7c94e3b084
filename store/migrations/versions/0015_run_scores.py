"""run scores

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 10:40:00.000000

Scorers judge runs (docs/scorers.md): ``run_scores`` has one row per (judged run, scorer), inserted ON
CONFLICT DO NOTHING so a run is judged at most once per scorer whichever replica sees it finish first, with
the judge run (unique) and, once it answered, the label, score, pass/fail or error. ``runs.scores`` is the
recorded judgements as the run API shows them.
"""

from alembic import op
import sqlalchemy as sa
import store.models


revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_scores",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("scorer_uid", sa.String(length=40), nullable=False),
        sa.Column("scorer", sa.String(length=300), nullable=False),
        sa.Column("judge_run_id", sa.String(length=40), nullable=True),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("created_at", store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", store.models.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_run_scores_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "scorer_uid", name=op.f("pk_run_scores")),
        sa.UniqueConstraint("judge_run_id", name=op.f("uq_run_scores_judge_run_id")),
    )
    op.add_column("runs", sa.Column("scores", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "scores")
    op.drop_table("run_scores")
