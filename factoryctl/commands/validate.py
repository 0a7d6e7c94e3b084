"""``factoryctl validate PATH...``: check factory directories, for people and for CI.

Offline by default (schemas and cross-file rules). With a store (the global ``--database`` or
``FACTORY_DATABASE_URL``) it also runs the online checks for team ``default``: secrets exist and
have the right shape, and referenced webhook UIDs exist in the factory. With ``--server`` the
server runs them instead. Exit codes: 0 valid, 1 invalid (or the store could not be read, or the
server refused the call), 2 usage error (a PATH that is not a directory), 3 the server could not be
reached (``docs/cli.md``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factoryctl import __version__
from factoryctl.context import CliContext, use_color
from reconciler.report import FORMATS

# Imported where used, so an offline run loads the loader and the rules only: the store (SQLAlchemy)
# only with a database, the client (httpx) only with --server. `docs/cli.md`, "Start-up".
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from factoryctl.client import FactoryClient
    from reconciler.diagnostics import Diagnostic
    from reconciler.loader import LoadResult


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser(
        "validate",
        help="validate factory directories (exit 0 valid, 1 invalid)",
        description="Validate factory directories. Offline unless a store is given with the global "
        "--database option or FACTORY_DATABASE_URL, which adds the online checks.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="factory directory (holds factory.yaml)")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="output format (default: github when GITHUB_ACTIONS=true, else text)",
    )
    parser.add_argument("--server", metavar="URL", help="run the online checks through a factoryctl server")
    parser.set_defaults(handler=run)


def _remote(ctx: CliContext, args: argparse.Namespace) -> int:
    """``--server``: the server runs the full validation (POST /api/v1/factory-files/validate).

    Through the shared HTTP runner: a refused call exits 1 like invalid definitions, a server that
    cannot be reached exits 3 (``docs/cli.md``).
    """
    from factoryctl.commands import _http

    fmt = args.format or ("github" if ctx.env.get("GITHUB_ACTIONS") == "true" else "text")
    if not ctx.api_key():  # the public tiers only: the server cannot check the team's secrets and names
        print(
            "warning: no FACTORY_API_KEY: the server runs the parser and state-independent"
            " checks only (secrets, webhook UIDs and names taken are not checked)",
            file=sys.stderr,
        )

    def check(client: FactoryClient) -> int:
        from reconciler.diagnostics import Diagnostic
        from reconciler.report import FactoryReport, is_valid, render

        data = _validate_remote(client, args.paths)
        fields = ("rule", "message", "path", "line", "column", "hint", "severity")
        reports = [
            FactoryReport(
                f["path"],
                f.get("name"),
                int(f.get("files") or 0),
                tuple(Diagnostic(**{k: e[k] for k in fields if k in e}) for e in f["errors"]),
            )
            for f in data["factories"]
        ]
        color = fmt == "text" and use_color(sys.stdout)
        sys.stdout.write(render(fmt, reports, color=color, tool_version=__version__))
        return 0 if is_valid(reports) else 1

    return _http.run(ctx, args, check, key_required=False)


def _validate_remote(client: FactoryClient, paths: Sequence[str]) -> dict[str, Any]:
    """:func:`factoryctl.client.files.validate_remote` on the CLI's client (its headers and timeout)."""
    from factoryctl.client.files import _not_a_factory, as_report, collect_files, merge

    answers = []
    for root in paths:
        files = collect_files(Path(root))
        answers.append((root, as_report(client.files.validate(files)) if files else _not_a_factory(root)))
    return merge(answers)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    # A path that is not a directory is a mistake on the command line, not an invalid factory: exit 2
    # (usage), so CI tells a typo in its workflow from a definition error (docs/cli.md, "Exit codes").
    missing = [p for p in args.paths if not Path(p).is_dir()]
    for path in missing:
        why = "is not a directory" if Path(path).exists() else "does not exist"
        print(f"error: {path} {why} (validate takes factory directories)", file=sys.stderr)
    if missing:
        return 2
    if args.server:
        return _remote(ctx, args)
    from reconciler import rules
    from reconciler.loader import load_many
    from reconciler.report import FactoryReport, is_valid, render

    fmt = args.format or ("github" if ctx.env.get("GITHUB_ACTIONS") == "true" else "text")
    results = load_many(Path(p) for p in args.paths)
    if args.database or ctx.env.get("FACTORY_DATABASE_URL"):
        import asyncio

        from factoryctl.existing_store import require_store

        if not require_store(ctx):  # opening a SQLite URL would create an empty store to check against
            return 1

        from sqlalchemy.exc import ArgumentError, SQLAlchemyError

        from store import StoreError

        try:
            extra = asyncio.run(_online(ctx, results))
        except (StoreError, SQLAlchemyError, ArgumentError, OSError) as exc:
            reason = getattr(exc, "orig", None) or exc  # the driver's words, without SQLAlchemy's SQL dump
            where = _safe_url(ctx.database_url)
            print(
                f"error: cannot run the online checks against {where}: {reason}",
                file=sys.stderr,
            )
            return 1
    else:
        extra = [rules.check(r.definition) if r.definition else [] for r in results]
    reports = [FactoryReport.from_load(r, e) for r, e in zip(results, extra, strict=True)]
    color = fmt == "text" and use_color(sys.stdout)
    sys.stdout.write(render(fmt, reports, color=color, tool_version=__version__))
    return 0 if is_valid(reports) else 1


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "the store"


async def _online(ctx: CliContext, results: Sequence[LoadResult]) -> list[list[Diagnostic]]:
    from sqlalchemy import select

    from reconciler import online, rules
    from store.db import session_factory
    from store.models import Team
    from store.teams import DEFAULT_TEAM

    out: list[list[Diagnostic]] = []
    box = ctx.secret_box()
    async with ctx.engine(migrate_schema=False) as engine, session_factory(engine)() as session:
        team_id = (
            await session.execute(select(Team.id).where(Team.name == DEFAULT_TEAM))
        ).scalar_one_or_none()
        for result in results:
            definition = result.definition
            if definition is None:
                out.append([])
                continue
            live = await _live_webhooks(session, team_id, definition.factory.name)
            names = {w.name for w in definition.webhooks}
            surviving = {uid: name for uid, name in live.items() if name in names}
            found = rules.check(definition, {name: uid for uid, name in live.items()})
            found += await online.check(session, box, team_id or "", definition, surviving)
            out.append(found)
    return out


async def _live_webhooks(session: AsyncSession, team_id: str | None, factory: str) -> dict[str, str]:
    """UID -> name of the factory's live (not deleted) webhooks; empty when it was never applied."""
    from sqlalchemy import select

    from store.models import Factory, Webhook

    if team_id is None:
        return {}
    stmt = (
        select(Webhook.uid, Webhook.name)
        .join(Factory, Factory.uid == Webhook.factory_uid)
        .where(Factory.team_id == team_id, Factory.name == factory, Webhook.deleted_at.is_(None))
    )
    return {uid: name for uid, name in (await session.execute(stmt)).all()}
