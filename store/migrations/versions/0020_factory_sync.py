"""factory sync status, manager and commits

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 12:50:00.000000

GitOps sync status (docs/reconcile.md, "Sync status", "Who manages a factory"):

- ``factories.sync``: ``{status, revision, drift, checked_at, message}``, the last comparison of the store
  with what the factory's source would apply; NULL until one was made.
- ``factories.manager``: the ``serve`` that follows the factory's source, ``{kind, location, expires_at}``;
  NULL when none does.
- ``factories.applied_commit`` and ``apply_history.commit``: the git commit of the applied revision,
  ``{sha, subject, author, committed_at, remote}``; NULL for directory sources and older rows.
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("factories", sa.Column("sync", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("factories", sa.Column("manager", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("factories", sa.Column("applied_commit", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("apply_history", sa.Column("commit", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    op.drop_column("apply_history", "commit")
    op.drop_column("factories", "applied_commit")
    op.drop_column("factories", "manager")
    op.drop_column("factories", "sync")
