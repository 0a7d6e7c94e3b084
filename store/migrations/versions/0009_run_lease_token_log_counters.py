"""run lease token and log counters

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 06:30:00.000000

``runs.lease_token``: the random token of the current claim; every worker call presents it, so a stale
holder of an earlier attempt is refused (docs/workers.md, "Leases"). ``runs.log_lines``/``log_bytes``/
``log_dropped``: what the run's log holds and what its caps refused (docs/workers.md, "Log limits").
Existing runs get their counters from their stored lines (so log retention finds them), then the
partial index ``ix_runs_log_retention`` lists finished runs that still hold lines (docs/operations.md,
"Run log retention"). Plain ``ADD COLUMN`` on both backends: no table is rebuilt.
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('lease_token', sa.String(length=64), nullable=True))
    op.add_column('runs', sa.Column('log_lines', sa.Integer(), server_default='0', nullable=False))
    op.add_column('runs', sa.Column('log_bytes', sa.BigInteger(), server_default='0', nullable=False))
    op.add_column('runs', sa.Column('log_dropped', sa.Integer(), server_default='0', nullable=False))
    size = "octet_length(text)" if op.get_bind().dialect.name == "postgresql" else "length(CAST(text AS BLOB))"
    op.execute(
        "UPDATE runs SET "
        "log_lines = (SELECT count(*) FROM run_logs WHERE run_logs.run_id = runs.run_id), "
        f"log_bytes = (SELECT coalesce(sum({size}), 0) FROM run_logs WHERE run_logs.run_id = runs.run_id) "
        "WHERE EXISTS (SELECT 1 FROM run_logs WHERE run_logs.run_id = runs.run_id)"
    )
    where = sa.text("log_lines > 0 OR log_dropped > 0")
    op.create_index(
        'ix_runs_log_retention', 'runs', ['finished_at'], unique=False, sqlite_where=where, postgresql_where=where
    )


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35, which claims need anyway): a batch rebuild of ``runs`` would
    # cascade-delete every run's logs, follow-ups, attachments and events through their foreign keys.
    op.drop_index('ix_runs_log_retention', table_name='runs')
    for column in ('log_dropped', 'log_bytes', 'log_lines', 'lease_token'):
        op.drop_column('runs', column)
