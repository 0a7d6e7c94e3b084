"""``factoryctl backup --to DIR``: what it writes and its exit codes (docs/deployment.md, "Backup and
restore")."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from factoryctl.cli import main


@pytest.fixture
def data(tmp_path: Path, sqlite_template: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(sqlite_template, data / "factory.db")
    (data / "secret.key").write_text("key-file-contents\n")
    return data


def test_writes_the_database_and_the_key_files_privately(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data / "admin.key").write_text("fk_admin\n")
    target = tmp_path / "backup"
    assert main(["--context", "none", "--data-dir", str(data), "backup", "--to", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"to {target / 'factory.db'}" in out and "copied secret.key" in out and "copied admin.key" in out
    assert sorted(p.name for p in target.iterdir()) == ["admin.key", "factory.db", "secret.key"]
    assert (target / "secret.key").read_text() == "key-file-contents\n"
    for path in (target, *target.iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path


def test_refusals(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "old").write_text("")
    assert main(["--context", "none", "--data-dir", str(data), "backup", "--to", str(taken)]) == 2
    assert "is not an empty directory" in capsys.readouterr().err

    pg = ["--context", "none", "--database", "postgresql://postgres@127.0.0.1/factory"]
    assert main([*pg, "backup", "--to", str(tmp_path / "pg")]) == 2
    assert "pg_dump" in capsys.readouterr().err and not (tmp_path / "pg").exists()

    empty = tmp_path / "empty"
    assert main(["--context", "none", "--data-dir", str(empty), "backup", "--to", str(tmp_path / "b")]) == 1
    assert f"data directory {empty}" in capsys.readouterr().err
    assert not empty.exists() and not (tmp_path / "b").exists()  # nothing created on either side
