"""scheduled agents

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 06:30:00.000000

Scheduled agents (docs/schedules.md): schedules, their fires (the primary key makes a fire happen once
across replicas) and the schedule a run came from.
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('schedules',
    sa.Column('uid', sa.String(length=40), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('factory_uid', sa.String(length=40), nullable=True),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('cron', sa.String(length=200), nullable=False),
    sa.Column('timezone', sa.String(length=100), nullable=False),
    sa.Column('automation', sa.String(length=200), nullable=True),
    sa.Column('prompt', sa.Text(), nullable=True),
    sa.Column('agent_config', sa.JSON(), nullable=False),
    sa.Column('metadata', sa.JSON(), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('next_fire_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('last_fired_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('last_spawn_error', sa.String(length=1000), nullable=True),
    sa.Column('managed_by', sa.String(length=20), nullable=False),
    sa.Column('definition_path', sa.String(length=1000), nullable=True),
    sa.Column('spec_digest', sa.String(length=64), nullable=True),
    sa.Column('creator_uid', sa.String(length=100), nullable=True),
    sa.Column('creator_display_name', sa.String(length=200), nullable=True),
    sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['factory_uid'], ['factories.uid'], name=op.f('fk_schedules_factory_uid_factories'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_schedules_team_id_teams')),
    sa.PrimaryKeyConstraint('uid', name=op.f('pk_schedules')),
    sa.UniqueConstraint('factory_uid', 'name', name=op.f('uq_schedules_factory_uid_name'))
    )
    with op.batch_alter_table('schedules', schema=None) as batch_op:
        batch_op.create_index('ix_schedules_due', ['enabled', 'next_fire_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_schedules_team_id'), ['team_id'], unique=False)

    op.create_table('schedule_fires',
    sa.Column('schedule_uid', sa.String(length=40), nullable=False),
    sa.Column('fire_time', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('run_id', sa.String(length=40), nullable=True),
    sa.Column('error', sa.String(length=1000), nullable=True),
    sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['schedule_uid'], ['schedules.uid'], name=op.f('fk_schedule_fires_schedule_uid_schedules'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('schedule_uid', 'fire_time', name=op.f('pk_schedule_fires'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('schedule_id', sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column('schedule', sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f('ix_runs_schedule_id'), ['schedule_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_schedule_id'))
        batch_op.drop_column('schedule')
        batch_op.drop_column('schedule_id')

    op.drop_table('schedule_fires')
    with op.batch_alter_table('schedules', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_schedules_team_id'))
        batch_op.drop_index('ix_schedules_due')

    op.drop_table('schedules')
