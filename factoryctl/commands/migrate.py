"""``factoryctl migrate PATH``: rewrite a factory directory from the legacy format to v1alpha1.

The rewrite itself is :mod:`reconciler.migrate` (pure, over file texts); this module reads the files
it needs, prints the plan and writes it. Every file is written whole to a temporary file beside it and
renamed into place, new files first and ``factory.yaml`` last, so an interrupted run leaves a tree
that a second run finishes. Exit codes (docs/cli.md, "factoryctl migrate"): 0 migrated, already
v1alpha1, or planned (``--dry-run``); 1 cannot migrate, or ``--check`` found legacy files; 2 usage,
including a tree with no repository to list and no ``--repository``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factoryctl.context import CliContext

if TYPE_CHECKING:
    from reconciler.migrate import FileWrite

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_MAX_BYTES = 1024 * 1024  # the loader's per-file cap (docs/definitions.md, "How files are read")


class _Unreadable(Exception):
    pass


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser(
        "migrate",
        help="rewrite a factory directory from the legacy format to v1alpha1",
        description="Rewrite a factory directory in place from factoryctl's legacy format to the "
        "v1alpha1 definition format, losing nothing. Running it on a v1alpha1 tree changes nothing.",
    )
    parser.add_argument("path", metavar="PATH", help="factory directory (holds factory.yaml)")
    parser.add_argument(
        "--repository",
        action="append",
        default=[],
        metavar="OWNER/NAME",
        help="a GitHub repository of the factory (repeatable); added to those its environments clone",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the files it would write; write nothing")
    mode.add_argument("--check", action="store_true", help="exit 1 when the tree needs migration (for CI)")
    parser.set_defaults(handler=run)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from reconciler import migrate

    root = Path(args.path)
    if not (root / "factory.yaml").is_file():
        return _fail(f"'{root}' is not a factory directory: factory.yaml not found", EXIT_USAGE)
    try:
        repositories = [migrate.parse_repository(r) for r in args.repository]
    except ValueError as exc:
        return _fail(f"--repository: {exc}", EXIT_USAGE)
    try:
        files = _read_tree(root)
        if args.check:
            return _check(root, migrate.pending(files))
        plan = migrate.plan(files, repositories)
    except _Unreadable as exc:
        return _fail(str(exc), EXIT_FAILED)
    except migrate.RepositoriesNeeded as exc:
        return _fail(str(exc), EXIT_USAGE)
    except migrate.MigrationError as exc:
        return _fail(str(exc), EXIT_FAILED)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if plan.done:
        print(f"{root} is already {migrate.SCHEMA_VERSION}: nothing to do")
        return EXIT_OK
    verb = "would write" if args.dry_run else "write"
    for write in plan.writes:
        print(f"{verb} {write.path}{' (new)' if write.new else ''}")
    if args.dry_run:
        return EXIT_OK
    try:
        _write(root, plan.writes)
    except OSError as exc:
        return _fail(f"cannot write: {exc}", EXIT_FAILED)
    print(f"migrated {root} to {migrate.SCHEMA_VERSION}: {len(plan.writes)} files written")
    return EXIT_OK


def _check(root: Path, legacy: list[str]) -> int:
    if not legacy:
        print(f"{root} is v1alpha1")
        return EXIT_OK
    for path in legacy:
        print(f"legacy format: {path}")
    print(f"{root} needs migration: factoryctl migrate {root}")
    return EXIT_FAILED


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _read_tree(root: Path) -> dict[str, str]:
    """The files the migration reads, by relative path. Hidden names are skipped, as the loader does."""
    wanted = ["factory.yaml"]
    for folder, pattern in (
        ("environments", "*.y*ml"),
        ("automations", "*/automation.md"),
        ("agents", "*/agent.md"),
    ):
        if (root / folder).is_dir():
            found = (p.relative_to(root).as_posix() for p in (root / folder).glob(pattern))
            wanted += sorted(p for p in found if not any(part.startswith(".") for part in p.split("/")))
    return {rel: _read(root, rel) for rel in wanted if rel.endswith((".yaml", ".yml", ".md"))}


def _read(root: Path, rel: str) -> str:
    path = root / rel
    real_root = root.resolve()
    if not path.resolve().is_relative_to(real_root):
        raise _Unreadable(f"{rel}: symlink points outside the factory directory")
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise _Unreadable(f"{rel}: larger than 1 MiB")
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise _Unreadable(f"{rel}: cannot read: {exc}") from exc


def _write(root: Path, writes: Sequence[FileWrite]) -> None:
    """Each file through a temporary sibling and a rename; modes kept, new files take factory.yaml's
    and new directories the factory directory's (``main`` sets a 077 umask for files it owns)."""
    base_mode = (root / "factory.yaml").stat().st_mode & 0o777
    dir_mode = root.stat().st_mode & 0o777
    for write in writes:
        target = root / write.path
        for parent in reversed(target.relative_to(root).parents[:-1]):
            if not (root / parent).is_dir():
                (root / parent).mkdir()
                os.chmod(root / parent, dir_mode)  # as the factory directory, whatever the umask
        mode = base_mode if write.new else target.stat().st_mode & 0o777
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
                out.write(write.text)
            os.chmod(temp, mode)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
