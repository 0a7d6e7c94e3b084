"""Autogenerate an Alembic revision by diffing the models against a scratch SQLite migrated to head.

Usage: python tools/new_migration.py "message"
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from store.db import _alembic_config


def main() -> None:
    message = sys.argv[1] if len(sys.argv) > 1 else "schema change"
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/scratch.db")
        with engine.begin() as conn:
            cfg = _alembic_config(conn)
            command.upgrade(cfg, "head")
            command.revision(cfg, message=message, autogenerate=True)


if __name__ == "__main__":
    main()
