"""``factoryctl serve``'s options: flags first, then ``FACTORY_*`` variables, then defaults - read once, at
the CLI edge, and handed to the processes as a :class:`ServeOptions`."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api.auth_failures import parse_networks
from api.context import ServerSettings
from api.notifications.policy import NotificationSettings
from api.runs.retention import RetentionSettings
from factoryctl.context import CliContext
from factoryctl.serve.group import parse_processes
from factoryctl.worker.limits import Limits, limits_from
from factoryctl.worker.presets.registry import AgentCli, AgentCliProblem, agents_for, parse_agent_cli
from factoryctl.worker.sandbox import DEFAULT_BWRAP, check_layout

HARNESS_CHOICES = ("echo", "command", "claude", "codex", "gemini")


def trusted_proxies(flags: list[str] | None, env_value: str) -> tuple[str, ...]:
    """``--trusted-proxy`` (repeatable), else ``FACTORY_TRUSTED_PROXIES`` (comma-separated): CIDRs or
    addresses, checked here so a typo stops the start (docs/operations.md, "Behind a reverse proxy")."""
    return tuple(str(net) for net in parse_networks(flags if flags else env_value.split(",")))


def parse_duration(value: str) -> float:
    """``30``, ``30s``, ``1m``, ``500ms`` -> seconds."""
    text = value.strip().lower()
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


@dataclass
class ServeOptions:
    settings: ServerSettings
    team: str = "default"
    repo: Path | None = None
    git_url: str | None = None
    branch: str = "main"
    poll_interval: float = 30.0
    self_heal: bool = True  # --no-self-heal: report drift only (docs/reconcile.md, "Self-heal")
    workers: int = 2
    processes: int = 1  # --processes: 1 primary + (processes - 1) secondaries (docs/operations.md)
    # --worker-process: the service-hosted workers in a child process of their own (docs/operations.md,
    # "Workers in their own process").
    worker_process: bool = True
    harness: str = "echo"
    harness_command: str | None = None
    # The --harness preset's CLI, found and version-checked at start (docs/workers.md, "Harnesses").
    agents: dict[str, AgentCli] = field(default_factory=dict)
    # Service-hosted runs: their workspaces (None: a private temp directory) and the sandbox their
    # run-controlled processes start in (docs/workers.md, "Sandbox").
    workspace_dir: Path | None = None
    bwrap: str = DEFAULT_BWRAP
    sandbox_ro: tuple[Path, ...] = ()
    sandbox_rw: tuple[Path, ...] = ()
    # What an environment's network policy may ask of the shared machine (docs/workers.md, "Network").
    sandbox_open_network: bool = False
    sandbox_private_egress: bool = False
    guarded: tuple[Path, ...] = ()  # never within a run's reach: the data dir, a SQLite database's dir
    agent_env: tuple[str, ...] = ()  # --agent-env: server variables service-hosted runs also get
    limits: Limits = field(default_factory=Limits)  # per service-hosted run (docs/workers.md, "Limits")
    db_connect_attempts: int = 8
    env: dict[str, str] = field(default_factory=dict)  # the CLI's environment (agents get it scrubbed)
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    # What the maintenance job deletes, and when (docs/operations.md, "Retention").
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_args(cls, ctx: CliContext, args: argparse.Namespace) -> ServeOptions:
        env = ctx.env

        def pick(flag: Any, name: str, default: Any, cast: Any = str) -> Any:
            if flag is not None:
                return flag
            raw = env.get(f"FACTORY_{name}")
            return cast(raw) if raw not in (None, "") else default

        settings = ServerSettings(
            data_dir=ctx.data_dir,
            host=pick(args.host, "HOST", "127.0.0.1"),
            port=pick(args.port, "PORT", 8080, int),
            public_url=pick(args.public_url, "PUBLIC_URL", None),
            delivery_rate_limit=pick(args.delivery_rate_limit, "DELIVERY_RATE_LIMIT", 60, int),
            auth_failure_limit=pick(args.auth_failure_limit, "AUTH_FAILURE_LIMIT", 30, int),
            client_auth_failure_limit=pick(
                args.client_auth_failure_limit, "CLIENT_AUTH_FAILURE_LIMIT", 30, int
            ),
            trusted_proxies=trusted_proxies(args.trusted_proxy, env.get("FACTORY_TRUSTED_PROXIES", "")),
            max_body_bytes=pick(args.max_body_bytes, "MAX_BODY_BYTES", 262_144, int),
            delivery_retention_days=pick(args.delivery_retention_days, "DELIVERY_RETENTION_DAYS", 7.0, float),
            delivery_retention_count=pick(args.delivery_retention_count, "DELIVERY_RETENTION_COUNT", 50, int),
            skills_source=pick(args.skills_source, "SKILLS_SOURCE", None),
            skills_cache_max_bytes=pick(None, "SKILLS_CACHE_MAX_BYTES", 512 * 1024 * 1024, int),
            skills_cache_max_entries=pick(None, "SKILLS_CACHE_MAX_ENTRIES", 64, int),
            skills_clone_max_bytes=pick(None, "SKILLS_CLONE_MAX_BYTES", 64 * 1024 * 1024, int),
            skills_failure_seconds=pick(None, "SKILLS_FAILURE_SECONDS", 60.0, float),
            run_log_max_lines=pick(None, "RUN_LOG_MAX_LINES", 100_000, int),
            run_log_max_bytes=pick(None, "RUN_LOG_MAX_BYTES", 16 * 1024 * 1024, int),
            followups_max_pending=pick(None, "FOLLOWUPS_MAX_PENDING", 20, int),
            followups_max_pending_bytes=pick(None, "FOLLOWUPS_MAX_PENDING_BYTES", 1_048_576, int),
            run_log_retention_days=pick(None, "RUN_LOG_RETENTION_DAYS", 30, int),
        )
        # Settings with a flag are named by it; the rest exist only as FACTORY_* variables.
        for name, label in (
            ("delivery_rate_limit", "--delivery-rate-limit"),
            ("auth_failure_limit", "--auth-failure-limit"),
            ("client_auth_failure_limit", "--client-auth-failure-limit"),
            ("max_body_bytes", "--max-body-bytes"),
            ("delivery_retention_count", "--delivery-retention-count"),
            ("run_log_max_lines", "FACTORY_RUN_LOG_MAX_LINES"),
            ("run_log_max_bytes", "FACTORY_RUN_LOG_MAX_BYTES"),
            ("followups_max_pending", "FACTORY_FOLLOWUPS_MAX_PENDING"),
            ("followups_max_pending_bytes", "FACTORY_FOLLOWUPS_MAX_PENDING_BYTES"),
            ("skills_cache_max_bytes", "FACTORY_SKILLS_CACHE_MAX_BYTES"),
            ("skills_cache_max_entries", "FACTORY_SKILLS_CACHE_MAX_ENTRIES"),
            ("skills_clone_max_bytes", "FACTORY_SKILLS_CLONE_MAX_BYTES"),
        ):
            if getattr(settings, name) < 1:
                raise ValueError(f"{label} must be at least 1")
        if settings.skills_failure_seconds < 0:
            raise ValueError("FACTORY_SKILLS_FAILURE_SECONDS must be 0 or more")
        if not 0 <= settings.delivery_retention_days <= 36_500:  # (a NaN fails too)
            raise ValueError("--delivery-retention-days must be 0 or days up to 36500")
        if settings.run_log_retention_days < 0:
            raise ValueError("FACTORY_RUN_LOG_RETENTION_DAYS must be 0 (keep run logs) or more")
        run_days = pick(getattr(args, "run_retention_days", None), "RUN_RETENTION_DAYS", 30.0, float)
        if not 0 <= run_days <= 36_500:  # (a NaN fails too; an infinity has no date)
            raise ValueError(
                "--run-retention-days must be 0 (keep runs for ever) or a number of days up to 36500"
            )
        retention = RetentionSettings(run_days=run_days, run_log_days=settings.run_log_retention_days)
        workers = pick(args.workers, "WORKERS", 2, int)
        if workers < 0:
            raise ValueError("--workers must be 0 or more")
        timeout = pick(args.notification_timeout, "NOTIFICATION_TIMEOUT", 15.0, float)
        if not 0.5 <= timeout <= 60:
            raise ValueError("--notification-timeout must be between 0.5 and 60 seconds")
        harness = pick(args.harness, "HARNESS", "echo")
        command = pick(args.harness_command, "COMMAND", None)
        if harness == "command" and not command:
            raise ValueError("--harness command needs --command CMD")
        if harness not in HARNESS_CHOICES:
            raise ValueError(f"FACTORY_HARNESS {harness!r}: expected one of {', '.join(HARNESS_CHOICES)}")
        agents: dict[str, AgentCli] = {}
        flags = getattr(args, "agent_cli", None) or [
            v for v in env.get("FACTORY_AGENT_CLI", "").split(",") if v
        ]
        if workers:  # only service-hosted workers run a preset's CLI
            try:
                agents = agents_for(harness, parse_agent_cli(flags), env=env)
            except AgentCliProblem as exc:
                raise ValueError(str(exc)) from exc
        processes = parse_processes(str(pick(args.processes, "PROCESSES", "1")))
        if processes > 1 and ctx.database_url.strip().lower().startswith("sqlite"):
            raise ValueError(
                f"--processes {processes} needs PostgreSQL (--database postgresql://...): a SQLite store "
                "has one writer, and ingress commits its deliveries in batches within one process; "
                "serve a SQLite store with --processes 1"
            )
        if processes > 1 and settings.port == 0:
            raise ValueError(f"--processes {processes} needs a fixed --port (each process listens on it)")
        workspace = pick(args.workspace_dir, "WORKSPACE_DIR", None)
        workspace_dir = Path(workspace).resolve() if workspace else None
        sandbox_ro, sandbox_rw = (
            tuple(Path(p).resolve() for p in (flag or env.get(f"FACTORY_{name}", "").split(os.pathsep)) if p)
            for flag, name in ((args.sandbox_ro, "SANDBOX_RO"), (args.sandbox_rw, "SANDBOX_RW"))
        )
        limits = limits_from(
            pick(getattr(args, "memory_limit", None), "MEMORY_LIMIT", None),
            pick(getattr(args, "process_limit", None), "PROCESS_LIMIT", None),
            pick(getattr(args, "disk_limit", None), "DISK_LIMIT", None),
            pick(getattr(args, "time_limit", None), "TIME_LIMIT", None),
        )
        guarded = guarded_paths(ctx)
        if workers:
            check_layout(guarded, workspace_dir, sandbox_ro, sandbox_rw)
        return cls(
            settings=settings,
            team=args.team,
            repo=Path(args.repo).resolve() if args.repo else None,
            git_url=args.git,
            branch=args.branch,
            poll_interval=parse_duration(args.poll_interval),
            self_heal=getattr(args, "self_heal", True),
            workers=workers,
            processes=processes,
            worker_process=bool(pick(getattr(args, "worker_process", None), "WORKER_PROCESS", True, _flag)),
            harness=harness,
            harness_command=command,
            agents=agents,
            workspace_dir=workspace_dir,
            bwrap=pick(args.bwrap, "BWRAP", DEFAULT_BWRAP),
            sandbox_ro=sandbox_ro,
            sandbox_rw=sandbox_rw,
            sandbox_open_network=pick(args.sandbox_open_network, "SANDBOX_OPEN_NETWORK", False, _flag),
            sandbox_private_egress=pick(args.sandbox_private_egress, "SANDBOX_PRIVATE_EGRESS", False, _flag),
            guarded=guarded,
            limits=limits,
            agent_env=tuple(args.agent_env or [n for n in env.get("FACTORY_AGENT_ENV", "").split(",") if n]),
            env=dict(env),
            db_connect_attempts=max(1, int(env.get("FACTORY_DB_CONNECT_ATTEMPTS") or 8)),
            retention=retention,
            notifications=NotificationSettings(
                timeout_seconds=timeout,
                connect_timeout_seconds=min(timeout, 5.0),
                # Off unless asked for: loopback services are the operator's, not a team's to reach.
                allow_loopback=bool(
                    pick(args.notification_allow_loopback, "NOTIFICATION_ALLOW_LOOPBACK", False, _flag)
                ),
            ),
        )


def _flag(text: str) -> bool:
    """A boolean ``FACTORY_*`` variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (1/0, true/false, yes/no, on/off)")


def guarded_paths(ctx: CliContext) -> tuple[Path, ...]:
    """What no run may reach: the data directory (key, database, mirrors, caches) and, for a SQLite
    store kept elsewhere, its database's directory."""
    from sqlalchemy.engine import make_url

    paths = [ctx.data_dir]
    url = make_url(ctx.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        paths.append(Path(url.database).resolve().parent)
    return tuple(paths)
