"""SQLite online backup (store/backup.py; docs/deployment.md, "Backup and restore")."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from store.backup import BackupError, backup_sqlite, sqlite_file


def wal_database(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, state TEXT)")
    conn.execute("INSERT INTO runs (state) VALUES ('QUEUED'), ('SUCCEEDED')")
    return conn


def test_a_copy_taken_during_a_write_holds_the_committed_rows_and_does_not_block_it(tmp_path: Path) -> None:
    source = tmp_path / "factory.db"
    with contextlib.closing(wal_database(source)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO runs (state) VALUES ('UNCOMMITTED')")
        made = backup_sqlite(source, tmp_path / "copy.db")
        writer.execute("INSERT INTO runs (state) VALUES ('LATER')")  # the writer was never blocked
        writer.execute("COMMIT")
    assert made.rows == {"runs": 2} and made.revision is None
    with contextlib.closing(sqlite3.connect(made.path)) as copy:
        assert [r[0] for r in copy.execute("SELECT state FROM runs ORDER BY id")] == ["QUEUED", "SUCCEEDED"]
        assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one self-contained file
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("copy")) == ["copy.db"]


def test_a_migrated_store_reports_its_revision(sqlite_url: str, tmp_path: Path) -> None:
    source = sqlite_file(sqlite_url)
    assert source is not None
    made = backup_sqlite(source, tmp_path / "copy.db")
    assert made.revision and made.revision.isdigit()
    assert made.rows["runs"] == 0 and "secrets" in made.rows


def test_refusals_leave_no_file(tmp_path: Path) -> None:
    with pytest.raises(BackupError, match="no SQLite store"):
        backup_sqlite(tmp_path / "missing.db", tmp_path / "copy.db")
    assert not (tmp_path / "missing.db").exists()  # read-only: never creates the store it copies
    source = tmp_path / "factory.db"
    wal_database(source).close()
    (tmp_path / "taken.db").write_text("keep")
    with pytest.raises(BackupError, match="already exists"):
        backup_sqlite(source, tmp_path / "taken.db")
    assert (tmp_path / "taken.db").read_text() == "keep"
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(BackupError, match="cannot back up"):
        backup_sqlite(tmp_path / "junk.db", tmp_path / "copy.db")
    assert not list(tmp_path.glob("*copy.db*"))


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///data/factory.db", Path("data/factory.db")),
        ("sqlite+aiosqlite:////var/lib/factoryctl/factory.db", Path("/var/lib/factoryctl/factory.db")),
        ("sqlite+aiosqlite:///:memory:", None),
        ("postgresql://postgres@127.0.0.1/factory", None),
    ],
)
def test_sqlite_file(url: str, path: Path | None) -> None:
    assert sqlite_file(url) == path
