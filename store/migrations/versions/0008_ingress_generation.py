"""ingress generation

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 13:31:45.556855

A one-row counter that the database itself bumps whenever a row of ``webhooks`` or ``secrets`` is inserted,
updated or deleted, whoever the writer is (any replica, the CLI, the console, a migration). Ingress caches
webhook lookups under the value it read and drops them when the value changes (docs/ingress.md, "Webhook
lookup cache"). The bump commits in the same transaction as the change, so a reader that sees the new value
also sees the change.

- PostgreSQL: deferred constraint triggers (``DEFERRABLE INITIALLY DEFERRED``, per row) that fire at commit
  and bump once per transaction (a transaction-local setting marks it done). The counter row is therefore
  locked only while the transaction commits - not from its first write to ``webhooks``/``secrets`` until
  its end, which would serialise every such transaction and let two of them deadlock through it - and
  never before the transaction's other locks. A statement trigger covers ``TRUNCATE``.
- SQLite: ``AFTER INSERT/UPDATE/DELETE`` row triggers (SQLite has one writer at a time anyway).

SQLite drops a table's triggers with the table, and Alembic's batch mode recreates a table to alter it:
a later migration that batch-alters ``webhooks`` or ``secrets`` must create these triggers again
(tests/integration/store/test_ingress_generation.py fails otherwise).
"""
from alembic import op
import sqlalchemy as sa
import store.models


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

TABLES = ("webhooks", "secrets")
EVENTS = ("insert", "update", "delete")

PG_FUNCTION = """
CREATE FUNCTION ingress_generation_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        IF current_setting('factoryctl.ingress_generation_bumped', true) = 'on' THEN
            RETURN NULL;
        END IF;
        PERFORM set_config('factoryctl.ingress_generation_bumped', 'on', true);
    END IF;
    UPDATE ingress_generation SET value = value + 1 WHERE id = 1;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table('ingress_generation',
    sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('value', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ingress_generation'))
    )
    op.execute("INSERT INTO ingress_generation (id, value) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for table in TABLES:
            op.execute(
                f"CREATE CONSTRAINT TRIGGER ingress_generation_{table} "
                f"AFTER INSERT OR UPDATE OR DELETE ON {table} DEFERRABLE INITIALLY DEFERRED "
                "FOR EACH ROW EXECUTE FUNCTION ingress_generation_bump()"
            )
            op.execute(
                f"CREATE TRIGGER ingress_generation_{table}_truncate AFTER TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION ingress_generation_bump()"
            )
    else:
        for table in TABLES:
            for event in EVENTS:
                op.execute(
                    f"CREATE TRIGGER ingress_generation_{table}_{event} AFTER {event.upper()} ON {table} "
                    "BEGIN UPDATE ingress_generation SET value = value + 1 WHERE id = 1; END"
                )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"DROP TRIGGER ingress_generation_{table}_truncate ON {table}")
            op.execute(f"DROP TRIGGER ingress_generation_{table} ON {table}")
        op.execute("DROP FUNCTION ingress_generation_bump()")
    else:
        for table in TABLES:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER ingress_generation_{table}_{event}")
    op.drop_table('ingress_generation')
