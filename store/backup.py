"""Online backup of a SQLite store (docs/deployment.md, "Backup and restore").

SQLite's backup API copies the database page by page through a read transaction: in WAL mode (every
store's, :func:`store.db.create_engine`) readers never block the writers, so a serving replica keeps
accepting deliveries while its store is copied, and the copy is one consistent point in time, which a
plain file copy of ``factory.db`` without its ``-wal`` is not. The copy is written to a temporary file,
checked (``PRAGMA integrity_check``), switched out of WAL so it is a single self-contained file, and only
then renamed into place: a failed backup never leaves a file that looks like one.

PostgreSQL is backed up with ``pg_dump`` (its own consistent snapshot); nothing here is needed for it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

# Tables whose row counts a backup reports: what an operator expects to get back.
COUNTED = ("factories", "webhooks", "automations", "secrets", "deliveries", "runs", "api_keys")


class BackupError(Exception):
    """The backup could not be made; the message says why (and no partial file was left)."""


@dataclass(frozen=True)
class SqliteBackup:
    """A finished copy: where it is, the schema revision it holds and its rows per :data:`COUNTED` table."""

    path: Path
    revision: str | None
    rows: dict[str, int] = field(default_factory=dict)


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (``sqlite:///``, ``sqlite+aiosqlite:///``); None for any other
    backend, or an in-memory database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def backup_sqlite(source: Path, target: Path) -> SqliteBackup:
    """Copy the live database ``source`` to the new file ``target`` (which must not exist)."""
    if not source.is_file():
        raise BackupError(f"no SQLite store at {source}")
    if target.exists():
        raise BackupError(f"{target} already exists")
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        # Read-only: a backup never migrates, creates or changes the store it copies.
        with contextlib.closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)) as src:
            src.execute("PRAGMA busy_timeout=30000")
            with contextlib.closing(sqlite3.connect(partial)) as dst:
                src.backup(dst)  # one step: one read transaction, one consistent snapshot
                dst.execute("PRAGMA journal_mode=DELETE")
                report = _check(dst, target)
        os.replace(partial, target)
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(f"cannot back up {source}: {exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return report


def _check(conn: sqlite3.Connection, target: Path) -> SqliteBackup:
    verdict = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    if verdict != ["ok"]:
        raise BackupError(f"the copy failed its integrity check: {'; '.join(map(str, verdict[:5]))}")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    revision = None
    if "alembic_version" in tables:
        found = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        revision = found[0] if found else None
    rows = {
        name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])  # noqa: S608 (fixed names)
        for name in COUNTED
        if name in tables
    }
    return SqliteBackup(target, revision, rows)


__all__ = ["COUNTED", "BackupError", "SqliteBackup", "backup_sqlite", "sqlite_file"]
