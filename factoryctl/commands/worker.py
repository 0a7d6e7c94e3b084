"""``factoryctl worker``: a self-hosted worker that claims runs for its host ID over HTTP.

Only the parser is built at import: the worker agent, the client (httpx) and asyncio are imported
when the command runs, so ``factoryctl --help`` and every other command do not pay for them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from factoryctl.context import CliContext

# The worker's own harnesses and the agent presets (factoryctl.worker.presets.registry.PRESET_TYPES),
# spelled out so the parser imports nothing of the worker.
HARNESS_CHOICES = ("echo", "command", "claude", "codex", "gemini")


def register(sub: Any) -> None:  # argparse subparsers
    p = sub.add_parser("worker", help="run a self-hosted worker for one worker host ID")
    p.add_argument("--server", default=None, metavar="URL", help="control plane URL (env FACTORY_API_URL)")
    p.add_argument("--host-id", required=True, metavar="ID", help="the worker host ID runs are routed to")
    p.add_argument(
        "--harness",
        choices=HARNESS_CHOICES,
        default="echo",
        help="default harness (echo); the worker offers echo, this one, and command with --command",
    )
    p.add_argument(
        "--command", dest="harness_command", default=None, metavar="CMD", help="command harness CLI"
    )
    p.add_argument(
        "--agent-cli",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="the CLI of the --harness preset (claude, codex, gemini) when it is not on PATH; checked "
        "with --version at start",
    )
    p.add_argument("--concurrency", type=int, default=1, metavar="N", help="runs executed at once (1)")
    p.add_argument("--workspace-root", default=None, metavar="DIR", help="run workspaces (default: temp dir)")
    p.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default="auto",
        help="where every run executes: auto = in bubblewrap when it works, else on this host (warned); "
        "bwrap = only in bubblewrap (the worker does not start without it, exit 2); none = on this host, "
        "unconfined (warned at start and on every run's log)",
    )
    add_limit_flags(p)
    add_log_format_flag(p)
    p.add_argument("--bwrap", default="bwrap", metavar="PATH", help="bubblewrap executable (bwrap)")
    p.add_argument("--sandbox-ro", action="append", default=[], metavar="DIR", help="read-only in sandboxes")
    p.add_argument("--sandbox-rw", action="append", default=[], metavar="DIR", help="writable in sandboxes")
    p.add_argument("--wait-seconds", type=float, default=20.0, help=argparse.SUPPRESS)
    p.set_defaults(handler=_worker)


def add_limit_flags(p: argparse.ArgumentParser) -> None:
    """The per-run limits (docs/workers.md, "Limits"); ``serve`` has the same flags."""
    p.add_argument(
        "--memory-limit", default=None, metavar="SIZE", help="memory of a run's processes (4G; 0 = none)"
    )
    p.add_argument(
        "--process-limit", default=None, metavar="N", help="processes of a run at once (512; 0 = none)"
    )
    p.add_argument(
        "--disk-limit", default=None, metavar="SIZE", help="a run's workspace size (10G; 0 = none)"
    )
    p.add_argument(
        "--time-limit",
        default=None,
        metavar="SECONDS",
        help="wall-clock time of a run's harness, besides its own timeout_seconds (default: none)",
    )


def add_log_format_flag(p: argparse.ArgumentParser) -> None:
    """``--log-format json|text`` (docs/operations.md, "Metrics and logs"); ``serve`` has it too."""
    p.add_argument(
        "--log-format",
        choices=("json", "text"),
        default=None,
        help="log lines on stderr: one JSON object each (json, the default) or text; env FACTORY_LOG_FORMAT",
    )


def start_logging(ctx: CliContext, flag: str | None) -> bool:
    """Configure log lines from ``--log-format``, else ``FACTORY_LOG_FORMAT``, else JSON; False (after a
    readable error) when the variable names no format."""
    from factoryctl import log_lines

    chosen = flag or ctx.env.get("FACTORY_LOG_FORMAT") or "json"
    try:
        log_lines.configure(chosen)
    except ValueError as exc:
        print(f"error: FACTORY_LOG_FORMAT: {exc}", file=sys.stderr)
        return False
    return True


def _worker(ctx: CliContext, args: argparse.Namespace) -> int:
    key = ctx.api_key()
    if not key:
        print(
            "error: set FACTORY_API_KEY to a worker key (factoryctl keys create --role worker)",
            file=sys.stderr,
        )
        return 2
    if args.concurrency < 1:
        print("error: --concurrency must be at least 1", file=sys.stderr)
        return 2
    if args.harness == "command" and not args.harness_command:
        print("error: --harness command needs --command CMD", file=sys.stderr)
        return 2
    host_id = args.host_id.strip()
    if not host_id or host_id == "warp":
        print("error: --host-id must name this worker (not empty, not 'warp')", file=sys.stderr)
        return 2
    import asyncio
    import dataclasses
    import logging
    from pathlib import Path

    from factoryctl.addresses import egress_refusal
    from factoryctl.worker.agent import RemoteWorker
    from factoryctl.worker.execution import scrubbed_environment
    from factoryctl.worker.limits import describe, limits_from
    from factoryctl.worker.presets.registry import AgentCliProblem, agents_for, parse_agent_cli
    from factoryctl.worker.sandbox import Sandbox, check_layout

    try:
        limits = limits_from(args.memory_limit, args.process_limit, args.disk_limit, args.time_limit)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # The preset's CLI is found and its version checked now: a missing or old CLI stops the worker here
    # rather than failing every run it claims (docs/workers.md, "Harnesses").
    try:
        agents = agents_for(args.harness, parse_agent_cli(args.agent_cli), env=ctx.env)
    except (ValueError, AgentCliProblem) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if not start_logging(ctx, args.log_format):
        return 2
    workspace_root = Path(args.workspace_root).resolve() if args.workspace_root else None
    read_only = [Path(p).resolve() for p in args.sandbox_ro]
    writable = [Path(p).resolve() for p in args.sandbox_rw]
    try:
        check_layout([], workspace_root, read_only, writable)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log = logging.getLogger("factoryctl.worker")
    sandbox = None
    if args.sandbox == "none":
        log.warning(
            "WARNING: --sandbox none: every run executes on this host as this user, with its files, keys "
            'and network in reach of the agent (docs/workers.md, "Sandbox"); each run\'s log says so too'
        )
    else:
        # A self-hosted worker's machine is its team's own: it honours open and listed private destinations.
        sandbox = Sandbox(args.bwrap, read_only=read_only, writable=writable, address_refusal=egress_refusal)
        problem = sandbox.problem()
        if problem is not None and args.sandbox == "bwrap":
            print(
                f"error: --sandbox bwrap, and bubblewrap does not work here: {problem}. Install it "
                "(apt-get install bubblewrap) or name it with --bwrap PATH",
                file=sys.stderr,
            )
            return 2
        if problem is not None:
            log.warning("WARNING: no sandbox (%s): runs execute on this host, unconfined", problem)
    log.info("run limits: %s", describe(limits))
    worker = RemoteWorker(
        ctx.api_url(args.server),
        key,
        host_id,
        harness=args.harness,
        command=args.harness_command,
        concurrency=args.concurrency,
        workspace_root=workspace_root,
        wait_seconds=args.wait_seconds,
        harness_env=scrubbed_environment(ctx.env),  # the agent never sees the worker's own key
        sandbox=sandbox,
        sandbox_required=args.sandbox == "bwrap",
        limits=limits,
    )
    worker.settings = dataclasses.replace(worker.settings, agents=agents)
    for cli in agents.values():
        logging.getLogger("factoryctl.worker").info(
            "harness %s: %s (version %s)", cli.preset.name, cli.executable, ".".join(map(str, cli.version))
        )
    try:
        return asyncio.run(worker.run_until_signalled())
    except KeyboardInterrupt:
        return 130
