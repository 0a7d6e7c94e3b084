"""``factoryctl version``: which release is installed, on which Python, migrating to which schema.

An operator comparing replicas, or filing a bug, needs the three together (docs/deployment.md,
"Upgrading"). The version is the installed distribution's (``pip install`` of a wheel) and falls back to
:data:`factoryctl.__version__` when the package runs from a source tree without metadata. Nothing here
opens a store or reads the environment.
"""

from __future__ import annotations

import argparse
import json
import platform
from importlib import metadata
from typing import Any

from factoryctl import __version__
from factoryctl.context import CliContext

DISTRIBUTION = "factoryctl"


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser(
        "version",
        help="print the installed version, the Python it runs on and its database schema revision",
        description="Print factoryctl's version, the Python it runs on and the database schema revision "
        "this version migrates a store to. Exit 0.",
    )
    parser.add_argument("--short", action="store_true", help="print the version number only")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(handler=run)


def installed_version() -> str:
    """The installed distribution's version; the package's own constant without metadata."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return __version__


def schema_head() -> str:
    """The newest migration revision shipped with this version (what ``serve`` migrates a store to)."""
    from alembic.script import ScriptDirectory

    from store.db import MIGRATIONS

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    return head or "none"


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    version = installed_version()
    if args.short:
        print(version)
        return 0
    info = {"version": version, "python": platform.python_version(), "schema": schema_head()}
    if args.format == "json":
        print(json.dumps(info))
    else:
        print(f"factoryctl {info['version']}")
        print(f"python {info['python']}")
        print(f"database schema {info['schema']}")
    return 0
