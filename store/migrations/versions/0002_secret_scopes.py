"""secret scopes: what may use a team secret, webhook auth or runs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 04:30:00.000000

Every existing secret a webhook names (``webhooks.secret_name``, deleted webhooks included: a sender
may still hold the value) becomes ``webhook``; every other one ``run``, so environments and MCP
servers that reference it keep working (docs/operations.md, "Upgrading to secret scopes").
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('secrets', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('scope', sa.String(length=20), server_default=sa.text("'webhook'"), nullable=False)
        )
        batch_op.create_check_constraint(op.f('ck_secrets_scope'), "scope IN ('run', 'webhook')")
    op.execute(
        "UPDATE secrets SET scope = 'run' WHERE NOT EXISTS ("
        "SELECT 1 FROM webhooks WHERE webhooks.team_id = secrets.team_id"
        " AND webhooks.secret_name = secrets.name)"
    )


def downgrade() -> None:
    with op.batch_alter_table('secrets', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_secrets_scope'), type_='check')
        batch_op.drop_column('scope')
