"""console sessions

Server-side sessions of the web console (docs/console.md, "Signing in").

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 09:30:17.492969
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('console_sessions',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('key_id', sa.String(length=40), nullable=False),
    sa.Column('role', sa.String(length=20), nullable=False),
    sa.Column('csrf_token', sa.String(length=64), nullable=False),
    sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('expires_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'], name=op.f('fk_console_sessions_key_id_api_keys'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_console_sessions_team_id_teams')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_console_sessions'))
    )
    with op.batch_alter_table('console_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_console_sessions_key_id'), ['key_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('console_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_console_sessions_key_id'))

    op.drop_table('console_sessions')
