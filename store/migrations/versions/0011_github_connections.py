"""GitHub App connections

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 11:00:00.000000

``github_connections``: a team's GitHub App, at most one per team (unique ``team_id``); deliveries to
``/webhooks/github/<uid>`` are logged in ``deliveries`` under that UID (docs/ingress.md, "GitHub App
deliveries").
"""
from alembic import op
import sqlalchemy as sa

import store.models


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'github_connections',
        sa.Column('uid', sa.String(length=40), nullable=False),
        sa.Column('team_id', sa.String(length=40), nullable=False),
        sa.Column('secret_name', sa.String(length=200), nullable=False),
        sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_github_connections_team_id_teams')),
        sa.PrimaryKeyConstraint('uid', name=op.f('pk_github_connections')),
        sa.UniqueConstraint('team_id', name=op.f('uq_github_connections_team_id')),
    )


def downgrade() -> None:
    op.drop_table('github_connections')
