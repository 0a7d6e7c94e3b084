"""run session states

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 11:00:00.000000

``run_session_states``: the agent CLI's session files of a run's latest attempt (a tar.gz, encrypted with
the secrets' key), which a follow-up's worker restores to resume the conversation (docs/agents.md,
"Sessions and follow-ups"); one row per run, deleted with it.
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'run_session_states',
        sa.Column('run_id', sa.String(length=40), nullable=False),
        sa.Column('ciphertext', sa.LargeBinary(), nullable=False),
        sa.Column('size', sa.Integer(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('updated_at', store.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['run_id'], ['runs.run_id'], name=op.f('fk_run_session_states_run_id_runs'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('run_id', name=op.f('pk_run_session_states')),
    )


def downgrade() -> None:
    op.drop_table('run_session_states')
