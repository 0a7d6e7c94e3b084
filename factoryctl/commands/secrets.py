"""``factoryctl secrets create|set|list|delete``: team secrets, whose values are write-only.

A value comes from ``--from-stdin`` (one trailing newline stripped), ``--generate`` (printed once,
alone on the last line of stdout), or, on a terminal with neither flag, a hidden prompt. A value
the caller supplied is never printed. ``list`` shows names, scopes, versions and timestamps only.

``--scope`` says what may use the secret (docs/management.md, "Team secrets"): ``webhook`` (the
default: webhook auth only, never readable by a run) or ``run`` (environments and MCP servers).
``set NAME --scope S`` without ``--generate``/``--from-stdin`` changes only the scope; the store
refuses to make a secret a live webhook names ``run``.

``set`` adds a version: webhooks keep verifying with the version they captured until their
definition next applies (docs/reconcile.md, "Secret rotation"), so ``set`` names the webhooks that will
pick it up then. ``delete`` refuses while a live webhook references the secret, unless ``--force``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from typing import TYPE_CHECKING, Any

from factoryctl.context import CliContext
from factoryctl.existing_store import EXIT_NO_STORE, require_store

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported when a verb runs, not for --help
    from store import secrets as secret_store

DEFAULT_TEAM = "default"  # store.teams.DEFAULT_TEAM (tests/unit/cli keeps them equal)
SCOPES = ("webhook", "run")  # store.secrets.SCOPES; the first is the default (store.secrets.DEFAULT_SCOPE)


class _NoValue(Exception):
    pass


def register(sub: Any) -> None:
    parser = sub.add_parser("secrets", help="create, update, list and delete team secrets")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, text, handler, scope_help in (
        (
            "create",
            "create a secret (version 1)",
            _create,
            "what may use it: webhook (default; webhook auth, never runs) or run (environments, MCP)",
        ),
        (
            "set",
            "give an existing secret a new value (a new version) and/or a new scope",
            _set,
            "change what may use it; alone (no --generate/--from-stdin), only the scope changes",
        ),
    ):
        p = verbs.add_parser(verb, help=text)
        p.add_argument("name", metavar="NAME")
        source = p.add_mutually_exclusive_group()
        source.add_argument("--generate", action="store_true", help="generate a value and print it once")
        source.add_argument("--from-stdin", action="store_true", help="read the value from stdin")
        p.add_argument("--scope", choices=SCOPES, default=None, help=scope_help)
        p.add_argument("--team", default=DEFAULT_TEAM)
        p.set_defaults(handler=handler)
    lst = verbs.add_parser("list", help="list secrets: names, versions, timestamps (never values)")
    lst.add_argument("--format", choices=("text", "json"), default="text")
    lst.add_argument("--team", default=DEFAULT_TEAM)
    lst.set_defaults(handler=_list)
    rm = verbs.add_parser("delete", help="delete a secret and all its versions")
    rm.add_argument("name", metavar="NAME")
    rm.add_argument("--force", action="store_true", help="delete even if live webhooks reference it")
    rm.add_argument("--team", default=DEFAULT_TEAM)
    rm.set_defaults(handler=_delete)


def _read_value(args: argparse.Namespace) -> str:
    if args.generate:
        from store import secrets as secret_store

        return secret_store.generate_value()
    if args.from_stdin:
        value = sys.stdin.read()
        if value.endswith("\r\n"):
            return value[:-2]
        return value[:-1] if value.endswith("\n") else value
    if not sys.stdin.isatty():
        raise _NoValue("no value: pass --generate or --from-stdin (stdin is not a terminal)")
    value = getpass.getpass(f"Value for secret {args.name}: ")
    if getpass.getpass("Repeat the value: ") != value:
        raise _NoValue("the two values differ; nothing was stored")
    return value


def _write(ctx: CliContext, args: argparse.Namespace, *, create: bool) -> int:
    from store import StoreError
    from store import secrets as secret_store
    from store.clock import SystemClock
    from store.db import session_factory
    from store.teams import ensure_team

    scope_only = not create and args.scope is not None and not (args.generate or args.from_stdin)
    value: str | None = None
    if not scope_only:
        try:
            value = _read_value(args)
        except _NoValue as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    async def go() -> tuple[secret_store.SecretInfo, list[str]]:
        clock = SystemClock()
        async with ctx.engine() as engine, session_factory(engine)() as s, s.begin():
            team = await ensure_team(s, args.team)
            if create:
                assert value is not None
                scope = args.scope or secret_store.DEFAULT_SCOPE
                info = await secret_store.create(
                    s, ctx.secret_box(), clock, team.id, args.name, value, scope=scope
                )
            else:
                if args.scope is not None:
                    info = await secret_store.set_scope(s, clock, team.id, args.name, args.scope)
                if value is not None:
                    info = await secret_store.set_value(s, ctx.secret_box(), clock, team.id, args.name, value)
            return info, await secret_store.webhook_users(s, team.id, args.name)

    try:
        info, users = asyncio.run(go())
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    verb = "created" if create else "updated"
    print(f"{verb} secret {info.name} (version {info.version}, scope {info.scope}) in team {args.team}")
    if users and value is not None and not create:
        print(
            f"webhooks keep verifying with their captured version until their definition next applies: "
            f"{', '.join(users)}"
        )
    if args.generate:
        print("the generated value follows; store it now, it is not shown again:")
        print(value)
    return 0


def _create(ctx: CliContext, args: argparse.Namespace) -> int:
    return _write(ctx, args, create=True)


def _set(ctx: CliContext, args: argparse.Namespace) -> int:
    return _write(ctx, args, create=False)


def _list(ctx: CliContext, args: argparse.Namespace) -> int:
    from store import secrets as secret_store
    from store.clock import rfc3339
    from store.db import session_factory
    from store.teams import ensure_team

    if not require_store(ctx):
        return EXIT_NO_STORE

    async def go() -> list[secret_store.SecretInfo]:
        async with ctx.engine() as engine, session_factory(engine)() as s, s.begin():
            team = await ensure_team(s, args.team)
            return await secret_store.list_secrets(s, team.id)

    rows = asyncio.run(go())
    items = [
        {
            "name": r.name,
            "scope": r.scope,
            "version": r.version,
            "created_at": rfc3339(r.created_at),
            "updated_at": rfc3339(r.updated_at),
        }
        for r in rows
    ]
    if args.format == "json":
        print(json.dumps({"secrets": items}, indent=2))
        return 0
    if not items:
        print(f"no secrets in team {args.team}")
    for item in items:
        print(
            f"{item['name']}  {item['scope']}  v{item['version']}  created {item['created_at']}"
            f"  updated {item['updated_at']}"
        )
    return 0


def _delete(ctx: CliContext, args: argparse.Namespace) -> int:
    from store import StoreError
    from store import secrets as secret_store
    from store.db import session_factory
    from store.teams import ensure_team

    if not require_store(ctx):
        return EXIT_NO_STORE

    async def go() -> list[str]:
        async with ctx.engine() as engine, session_factory(engine)() as s, s.begin():
            team = await ensure_team(s, args.team)
            users = await secret_store.webhook_users(s, team.id, args.name)
            if users and not args.force:
                return users
            await secret_store.delete_secret(s, team.id, args.name)
            return []

    try:
        users = asyncio.run(go())
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if users:
        print(
            f"error: secret {args.name} is used by live webhooks: {', '.join(users)}; "
            "change or delete them first, or pass --force (they would then reject every delivery)",
            file=sys.stderr,
        )
        return 1
    print(f"deleted secret {args.name}")
    return 0
