"""The ``factoryctl`` entry point: global options, then one module per command group.

Each module in :mod:`factoryctl.commands` exposes ``register(subparsers)`` and attaches a
``handler(ctx, args) -> int`` to its parsers. Environment variables are read here and in
:class:`factoryctl.context.CliContext` only.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from factoryctl import __version__
from factoryctl.context import CliContext

COMMAND_MODULES = (
    "validate",
    "plan_apply",
    "secrets",
    "keys",
    "serve",
    "watch",
    "worker",
    "runs",
    "webhooks",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="factoryctl", description="GitOps control plane for agent factories."
    )
    parser.add_argument("--version", action="version", version=f"factoryctl {__version__}")
    parser.add_argument("--database", metavar="URL", help="store URL (env FACTORY_DATABASE_URL)")
    parser.add_argument(
        "--data-dir", metavar="DIR", help="data directory (env FACTORY_DATA_DIR, default ./.factory)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"factoryctl.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    ctx = CliContext.from_args(args.database, args.data_dir)
    try:
        code: int = handler(ctx, args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
