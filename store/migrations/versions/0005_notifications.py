"""notifications and a commit-ordered event cursor

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 08:28:11.602846

Outbound notifications (docs/notifications.md): endpoints, the outbox of messages, every attempt, and the
fan-out's position in ``run_events``. ``run_events.txid`` records the writing transaction on PostgreSQL
(``pg_current_xact_id()``), so readers across runs can order events by commit horizon
(docs/events.md, "Ordering and delivery"); SQLite keeps 0 (one writer commits in id order).
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('notification_cursor',
    sa.Column('name', sa.String(length=40), nullable=False),
    sa.Column('txid', sa.BigInteger(), nullable=False),
    sa.Column('event_id', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_notification_cursor'))
    )
    op.create_table('notification_endpoints',
    sa.Column('uid', sa.String(length=40), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('factory_uid', sa.String(length=40), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('url', sa.String(length=2000), nullable=False),
    sa.Column('secret_name', sa.String(length=200), nullable=False),
    sa.Column('events', sa.JSON(), nullable=False),
    sa.Column('filter', sa.JSON(), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('failing', sa.Boolean(), nullable=False),
    sa.Column('consecutive_failures', sa.Integer(), nullable=False),
    sa.Column('failing_since', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('last_success_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('managed_by', sa.String(length=20), nullable=False),
    sa.Column('definition_path', sa.String(length=1000), nullable=True),
    sa.Column('spec_digest', sa.String(length=64), nullable=True),
    sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['factory_uid'], ['factories.uid'], name=op.f('fk_notification_endpoints_factory_uid_factories'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], name=op.f('fk_notification_endpoints_team_id_teams')),
    sa.PrimaryKeyConstraint('uid', name=op.f('pk_notification_endpoints')),
    sa.UniqueConstraint('factory_uid', 'name', name=op.f('uq_notification_endpoints_factory_uid_name'))
    )
    with op.batch_alter_table('notification_endpoints', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notification_endpoints_team_id'), ['team_id'], unique=False)

    op.create_table('notification_messages',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('endpoint_uid', sa.String(length=40), nullable=False),
    sa.Column('run_id', sa.String(length=40), nullable=False),
    sa.Column('event_id', sa.BigInteger(), nullable=False),
    sa.Column('event_type', sa.String(length=40), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=12), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('claim_token', sa.String(length=40), nullable=True),
    sa.Column('manual', sa.Boolean(), nullable=False),
    sa.Column('last_attempt_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('last_response_status', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.String(length=500), nullable=True),
    sa.Column('delivered_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_uid'], ['notification_endpoints.uid'], name=op.f('fk_notification_messages_endpoint_uid_notification_endpoints'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_notification_messages_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notification_messages')),
    sa.UniqueConstraint('endpoint_uid', 'event_id', name=op.f('uq_notification_messages_endpoint_uid_event_id'))
    )
    with op.batch_alter_table('notification_messages', schema=None) as batch_op:
        batch_op.create_index('ix_notification_messages_due', ['status', 'next_attempt_at'], unique=False)
        batch_op.create_index('ix_notification_messages_endpoint', ['endpoint_uid', 'created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_notification_messages_run_id'), ['run_id'], unique=False)

    op.create_table('notification_attempts',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('message_id', sa.String(length=40), nullable=False),
    sa.Column('endpoint_uid', sa.String(length=40), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('trigger', sa.String(length=10), nullable=False),
    sa.Column('started_at', store.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('duration_ms', sa.Integer(), nullable=False),
    sa.Column('outcome', sa.String(length=12), nullable=False),
    sa.Column('response_status', sa.Integer(), nullable=True),
    sa.Column('response_excerpt', sa.String(length=500), nullable=True),
    sa.Column('error', sa.String(length=500), nullable=True),
    sa.Column('next_attempt_at', store.models.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['message_id'], ['notification_messages.id'], name=op.f('fk_notification_attempts_message_id_notification_messages'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notification_attempts'))
    )
    with op.batch_alter_table('notification_attempts', schema=None) as batch_op:
        batch_op.create_index('ix_notification_attempts_message_id_id', ['message_id', 'id'], unique=False)

    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('txid', sa.BigInteger(), server_default=sa.text('0'), nullable=False))
        batch_op.drop_index(batch_op.f('ix_run_events_team_id_id'))
        batch_op.create_index('ix_run_events_team_id_txid_id', ['team_id', 'txid', 'id'], unique=False)
        batch_op.create_index('ix_run_events_txid_id', ['txid', 'id'], unique=False)

    if op.get_bind().dialect.name == "postgresql":
        # Rows written before this revision keep 0: they precede every transaction from now on.
        op.execute("ALTER TABLE run_events ALTER COLUMN txid SET DEFAULT (pg_current_xact_id()::text::bigint)")


def downgrade() -> None:
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.drop_index('ix_run_events_txid_id')
        batch_op.drop_index('ix_run_events_team_id_txid_id')
        batch_op.create_index(batch_op.f('ix_run_events_team_id_id'), ['team_id', 'id'], unique=False)
        batch_op.drop_column('txid')

    with op.batch_alter_table('notification_attempts', schema=None) as batch_op:
        batch_op.drop_index('ix_notification_attempts_message_id_id')

    op.drop_table('notification_attempts')
    with op.batch_alter_table('notification_messages', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notification_messages_run_id'))
        batch_op.drop_index('ix_notification_messages_endpoint')
        batch_op.drop_index('ix_notification_messages_due')

    op.drop_table('notification_messages')
    with op.batch_alter_table('notification_endpoints', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notification_endpoints_team_id'))

    op.drop_table('notification_endpoints')
    op.drop_table('notification_cursor')
