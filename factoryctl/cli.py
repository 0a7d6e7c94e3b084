"""The ``factoryctl`` entry point: global options, then one module per command group.

Each module in :mod:`factoryctl.commands` exposes ``register(subparsers)`` and attaches a
``handler(ctx, args) -> int`` to its parsers. Environment variables are read here and in
:class:`factoryctl.context.CliContext` only.

Commands are imported lazily: :data:`COMMANDS` names each command, its one-line help and its module,
so ``factoryctl --help`` lists them without importing any command module, and ``factoryctl NAME ...``
imports the one module that registers NAME. Importing every module up front (and with them the
store, the client and the reconciler) made a bare ``--help`` take 0.6 s (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from factoryctl import __version__


class Command(NamedTuple):
    module: str  # in factoryctl.commands; its register() adds this command's parser
    help: str  # shown by `factoryctl --help`; the same text register() gives (tests/unit/cli checks)


# In `--help` order. A module that registers several commands lists them next to each other.
COMMANDS: dict[str, Command] = {
    "validate": Command("validate", "validate factory directories (exit 0 valid, 1 invalid)"),
    "migrate": Command("migrate", "rewrite a factory directory from the legacy format to v1alpha1"),
    "plan": Command("plan_apply", "show what apply would change (nothing is written)"),
    "apply": Command("plan_apply", "apply a factory directory to the store, atomically"),
    "secrets": Command("secrets", "create, update, list and delete team secrets"),
    "keys": Command("keys", "create, list and revoke API keys"),
    "serve": Command("serve", "run the control plane (reconciler, API, ingress, workers)"),
    "watch": Command("watch", "apply a factory directory on every change (no server)"),
    "worker": Command("worker", "run a self-hosted worker for one worker host ID"),
    "runs": Command("runs", "create, list, inspect, follow up and cancel runs (HTTP API)"),
    "events": Command("events", "follow the team's run events live (HTTP API)"),
    "schedules": Command("schedules", "list, pause, resume and run scheduled agents now (HTTP API)"),
    "factories": Command("factories", "list factories and show one's sync status (HTTP API)"),
    "webhooks": Command("webhooks", "create, list, enable/disable, rotate and delete webhooks"),
    "deliveries": Command("webhooks", "a webhook's delivery log"),
    "automations": Command("webhooks", "test automation filters against stored deliveries"),
    "schemas": Command("schemas", "export the definition files' JSON Schemas for editors"),
    "github": Command("github", "connect, show and disconnect the team's GitHub App (HTTP API)"),
    "notifications": Command(
        "notifications", "endpoints, messages and resends of outbound notifications (HTTP API)"
    ),
    "backup": Command(
        "backup", "back up a SQLite store and its secret key into a new directory (safe while serving)"
    ),
    "version": Command(
        "version", "print the installed version, the Python it runs on and its database schema revision"
    ),
}


class _NotACommandLine(Exception):
    pass


class _GlobalOptions(argparse.ArgumentParser):
    """Finds the command an argv names, the way the real parser will; never prints or exits."""

    def error(self, message: str) -> NoReturn:
        raise _NotACommandLine(message)


def _global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database", metavar="URL", help="store URL (env FACTORY_DATABASE_URL)")
    parser.add_argument(
        "--data-dir", metavar="DIR", help="data directory (env FACTORY_DATA_DIR, default ./.factory)"
    )
    parser.add_argument(
        "--context",
        metavar="PATH",
        help="CLI context file written by serve (env FACTORY_CONTEXT; default: the nearest "
        ".factory/context.json upward; 'none' for no context)",
    )


def command_name(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (``None`` for none or an unknown one), global options skipped."""
    scout = _GlobalOptions(add_help=False)
    _global_options(scout)
    scout.add_argument("command", nargs="?")
    try:
        known, _rest = scout.parse_known_args(argv)
    except _NotACommandLine:
        return None  # the real parser reports the mistake
    name = known.command
    return name if name in COMMANDS else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``factoryctl`` parser; with ``argv``, only the command it names is imported and registered.

    Without ``argv`` every command module is imported (tools and tests that want the whole parser).
    Commands that are not imported get a stub parser carrying their help line, so ``--help`` and
    "invalid choice" errors list every command either way.
    """
    parser = argparse.ArgumentParser(
        prog="factoryctl", description="GitOps control plane for agent factories."
    )
    parser.add_argument("--version", action="version", version=f"factoryctl {__version__}")
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = {c.module for c in COMMANDS.values()} if argv is None else set()
    chosen = command_name(argv) if argv is not None else None
    if chosen is not None:
        wanted.add(COMMANDS[chosen].module)
    registered: set[str] = set()
    for name, command in COMMANDS.items():
        if command.module not in wanted:
            sub.add_parser(name, help=command.help)
        elif command.module not in registered:
            _register(command.module, sub)
            registered.add(command.module)
    return parser


def _register(module_name: str, sub: Any) -> None:
    module = importlib.import_module(f"factoryctl.commands.{module_name}")
    module.register(sub)


def with_context(env: dict[str, str], named: str | None) -> dict[str, str]:
    """``env`` plus the settings of the CLI context file (``--context``, else ``FACTORY_CONTEXT``, else
    the nearest ``.factory/context.json``) where ``env`` leaves them unset: flags win over variables,
    variables over the context (docs/cli.md, "CLI context"). Raises ValueError for an unusable file."""
    from factoryctl.context_file import ContextError, find

    try:
        found = find(Path.cwd(), named or env.get("FACTORY_CONTEXT"))
    except ContextError as exc:
        raise ValueError(str(exc)) from exc
    for name, value in (found.defaults() if found else {}).items():
        if not env.get(name):
            env[name] = value
    return env


def main(argv: Sequence[str] | None = None) -> int:
    # Everything this process creates — the SQLite database and its WAL, key files, git mirrors and
    # snapshots, workspaces — is private to its user: files 0600, directories 0700 (docs/operations.md,
    # "File modes"). Set before anything is created; the processes it starts inherit it.
    os.umask(0o077)
    args_in = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(args_in)
    args = parser.parse_args(args_in)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    from factoryctl.context import CliContext

    try:
        env = with_context(dict(os.environ), args.context)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ctx = CliContext.from_args(args.database, args.data_dir, env)
    try:
        code: int = handler(ctx, args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
