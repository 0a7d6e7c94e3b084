"""run agent

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 09:40:00.000000

``runs.agent``: the factory agent a run runs as (an automation's agent, or the foreman for a factory
dispatch); NULL for runs of the run API and prompt schedules. Plain ``ADD COLUMN``.
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('agent', sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column('runs', 'agent')
