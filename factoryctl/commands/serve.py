"""``factoryctl serve``: migrate, reconcile a source, serve the API + ingress, run service-hosted workers."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from factoryctl.commands.worker import add_limit_flags, add_log_format_flag, start_logging
from factoryctl.context import CliContext


def _env_default(name: str, default: Any) -> Any:
    return ("env", name, default)


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the control plane (reconciler, API, ingress, workers)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--repo", metavar="PATH", help="a factory directory to watch and apply")
    src.add_argument("--git", metavar="URL", help="a git repository to follow")
    p.add_argument("--branch", default="main", help="branch to follow with --git (default main)")
    p.add_argument(
        "--no-self-heal",
        dest="self_heal",
        action="store_false",
        help="report drift from the source but never re-apply it (docs/reconcile.md: Self-heal)",
    )
    p.add_argument(
        "--poll-interval", default="30", metavar="S", help="git poll interval, seconds (30, 30s, 1m)"
    )
    p.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="listen port (default 8080)")
    p.add_argument("--workers", type=int, default=None, help="service-hosted workers (default 2; 0 = none)")
    p.add_argument(
        "--processes",
        default=None,
        metavar="N|auto",
        help="server processes sharing the port (default 1; auto = one per CPU); more than 1 needs "
        "PostgreSQL. The first runs migrations and every background job, the others serve HTTP only",
    )
    p.add_argument(
        "--worker-process",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the service-hosted workers in a process of their own (the default; "
        "--no-worker-process: on the server's event loop; env FACTORY_WORKER_PROCESS; "
        "docs/operations.md: Workers in their own process)",
    )
    # A secondary of --processes N, started by the primary: FD is its end of their channel.
    p.add_argument("--secondary", type=int, default=None, metavar="FD", help=argparse.SUPPRESS)
    p.add_argument(
        "--harness",
        choices=("echo", "command", "claude", "codex", "gemini"),
        default=None,
        help="service-hosted harness (claude, codex, gemini: an agent CLI preset, docs/agents.md)",
    )
    p.add_argument(
        "--agent-cli",
        action="append",
        default=None,
        metavar="NAME=PATH",
        help="where an agent CLI is when it is not on PATH (repeatable; env FACTORY_AGENT_CLI)",
    )
    p.add_argument(
        "--command", dest="harness_command", default=None, metavar="CMD", help="command harness CLI"
    )
    p.add_argument(
        "--workspace-dir",
        default=None,
        metavar="DIR",
        help="service-hosted run workspaces (default: a private temp dir; never inside the data dir)",
    )
    p.add_argument("--bwrap", default=None, metavar="PATH", help="bubblewrap executable (default bwrap)")
    p.add_argument(
        "--agent-env",
        action="append",
        default=None,
        metavar="NAME",
        help="a variable of this environment service-hosted runs also get (beside PATH, locale, TZ, TERM)",
    )
    p.add_argument(
        "--sandbox-ro", action="append", default=None, metavar="DIR", help="also in every sandbox, read-only"
    )
    p.add_argument(
        "--sandbox-rw",
        action="append",
        default=None,
        metavar="DIR",
        help="also in every sandbox, writable (shared by all runs of all teams)",
    )
    p.add_argument(
        "--sandbox-open-network",
        action="store_const",
        const=True,
        default=None,
        help="honour an environment's network mode open (the host's network) in service-hosted runs",
    )
    p.add_argument(
        "--sandbox-private-egress",
        action="store_const",
        const=True,
        default=None,
        help="let a destination an environment lists be a private, loopback or link-local address",
    )
    add_limit_flags(p)  # per run of the service-hosted workers (docs/workers.md, "Limits")
    p.add_argument("--public-url", default=None, help="external base URL used in ingress URLs")
    p.add_argument(
        "--delivery-rate-limit", type=int, default=None, help="deliveries per webhook per minute (60)"
    )
    p.add_argument(
        "--auth-failure-limit", type=int, default=None, help="failed auths per webhook per minute (30)"
    )
    p.add_argument(
        "--client-auth-failure-limit",
        type=int,
        default=None,
        help="failed API-key authentications per client address per minute, API and console (30)",
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=None,
        metavar="CIDR",
        help="a reverse proxy whose X-Forwarded-For names the client address (repeatable)",
    )
    p.add_argument("--max-body-bytes", type=int, default=None, help="largest accepted body (262144)")
    p.add_argument(
        "--delivery-retention-days",
        type=float,
        default=None,
        help="delivery log days kept (7; 0.5 = 12 hours)",
    )
    p.add_argument(
        "--delivery-retention-count", type=int, default=None, help="delivery log entries kept (50)"
    )
    p.add_argument(
        "--run-retention-days",
        type=float,
        default=None,
        metavar="N",
        help="finished runs kept this many days, with their events, logs and artifacts (30; 0 = for ever; "
        "0.25 = 6 hours; env FACTORY_RUN_RETENTION_DAYS)",
    )
    add_log_format_flag(p)
    p.add_argument(
        "--skills-source", default=None, help="skills repository template, e.g. /srv/git/{owner}/{repo}"
    )
    p.add_argument(
        "--notification-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="deadline of one notification attempt (15; a claim lapses after twice this + 5 s)",
    )
    p.add_argument(
        "--notification-allow-loopback",
        action="store_true",
        default=None,
        help="let notifications reach this host's loopback (local development only: a team admin could "
        "then post to services that listen only there)",
    )
    p.add_argument("--team", default="default", help="team that owns factories applied from the source")
    p.add_argument(
        "--no-context",
        action="store_true",
        help="do not write the CLI context file (<data-dir>/context.json; docs/cli.md, 'CLI context')",
    )
    p.set_defaults(handler=_serve)


def _serve(ctx: CliContext, args: argparse.Namespace) -> int:
    if not start_logging(ctx, args.log_format):
        return 2
    if args.log_format:  # secondaries get the primary's environment, not its flags
        ctx.env["FACTORY_LOG_FORMAT"] = args.log_format
    if args.secondary is not None:  # its configuration comes from the primary, not from flags or env
        from factoryctl.serve.secondaries import run_secondary

        try:
            return asyncio.run(run_secondary(args.secondary))
        except KeyboardInterrupt:
            return 0
    from factoryctl.serve.options import ServeOptions
    from factoryctl.serve.process import run_server

    try:
        options = ServeOptions.from_args(ctx, args)
        _check_git_locations(options.git_url, options.branch, options.settings.skills_source)
    except ValueError as exc:  # safegit.UnsafeLocation is one too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.no_context and options.settings.port != 0:  # port 0: the URL is known only later
        write_context(ctx, options.settings.host, options.settings.port)
    try:
        return asyncio.run(run_server(ctx, options))
    except KeyboardInterrupt:
        return 0


def _check_git_locations(git_url: str | None, branch: str, skills_source: str | None) -> None:
    """Refuse, before anything starts, a ``--git`` URL, ``--branch`` or ``--skills-source`` template that
    git must not be given: an option (``--upload-pack=CMD``), a remote helper (``ext::``), a transport
    not allowed (docs/operations.md, "Git URLs"). Raises :class:`safegit.UnsafeLocation` (a ValueError)."""
    import safegit
    from api.runs.skills import check_source_template

    if git_url is not None:
        safegit.check_location(git_url, safegit.GIT_SOURCE)
        safegit.check_branch(branch)
    if skills_source:
        check_source_template(skills_source)


def write_context(ctx: CliContext, host: str, port: int) -> None:
    """Tell later commands where this server, its admin key file and its data directory are
    (:mod:`factoryctl.context_file`). A context that cannot be written is a warning: the
    server works without it."""
    from pathlib import Path

    from factoryctl.context_file import server_url, write
    from factoryctl.serve.process import ADMIN_KEY_FILE

    try:
        write(ctx.data_dir, server_url(host, port), ctx.data_dir / ADMIN_KEY_FILE, Path.cwd())
    except OSError as exc:
        print(f"warning: the CLI context was not written: {exc}", file=sys.stderr)
