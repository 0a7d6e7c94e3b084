"""``make run``: the example factory, live on SQLite, in one command.

Steps: validate ``example-factory/``; create the team secrets it names (generated values): the
webhooks' own with scope ``webhook``, the environments' with scope ``run`` (a webhook's secret never
reaches a run: docs/management.md, "Team secrets"); apply the example as it is, in one step (its
automations name their webhooks, docs/definitions.md, "Referencing webhooks"); then ``serve --repo``
the example with two service-hosted ``echo`` workers, printing commands to post a delivery and see the
run it starts. A busy port fails first, before anything is printed or applied. Like ``serve`` it writes
the CLI context, so ``factoryctl`` commands in a new terminal find this server (docs/cli.md, "CLI
context").
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path

from factoryctl.cli import build_parser
from factoryctl.context import CliContext
from factoryctl.context_file import server_url, write
from factoryctl.serve.options import ServeOptions
from factoryctl.serve.process import ADMIN_KEY_FILE, bootstrap_admin_key, run_server
from factoryctl.serve.runtime import port_taken
from reconciler.loader import load
from reconciler.rules import check
from reconciler.service import reconcile
from reconciler.specs import FactoryDefinition
from store import secrets as secret_store
from store.clock import SystemClock
from store.db import session_factory
from store.models import Webhook
from store.teams import ensure_team


def example_secrets(definition: FactoryDefinition) -> dict[str, str]:
    """Secret name -> scope of every team secret the example names: webhooks' ``secretName`` are
    ``webhook``, environments' ``secrets`` are ``run``."""
    out = {hook.secret_name: secret_store.WEBHOOK for hook in definition.webhooks}
    for environment in definition.environments:
        for name in (environment.spec or {}).get("secrets") or []:
            out.setdefault(str(name), secret_store.RUN)
    return out


async def prepare(ctx: CliContext, example: Path) -> dict[str, str]:
    """Secrets and one apply; returns webhook name -> "UID auth-mode secret" of the applied webhooks."""
    loaded = load(example)
    problems = loaded.diagnostics + (check(loaded.definition) if loaded.definition else [])
    if problems or loaded.definition is None:
        for d in problems:
            print(d, file=sys.stderr)
        raise SystemExit("error: example-factory does not validate")
    print(f"validated {example} ({loaded.files} files): OK")
    definition = loaded.definition
    box, clock = ctx.secret_box(), SystemClock()
    shown: dict[str, str] = {}
    async with ctx.engine() as engine:
        sessions = session_factory(engine)
        async with sessions() as s, s.begin():
            team = await ensure_team(s)
            for name, scope in example_secrets(definition).items():
                if await secret_store.get(s, team.id, name) is None:
                    value = secret_store.generate_value()
                    await secret_store.create(s, box, clock, team.id, name, value, scope=scope)
                    print(f"created team secret {name} (scope {scope})")
        applied = await reconcile(sessions, box, clock, team="default", root=example, revision=None)
        if not applied.ok:
            raise SystemExit(f"error: applying the example failed: {applied.error or applied.diagnostics}")
        async with sessions() as s:
            rows = (await s.execute(Webhook.__table__.select().where(Webhook.deleted_at.is_(None)))).all()
            team = await ensure_team(s)
            for row in rows:
                if row.factory_uid != applied.factory_uid:
                    continue
                hook = next(h for h in definition.webhooks if h.name == row.name)
                value, _ = await secret_store.reveal(s, box, team.id, hook.secret_name)
                shown[row.name] = f"{row.uid} {hook.auth_mode} {value}"
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="factoryctl-demo")
    parser.add_argument("--data-dir", default=".factory/demo")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--no-context", action="store_true", help="do not write the CLI context")
    parser.add_argument("example", nargs="?", default="example-factory")
    args = parser.parse_args(argv)
    ctx = CliContext.from_args(None, args.data_dir)
    example = Path(args.example).resolve()
    # The real `serve` parser supplies every default, so the demo cannot drift from the command.
    serve_args = ["serve", "--repo", str(example), "--host", args.host, "--port", str(args.port)]
    options = ServeOptions.from_args(ctx, build_parser().parse_args(serve_args))
    busy = asyncio.run(port_taken(options.settings))
    if busy is not None:  # before anything is printed or applied: nothing below would be true
        print(
            f"error: {busy}; stop what listens there, or pick another port: make run PORT=8081",
            file=sys.stderr,
        )
        return 1
    shown = asyncio.run(prepare(ctx, example))
    key_file = asyncio.run(_admin_key(ctx))
    base = server_url(args.host, args.port)
    written = [] if args.no_context else write(ctx.data_dir, base, key_file, Path.cwd())
    print_guide(example, key_file, base, shown, written)
    return asyncio.run(run_server(ctx, options))


def print_guide(
    example: Path, key_file: Path, base: str, shown: dict[str, str], contexts: list[Path]
) -> None:
    """Ready-to-paste commands; the ``factoryctl`` ones work in a new terminal because the CLI context
    (``.factory/context.json`` here) names this server, its key file and its data directory."""
    alerts = shown.get("alerts", "").split()
    here = Path.cwd()
    print("\n=== factoryctl demo ===")
    print(f"definitions (watched; edit and save to re-apply): {example}")
    print(f"admin API key file: {key_file}")
    local = [c for c in contexts if c.parent.parent == here]
    if local:
        print(f"CLI context: {local[0]} (found by factoryctl in {here} and below)")
        activate = Path(sys.executable).parent / "activate"
        print("\nin a new terminal:")
        print(f"  cd {shlex.quote(str(here))} && . {shlex.quote(str(activate))}")
        print("  factoryctl schedules list")
        print("  factoryctl webhooks list example")
        print("  factoryctl runs list")
    if len(alerts) == 3:
        uid, _mode, token = alerts
        print("\npost a sample delivery to the 'alerts' webhook (starts the alert-triage automation):")
        print(
            f"  curl -sS -X POST {base}/webhooks/w/{uid} -H 'Authorization: Bearer {token}' "
            '-H \'X-Alert-Id: demo-1\' -d \'{"service": "api", "severity": "high"}\''
        )
        if local:
            print("then its entry in the delivery log and the run it started:")
            print("  factoryctl deliveries list example alerts")
            print("  factoryctl runs list --factory example")
    print("\nor list the runs with curl:")
    print(f'  curl -sS {base}/api/v1/agent/runs -H "Authorization: Bearer $(cat {key_file})"')
    print(f"\nopen the web console: {base}/console/")
    print(f"  sign in with the admin API key: cat {key_file}")
    print("\nCtrl-C stops the server.\n", flush=True)


async def _admin_key(ctx: CliContext) -> Path:
    path = ctx.data_dir / ADMIN_KEY_FILE
    async with ctx.engine() as engine:
        created = await bootstrap_admin_key(engine, ctx.data_dir, "default")
    return created or path


if __name__ == "__main__":
    raise SystemExit(main())
