"""Which MCP servers a run may have: who chooses the programs a worker starts (docs/agent-config.md,
"MCP servers").

An MCP-capable agent CLI starts every stdio server of the workspace's ``.mcp.json``, so a server's
``command`` is a program the worker runs with the run's secrets beside it. The rule:

- a run's ``mcp_servers`` (from any layer: the request, an automation, a factory agent, a schedule) maps a
  name to ``{url, headers?}`` or to ``{warp_id: NAME}``, never to a command (:func:`server_problems`);
- commands are defined by admins, on an environment (``mcpServers`` in ``environments/<name>.yaml`` or
  over the admin-only environments API), and ``{warp_id: NAME}`` references the server ``NAME`` of the
  run's environment — the SDK's reference to a team's shared server;
- every URL, a run's or an environment's, passes the outbound address rules of notification endpoints
  (:func:`store.rules.urlpolicy.url_refusal`, docs/notifications.md): https (http only to loopback), no
  credentials, no private, link-local or reserved literal address.

:func:`expand` turns a run's servers into what the worker writes, from the environment as it is now. It
runs at creation (problems are 422s) and at every claim (problems become ``{"error": ...}`` entries: the
claim fails the run, :func:`api.claims.payload.complete_claim`), so a run stored before this rule, or by
any path that skipped it, still starts no program its creator chose. A command entry carries
:data:`DEFINED_BY` (the environment's name): the worker writes no command without it
(:func:`factoryctl.worker.workspace.mcp_config`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from store.rules import urlpolicy

ENVIRONMENT_KEY = "mcpServers"  # an environment's admin-defined servers
REFERENCE = "warp_id"  # a run's reference to one of them
DEFINED_BY = "environment"  # on a claim's command entry: the environment that defined it
SERVER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
RUN_TRANSPORTS: dict[str, tuple[str, ...]] = {"url": ("headers",), REFERENCE: ()}
COMMAND_REFUSED = (
    "a run may not start a command: an admin defines stdio MCP servers on an environment (mcpServers in "
    "environments/<name>.yaml, or PUT /api/v1/environments/{name}), and a run references one by name as "
    "{warp_id: NAME} with that environment_id (docs/agent-config.md, 'MCP servers')"
)


def url_problem(url: str) -> str | None:
    """Why an MCP server may not be at ``url`` (the notification endpoints' rule), or None."""
    refusal = urlpolicy.url_refusal(url)
    return None if refusal is None else f"MCP server URL refused: {refusal}"


def server_problems(server: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, message)`` for what a run's server may not say: a command (and its ``args``/``env``), a URL
    the outbound address rules refuse. Shapes are the caller's to check (``api.runs.config``)."""
    if "command" in server:
        return [("command", COMMAND_REFUSED)]
    url = server.get("url")
    problem = url_problem(url) if isinstance(url, str) else None
    return [("url", problem)] if problem else []


def environment_problems(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, message)`` for each URL of an environment's ``mcpServers`` the address rules refuse (the
    environments API's 422; the reconciler reports the same rule as FC080)."""
    servers = spec.get(ENVIRONMENT_KEY)
    out = []
    for name, server in (servers if isinstance(servers, Mapping) else {}).items():
        url = server.get("url") if isinstance(server, Mapping) else None
        problem = url_problem(url) if isinstance(url, str) else None
        if problem:
            out.append((f"{ENVIRONMENT_KEY}.{name}.url", problem))
    return out


@dataclass
class Expanded:
    """A run's servers as the worker writes them, and why some cannot be (``(field, message)``, the field
    relative to ``mcp_servers``; such a server's entry is ``{"error": message}``)."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def refuse(self, name: str, key: str, message: str) -> None:
        self.servers[name] = {"error": message}
        self.problems.append((f"{name}.{key}" if key else name, message))


def expand(servers: Any, environment: str | None, environment_spec: Mapping[str, Any] | None) -> Expanded:
    """The run's ``mcp_servers`` with every reference replaced by the environment's definition.

    ``environment`` is the run's ``environment_id`` as the store names it, ``environment_spec`` its spec
    (None: the run has no environment, or it no longer exists).
    """
    out = Expanded()
    for name, server in (servers if isinstance(servers, Mapping) else {}).items():
        name = str(name)
        if not isinstance(server, Mapping):
            out.refuse(name, "", "must be an object: {url, headers?} or {warp_id}")
            continue
        problems = server_problems(server)
        if problems:
            out.refuse(name, *problems[0])
        elif isinstance(server.get("url"), str):
            out.servers[name] = _http(server)
        elif isinstance(server.get(REFERENCE), str):
            _resolve(out, name, server[REFERENCE], environment, environment_spec)
        else:
            out.refuse(name, "", "needs one transport: {url, headers?} or {warp_id}")
    return out


def _resolve(
    out: Expanded, name: str, ref: str, environment: str | None, spec: Mapping[str, Any] | None
) -> None:
    if environment is None:
        message = f"refers to the MCP server {ref!r}, but the run has no environment: set environment_id"
        out.refuse(name, REFERENCE, f"{message} to the environment that defines it")
        return
    if spec is None:
        out.refuse(name, REFERENCE, f"environment {environment!r} does not exist")
        return
    defined = spec.get(ENVIRONMENT_KEY)
    defined = defined if isinstance(defined, Mapping) else {}
    server = defined.get(ref)
    if not isinstance(server, Mapping):
        names = ", ".join(sorted(map(str, defined))) or "none"
        out.refuse(
            name, REFERENCE, f"environment {environment!r} defines no MCP server {ref!r} (defined: {names})"
        )
        return
    if isinstance(server.get("command"), str):
        entry: dict[str, Any] = {
            "command": server["command"],
            "args": [str(a) for a in server.get("args") or []],
        }
        if isinstance(server.get("env"), Mapping):
            entry["env"] = {str(k): str(v) for k, v in server["env"].items()}
        out.servers[name] = {**entry, DEFINED_BY: environment}
        return
    problem = url_problem(server["url"]) if isinstance(server.get("url"), str) else "has no command or url"
    if problem:
        out.refuse(name, REFERENCE, f"environment {environment!r}'s MCP server {ref!r}: {problem}")
        return
    out.servers[name] = _http(server)


def _http(server: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"url": server["url"]}
    if isinstance(server.get("headers"), Mapping):
        entry["headers"] = {str(k): str(v) for k, v in server["headers"].items()}
    return entry
