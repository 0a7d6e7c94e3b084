"""``factoryctl backup --to DIR``: an online backup of a SQLite store and the keys beside it.

DIR receives ``factory.db`` (SQLite's backup API, safe while ``serve`` runs: :mod:`store.backup`),
``secret.key`` (without it no stored secret can be decrypted) and ``admin.key`` when the data directory
holds them. Restoring is copying those files into a new data directory (docs/deployment.md, "Backup and
restore"). A PostgreSQL store is refused with the ``pg_dump`` command to use instead.

Exit codes (docs/deployment.md, "Backup and restore"): 0 written; 1 nothing to back up, or the copy
failed (no partial file is left); 2 usage: not a SQLite store, or DIR exists and is not empty.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from factoryctl.context import CliContext

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DATABASE_FILE = "factory.db"
KEY_FILES = ("secret.key", "admin.key")


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser(
        "backup",
        help="back up a SQLite store and its secret key into a new directory (safe while serving)",
        description="Copy the SQLite store (online, with SQLite's backup API), secret.key and admin.key "
        "into DIR, a new or empty directory. PostgreSQL: use pg_dump (docs/deployment.md).",
    )
    parser.add_argument("--to", required=True, metavar="DIR", help="new or empty directory for the backup")
    parser.set_defaults(handler=run)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from store.backup import BackupError, backup_sqlite, sqlite_file

    database = sqlite_file(ctx.database_url)
    if database is None:
        return _fail(
            "the store is not a SQLite file; back up PostgreSQL with "
            "pg_dump --format=custom --file=factory.dump URL, and save the secret key beside it "
            "(docs/deployment.md, 'Backup and restore')",
            EXIT_USAGE,
        )
    if not database.is_file():
        return _fail(f"no store to back up: {database} does not exist (data directory {ctx.data_dir})")
    target = Path(args.to)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        return _fail(f"{target} exists and is not an empty directory", EXIT_USAGE)
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = backup_sqlite(database, target / DATABASE_FILE)
        copied = _copy_keys(ctx.data_dir, target)
    except BackupError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {target}: {exc}")
    rows = ", ".join(f"{count} {table}" for table, count in made.rows.items())
    print(f"backed up {database} to {made.path} (schema {made.revision or 'unknown'}: {rows})")
    for name in copied:
        print(f"copied {name}")
    if ctx.env.get("FACTORY_SECRET_KEY"):
        print(
            "note: the secret key comes from FACTORY_SECRET_KEY, not a file: keep it with this backup",
            file=sys.stderr,
        )
    elif "secret.key" not in copied:
        print(f"warning: no secret.key in {ctx.data_dir}: stored secrets cannot be restored", file=sys.stderr)
    return EXIT_OK


def _copy_keys(data_dir: Path, target: Path) -> list[str]:
    """Copy the key files found in the data directory, private (0600) whatever their mode was."""
    copied = []
    for name in KEY_FILES:
        source = data_dir / name
        if source.is_file():
            fd = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out, source.open("rb") as src:
                shutil.copyfileobj(src, out)
            copied.append(name)
    return copied


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code
