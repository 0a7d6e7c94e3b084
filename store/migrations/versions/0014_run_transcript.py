"""run transcript

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 10:20:00.000000

The runs of agent CLI presets (docs/agents.md): ``runs.harness_type`` (the preset a run needs, "" when any
worker may run it), appended to the claim queue index ``ix_runs_queue`` so a worker's offered harnesses
filter inside the index; ``runs.request_usage`` (JSON token and cost totals of the run's ``usage`` events);
``runs.session_attempt`` (the attempt whose ``session`` event set ``session_id``); ``run_events.kind`` widened
to 20 characters for the transcript's kinds (``tool_result``).
"""
from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('harness_type', sa.String(length=20), server_default='', nullable=False))
    op.add_column('runs', sa.Column('request_usage', sa.JSON(), nullable=True))
    op.add_column('runs', sa.Column('session_attempt', sa.Integer(), nullable=True))
    op.drop_index('ix_runs_queue', table_name='runs')
    op.create_index('ix_runs_queue', 'runs', ['state', 'worker_host', 'queued_at', 'harness_type'])
    if op.get_bind().dialect.name != 'sqlite':  # SQLite does not enforce a VARCHAR length
        op.alter_column('run_events', 'kind', type_=sa.String(length=20), existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name != 'sqlite':
        op.execute("DELETE FROM run_events WHERE length(kind) > 10")
        op.alter_column('run_events', 'kind', type_=sa.String(length=10), existing_nullable=False)
    op.drop_index('ix_runs_queue', table_name='runs')
    op.create_index('ix_runs_queue', 'runs', ['state', 'worker_host', 'queued_at'])
    op.drop_column('runs', 'session_attempt')
    op.drop_column('runs', 'request_usage')
    op.drop_column('runs', 'harness_type')
