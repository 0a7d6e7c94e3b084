"""run events

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 06:59:29.183175

The per-run event log behind ``GET /agent/runs/{id}/events`` (docs/events.md): the id is the SSE event id.
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('run_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('run_id', sa.String(length=40), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('factory_uid', sa.String(length=40), nullable=True),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_run_events_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_events')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.create_index('ix_run_events_run_id_id', ['run_id', 'id'], unique=False)
        batch_op.create_index('ix_run_events_team_id_id', ['team_id', 'id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.drop_index('ix_run_events_team_id_id')
        batch_op.drop_index('ix_run_events_run_id_id')

    op.drop_table('run_events')
