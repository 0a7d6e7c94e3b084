"""Worker-side resolution of a claimed run's secret references (docs/agent-config.md).

The claim answer names secrets but never carries their values: the environment lists
``secret_refs`` (team secret names), MCP ``env``/``headers`` values may be ``secret:NAME``, and the run's
own config grants ``secrets`` (and ``harness.auth.secret_name`` when ``harness.auth.source`` is
``managedSecret``), which become variables of its setup commands and harness (``run_secrets``).
:func:`resolve_claim` turns them into concrete values right before the job is built, inside the
worker, through a :class:`SecretSource`. The values then live only in the worker's memory, the
harness environment and the 0600 ``.mcp.json``; the run API never returns them.

Sources: ``StoreSecrets`` (:mod:`factoryctl.serve.local_workers`) for service-hosted workers,
which share the server's store and key; :class:`RemoteSecrets` for self-hosted workers, which ask
the control plane's lease-bound ``POST /api/v1/workers/runs/{id}/secrets`` (the server decides
which secrets the run may see);
:class:`NoSecrets` where neither is available.

Every resolved value is also listed under ``secret_values`` in the returned claim, so the job
redacts MCP secrets from run output just like environment secrets.

A secret name becomes an environment variable of the same name; characters an environment
variable name cannot hold (``.``, ``-``) become ``_``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from factoryctl.worker import EnvironmentSetupFailed

SECRET_PREFIX = "secret:"  # noqa: S105 - a reference prefix, not a secret


class SecretSource(Protocol):
    async def fetch(self, run_id: str, names: list[str]) -> dict[str, str]:
        """The current values of the named team secrets of the run's team; raises on a missing one."""


SecretsFetcher = Callable[[str], Awaitable[Mapping[str, str]]]
"""``run_id`` → every secret value the server lets this run's lease holder read."""


class RemoteSecrets:
    """Secrets fetched from the control plane for the run being prepared (self-hosted workers).

    ``fetch_run_secrets`` is one request per run; the server answers only the secrets the run
    references. A referenced name missing from the answer was deleted since the run was created.
    """

    def __init__(self, fetch_run_secrets: SecretsFetcher) -> None:
        self.fetch_run_secrets = fetch_run_secrets

    async def fetch(self, run_id: str, names: list[str]) -> dict[str, str]:
        if not names:
            return {}
        available = await self.fetch_run_secrets(run_id)
        missing = sorted(n for n in names if n not in available)
        if missing:
            raise EnvironmentSetupFailed(
                f"team secret {missing[0]!r} does not exist"
                + (f" (nor {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else "")
            )
        return {n: str(available[n]) for n in names}


class NoSecrets:
    """For workers without a way to read secrets: any reference fails the run with a clear message."""

    async def fetch(self, run_id: str, names: list[str]) -> dict[str, str]:
        if not names:
            return {}
        raise EnvironmentSetupFailed(
            f"this worker cannot resolve team secrets ({', '.join(sorted(names))}); runs that reference "
            "secrets need a service-hosted worker"
        )


def env_var_name(secret_name: str) -> str:
    """The environment variable a team secret is injected as."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", secret_name)
    return f"_{name}" if name[:1].isdigit() else name


def secret_refs(run: Mapping[str, Any]) -> list[str]:
    """Every team secret name the claimed run references (environment and MCP servers)."""
    names: set[str] = set()
    environment = run.get("environment")
    if isinstance(environment, Mapping):
        names.update(str(n) for n in environment.get("secret_refs") or [] if isinstance(n, str))
    for _server, _key, _var, ref in _mcp_refs(_mcp_servers(run)):
        names.add(ref)
    names.update(run_secret_names(run))
    return sorted(names)


def run_secret_names(run: Mapping[str, Any]) -> list[str]:
    """The secrets the run's config grants it (``secrets``, then a ``managedSecret`` harness auth's), as
    the claim names them (``secret_refs``: the server computes them, docs/workers.md "Secrets")."""
    refs = run.get("secret_refs")
    return [n for n in refs if isinstance(n, str) and n] if isinstance(refs, list) else []


async def resolve_claim(run: Mapping[str, Any], source: SecretSource) -> dict[str, Any]:
    """A copy of the claim's ``run`` with secret references replaced by values.

    Raises :class:`EnvironmentSetupFailed` when the environment no longer exists or a secret cannot
    be read: the caller ends the run FAILED ``environment_setup_failed``.
    """
    out = copy.deepcopy(dict(run))
    environment = out.get("environment")
    if isinstance(environment, dict) and environment.get("error"):
        raise EnvironmentSetupFailed(str(environment["error"]))
    names = secret_refs(out)
    values = await source.fetch(str(out.get("run_id")), names) if names else {}
    if isinstance(environment, dict):
        refs = [n for n in environment.pop("secret_refs", None) or [] if isinstance(n, str)]
        environment["secrets"] = {env_var_name(n): values[n] for n in refs}
    servers = _mcp_servers(out)
    if servers:
        resolved = copy.deepcopy(servers)
        for server, key, var, ref in _mcp_refs(servers):
            resolved[server][key][var] = values[ref]
        out["mcp_servers"] = resolved
    out["run_secrets"] = {env_var_name(n): values[n] for n in run_secret_names(out)}
    out["secret_values"] = sorted(set(values.values()))
    return out


def _mcp_servers(run: Mapping[str, Any]) -> dict[str, Any]:
    servers = run.get("mcp_servers")
    if servers is None:
        config = run.get("agent_config")
        servers = config.get("mcp_servers") if isinstance(config, Mapping) else None
    return dict(servers) if isinstance(servers, Mapping) else {}


def _mcp_refs(servers: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    found = []
    for name, server in servers.items():
        if not isinstance(server, Mapping):
            continue
        for key in ("env", "headers"):
            values = server.get(key)
            if not isinstance(values, Mapping):
                continue
            for var, value in values.items():
                if isinstance(value, str) and value.startswith(SECRET_PREFIX):
                    found.append((str(name), key, str(var), value[len(SECRET_PREFIX) :].strip()))
    return found
