"""``factoryctl keys create|list|revoke``: API keys, printed once (alone on the last line of stdout)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from factoryctl.context import CliContext
from factoryctl.existing_store import EXIT_NO_STORE, require_store

# The store (SQLAlchemy) is imported when a verb runs, not for --help.
ROLES = ("admin", "member", "worker")  # store.apikeys.ROLES (tests/unit/cli keeps them equal)


def register(sub: Any) -> None:
    parser = sub.add_parser("keys", help="create, list and revoke API keys")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser("create", help="create a key; prints it once")
    create.add_argument("--name", required=True)
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument("--worker-host", action="append", default=[], metavar="ID", help="repeatable")
    create.add_argument("--team", default="default")
    create.set_defaults(handler=_create)
    lst = verbs.add_parser("list", help="list keys (never their values)")
    lst.add_argument("--team", default="default")
    lst.add_argument("--format", choices=("text", "json"), default="text")
    lst.set_defaults(handler=_list)
    revoke = verbs.add_parser("revoke", help="revoke a key by ID")
    revoke.add_argument("key_id")
    revoke.add_argument("--team", default="default")
    revoke.set_defaults(handler=_revoke)


def _create(ctx: CliContext, args: argparse.Namespace) -> int:
    from store import StoreError
    from store import apikeys as key_store
    from store.clock import SystemClock
    from store.db import session_factory
    from store.teams import ensure_team

    async def go() -> str:
        async with ctx.engine() as engine, session_factory(engine)() as s, s.begin():
            team = await ensure_team(s, args.team)
            row, plaintext = await key_store.create_key(
                s, SystemClock(), team.id, args.name, args.role, args.worker_host
            )
            print(f"created {row.role} key {row.id} ({row.name}) for team {args.team}; store it now:")
            return plaintext

    try:
        key = asyncio.run(go())
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(key)
    return 0


def _list(ctx: CliContext, args: argparse.Namespace) -> int:
    from store import apikeys as key_store
    from store.clock import rfc3339
    from store.db import session_factory
    from store.teams import ensure_team

    if not require_store(ctx):
        return EXIT_NO_STORE

    async def go() -> list[dict[str, Any]]:
        async with ctx.engine() as engine, session_factory(engine)() as s:
            team = await ensure_team(s, args.team)
            rows = await key_store.list_keys(s, team.id)
            await s.commit()
        return [
            {
                "id": r.id,
                "name": r.name,
                "role": r.role,
                "worker_hosts": r.worker_hosts,
                "prefix": r.prefix,
                "created_at": rfc3339(r.created_at),
                "last_used_at": rfc3339(r.last_used_at),
                "revoked": r.revoked_at is not None,
            }
            for r in rows
        ]

    keys = asyncio.run(go())
    if args.format == "json":
        print(json.dumps({"keys": keys}, indent=2))
        return 0
    for k in keys:
        state = "revoked" if k["revoked"] else "active"
        print(f"{k['id']}  {k['role']:<7} {state:<8} {k['prefix']}…  {k['name']}")
    return 0


def _revoke(ctx: CliContext, args: argparse.Namespace) -> int:
    from store import StoreError
    from store import apikeys as key_store
    from store.clock import SystemClock
    from store.db import session_factory
    from store.teams import ensure_team

    if not require_store(ctx):
        return EXIT_NO_STORE

    async def go() -> None:
        async with ctx.engine() as engine, session_factory(engine)() as s, s.begin():
            team = await ensure_team(s, args.team)
            await key_store.revoke_key(s, SystemClock(), team.id, args.key_id)

    try:
        asyncio.run(go())
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"revoked {args.key_id}")
    return 0
