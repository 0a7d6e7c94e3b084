"""``factoryctl schemas export DIR``: the definition files' JSON Schemas, for editors.

An editor's YAML language server gives completion and errors in ``webhooks/alerts.yaml`` once the file is
associated with ``webhook.schema.json`` (a ``# yaml-language-server: $schema=...`` first line, or the
editor's ``yaml.schemas`` setting; docs/cli.md, "Editors"). The documents written are the ones the server
serves at ``GET /api/v1/factory-files/schemas/v1alpha1/...``, whose ``$ref``s name sibling files, so
the exported directory resolves offline. ``--check`` (for CI, and for the copy example-factory/ ships)
writes nothing and exits 1 when DIR differs from what export would write.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_STALE = 1

# Which definition file each document describes (a glob below the factory directory), for the hints.
FILES = {
    "factory": "factory.yaml",
    "webhook": "webhooks/*.yaml",
    "environment": "environments/*.yaml",
    "schedule": "schedules/*.yaml",
    "runner": "runners/*.yaml",
    "notification": "notifications/*.yaml",
    "benchmark": "benchmarks/*/suite.yaml",
    "benchmark-task": "benchmarks/*/tasks/*.yaml",
}


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser("schemas", help="export the definition files' JSON Schemas for editors")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    export = verbs.add_parser("export", help="write every *.schema.json into DIR (refs resolve there)")
    export.add_argument("directory", metavar="DIR", help="created if missing; existing files are replaced")
    export.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when DIR differs from the export"
    )
    export.set_defaults(handler=_export)


def documents() -> dict[str, str]:
    """File name -> text of every schema document, as the server serves it."""
    import schemas
    from api.management.factory_schemas import file_name, served_document

    return {
        file_name(name): json.dumps(served_document(name), indent=2, ensure_ascii=False) + "\n"
        for name in schemas.NAMES
    }


def _export(ctx: object, args: argparse.Namespace) -> int:
    del ctx
    target = Path(args.directory)
    if target.exists() and not target.is_dir():
        print(f"error: {target} is not a directory", file=sys.stderr)
        return 2
    wanted = documents()
    if args.check:
        stale = [n for n, text in wanted.items() if _read(target / n) != text]
        for name in stale:
            print(f"stale: {target / name}", file=sys.stderr)
        if stale:
            fix = f"factoryctl schemas export {target}"
            print(f"error: {target} differs from the export; run: {fix}", file=sys.stderr)
            return EXIT_STALE
        print(f"{target}: {len(wanted)} schemas, up to date")
        return 0
    target.mkdir(parents=True, exist_ok=True)
    for name, text in wanted.items():
        (target / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(wanted)} schemas to {target}")
    print("associate each definition file with its schema by a first line naming it (a path relative to")
    print("the file, or absolute), e.g. in webhooks/NAME.yaml:")
    print(f"  # yaml-language-server: $schema={target.resolve() / 'webhook.schema.json'}")
    for name, pattern in FILES.items():
        print(f"  {pattern:<30} {name}.schema.json")
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
