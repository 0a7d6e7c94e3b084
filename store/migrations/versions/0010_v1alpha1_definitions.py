"""v1alpha1 definitions: factory settings, definition objects, inline schedules

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 10:00:00.000000

``factories.alias``/``repositories``/``settings``: the rest of a v1alpha1 ``factory.yaml``.
``factory_objects``: agents, skills, runners, scorers and benchmark suites, one row per object, unique by
(factory, kind, name) (docs/definitions.md). ``schedules.inline_of``: the automation that declares a
schedule inline in a ``schedule``/``cron_fired`` trigger. Existing factories keep their ``agents`` map;
their agent objects appear at their next apply.
"""
from alembic import op
import sqlalchemy as sa

import store.models


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('factories', sa.Column('alias', sa.String(length=100), nullable=True))
    op.add_column('factories', sa.Column('repositories', sa.JSON(), server_default='[]', nullable=False))
    op.add_column('factories', sa.Column('settings', sa.JSON(), server_default='{}', nullable=False))
    op.add_column('schedules', sa.Column('inline_of', sa.String(length=200), nullable=True))
    op.create_table(
        'factory_objects',
        sa.Column('uid', sa.String(length=40), nullable=False),
        sa.Column('team_id', sa.String(length=40), nullable=False),
        sa.Column('factory_uid', sa.String(length=40), nullable=False),
        sa.Column('kind', sa.String(length=20), nullable=False),
        sa.Column('name', sa.String(length=300), nullable=False),
        sa.Column('spec', sa.JSON(), nullable=False),
        sa.Column('definition_path', sa.String(length=1000), nullable=True),
        sa.Column('spec_digest', sa.String(length=64), nullable=True),
        sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column('updated_at', store.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['factory_uid'], ['factories.uid'], name=op.f('fk_factory_objects_factory_uid_factories'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_factory_objects_team_id_teams')),
        sa.PrimaryKeyConstraint('uid', name=op.f('pk_factory_objects')),
        sa.UniqueConstraint('factory_uid', 'kind', 'name', name=op.f('uq_factory_objects_factory_uid_kind_name')),
    )
    op.create_index(op.f('ix_factory_objects_team_id'), 'factory_objects', ['team_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_factory_objects_team_id'), table_name='factory_objects')
    op.drop_table('factory_objects')
    op.drop_column('schedules', 'inline_of')
    op.drop_column('factories', 'settings')
    op.drop_column('factories', 'repositories')
    op.drop_column('factories', 'alias')
