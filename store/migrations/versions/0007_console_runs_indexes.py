"""console runs list indexes

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 13:17:55.429535

Indexes for the console's pages at scale (docs/benchmarks.md, "Console pages at scale"). The runs list reads
newest created first with at most one equality filter from its form; each filter gets (team, column,
created_at, run_id), so a keyset page is an index range read whatever the value's frequency. The config-name
and factory ones replace the single-column indexes on those columns (the composite ones serve every query
those did). ``ix_runs_webhook_delivery`` finds the runs of a webhook's deliveries (delivery log, webhook page,
replay). On PostgreSQL the indexes are built inside the migration's transaction: writes to ``runs`` wait for
them (seconds per million runs).
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_team_config_created', ['team_id', 'config_name', 'created_at', 'run_id'], unique=False)
        batch_op.create_index('ix_runs_team_creator_created', ['team_id', 'creator_uid', 'created_at', 'run_id'], unique=False)
        batch_op.create_index('ix_runs_team_factory_created', ['team_id', 'factory_uid', 'created_at', 'run_id'], unique=False)
        batch_op.create_index('ix_runs_team_source_created', ['team_id', 'source', 'created_at', 'run_id'], unique=False)
        batch_op.create_index('ix_runs_team_state_created', ['team_id', 'state', 'created_at', 'run_id'], unique=False)
        batch_op.create_index('ix_runs_webhook_delivery', ['webhook_uid', 'delivery_id'], unique=False, sqlite_where=sa.text('delivery_id IS NOT NULL'), postgresql_where=sa.text('delivery_id IS NOT NULL'))
        batch_op.drop_index(batch_op.f('ix_runs_config_name'))
        batch_op.drop_index(batch_op.f('ix_runs_factory_uid'))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_factory_uid'), ['factory_uid'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_config_name'), ['config_name'], unique=False)
        batch_op.drop_index('ix_runs_webhook_delivery', sqlite_where=sa.text('delivery_id IS NOT NULL'), postgresql_where=sa.text('delivery_id IS NOT NULL'))
        batch_op.drop_index('ix_runs_team_state_created')
        batch_op.drop_index('ix_runs_team_source_created')
        batch_op.drop_index('ix_runs_team_factory_created')
        batch_op.drop_index('ix_runs_team_creator_created')
        batch_op.drop_index('ix_runs_team_config_created')
