"""delivery content key

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 09:50:00.000000

``deliveries.content_key``: a GitHub App delivery's body hash, unique among a connection's Accepted
entries (partial unique index ``uq_deliveries_accepted_content``). Its identity, ``X-GitHub-Delivery``, is
not covered by GitHub's signature; the body is, so a captured delivery re-sent under a new id is a
Duplicate (docs/ingress.md, "GitHub App deliveries"). NULL for every other delivery.
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

_WHERE = "status = 'Accepted' AND content_key IS NOT NULL"


def upgrade() -> None:
    op.add_column('deliveries', sa.Column('content_key', sa.String(length=60), nullable=True))
    op.create_index(
        'uq_deliveries_accepted_content',
        'deliveries',
        ['webhook_uid', 'content_key'],
        unique=True,
        sqlite_where=sa.text(_WHERE),
        postgresql_where=sa.text(_WHERE),
    )


def downgrade() -> None:
    op.drop_index('uq_deliveries_accepted_content', table_name='deliveries')
    op.drop_column('deliveries', 'content_key')
