"""AmbientAgentConfig: resolution across layers and validation of what callers send (docs/agent-config.md).

Resolution is key by key: the run request's ``config`` wins over the automation's ``config``, which
wins over the factory agent's defaults (``factory.yaml`` ``agents.<name>``), which win over server
defaults. A key whose value is ``null`` counts as absent in that layer (it does not clear a lower
layer). The nested maps ``mcp_servers`` and ``harness`` are replaced whole, never merged: a layer
that names MCP servers names all of them, so a run never gets a server its caller did not see.

Validation rejects unknown keys (422, listing the allowed ones): top-level request fields are
ignored when unknown, but a misspelt config key (``model`` for ``model_id``) silently running with
defaults is worse than an error. Only the request layer is validated here; the other layers were
checked when their definitions applied, and unknown keys in them are dropped on resolution.

A skill spec is also checked for what the resolver refuses (``..``, absolute paths: the same function,
:func:`api.runs.skills.parse_skill_spec`), and so is each of ``skills``, the SDK's ordered list whose first
is the run's primary skill (:mod:`api.runs.skill_list`). ``harness`` may only choose the ``type`` (with the
SDK's ``model_id`` and ``reasoning_level``) — the command a worker runs is the worker's own, and
definitions refuse ``harness.command`` the same way (docs/definitions.md).
Likewise an MCP server may not name a ``command`` (only an environment defines one, a run references it by
name) and its URL obeys the outbound address rules: :mod:`api.runs.mcp`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.http.bodies import field_error
from api.runs import mcp
from api.runs.skill_list import is_spec, spec_problem, validate_skills, with_primary

CONFIG_KEYS = (
    "name",
    "model_id",
    "base_prompt",
    "environment_id",
    "worker_host",
    "skill_spec",
    "skills",
    "mcp_servers",
    "harness",
    "harness_auth_secrets",
)
# The SDK's AmbientAgentConfig keys this server does not implement: a request naming one gets a 422 that
# says so, never "unknown key" (docs/agent-config.md, "The SDK's keys").
UNSUPPORTED_KEYS = (
    "computer_use_enabled",
    "computer_use_model_id",
    "credential_strategy",
    "idle_timeout_minutes",
    "inference_providers",
    "memory_stores",
    "runner_id",
    "session_sharing",
)
# harness_auth_secrets: the managed secret that is each preset's credential (the SDK's two, and gemini's).
AUTH_SECRET_KEYS = {
    "claude": "claude_auth_secret_name",
    "codex": "codex_auth_secret_name",
    "gemini": "gemini_auth_secret_name",
}
# Keys only definitions set (an automation, its agent), never a run request (docs/agent-config.md). Their
# ``skills`` (object names) share the request's key (skill specs): api/runs/skill_list.py tells them apart.
DEFINITION_KEYS = ("runner", "secrets")
# The agent CLI presets (docs/agents.md): a run asking for one is claimed only by a worker offering it.
PRESET_HARNESSES = ("claude", "codex", "gemini")
HARNESS_TYPES = ("oz", "echo", "command", *PRESET_HARNESSES)  # oz: the worker's default (the SDKs' default)
HARNESS_KEYS = ("type", "model_id", "reasoning_level")  # the SDK's harness fields a run may set
SERVICE_HOSTED = "warp"  # the literal worker_host that means "service-hosted workers"

_SHORT_KEYS = {"name": 200, "model_id": 200, "environment_id": 200, "worker_host": 200}
MAX_BASE_PROMPT = 100_000
MAX_MCP_SERVERS = 50


def resolve_config(
    request: Mapping[str, Any] | None,
    automation: Mapping[str, Any] | None,
    agent_defaults: Mapping[str, Any] | None,
    server_defaults: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The effective config: for each known key, the first layer that sets it (non-null) wins.

    ``harness`` merges field by field, from the lowest layer up: a layer's fields override the ones below,
    and a layer naming another ``type`` starts afresh (drops the inherited ``auth`` and ``reasoning_level``)
    (docs/definitions.md, "Inheritance"). :data:`DEFINITION_KEYS` come from the lower layers only: a run
    request cannot set them (its validation refuses them too). A ``skills`` list of specs makes its first
    the ``skill_spec`` (:func:`api.runs.skill_list.with_primary`).
    """
    layers = [layer for layer in (request, automation, agent_defaults, server_defaults) if layer]
    defined = [layer for layer in (automation, agent_defaults, server_defaults) if layer]
    resolved: dict[str, Any] = {}
    for keys, among in ((CONFIG_KEYS, layers), (DEFINITION_KEYS, defined)):
        for key in keys:
            if key == "skills":
                continue
            for layer in among:
                value = layer.get(key)
                if value is not None:
                    resolved[key] = _copy(value)
                    break
    skills = _skills(request, defined)
    if skills:
        resolved["skills"] = skills
    harness = merged_harness(layers)
    if harness:
        resolved["harness"] = harness
    return with_auth_secret(with_primary(resolved))


def _skills(request: Mapping[str, Any] | None, defined: list[Mapping[str, Any]]) -> list[str]:
    """The run's ``skills``: the request's skill specs (the SDK's list), then the skill object names of the
    first definition layer naming any. Neither displaces the other: a request never drops or replaces the
    skills its agent was defined with."""
    requested = request.get("skills") if request else None
    specs = [s for s in requested if is_spec(s)] if isinstance(requested, list) else []
    names: list[str] = []
    for layer in defined:
        value = layer.get("skills")
        if value is not None:
            if isinstance(value, list):
                names = [n for n in value if isinstance(n, str) and not is_spec(n)]
            break
    return [*specs, *names]


def with_auth_secret(config: dict[str, Any]) -> dict[str, Any]:
    """``harness_auth_secrets`` (the SDK's spelling) as the harness's own ``auth``, the one form workers and
    presets read: the named secret of the run's preset becomes ``{source: managedSecret, secret_name}``
    unless the harness already names an ``auth``."""
    secrets = config.get("harness_auth_secrets")
    harness = config.get("harness")
    if not isinstance(secrets, Mapping) or not isinstance(harness, Mapping) or harness.get("auth"):
        return config
    name = secrets.get(AUTH_SECRET_KEYS.get(str(harness.get("type")), ""))
    if isinstance(name, str) and name:
        config["harness"] = {**harness, "auth": {"source": "managedSecret", "secret_name": name}}
    return config


def merged_harness(layers: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``harness`` of ``layers`` (highest first) merged field by field; ``{}`` when none sets one."""
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        harness = layer.get("harness")
        if not isinstance(harness, Mapping):
            continue
        if harness.get("type") not in (None, merged.get("type")):
            merged = {}  # another harness: the inherited auth and reasoning level were for the old one
        merged.update({k: _copy(v) for k, v in harness.items() if v is not None})
    return merged


def automation_config(
    config: Mapping[str, Any] | None,
    agent: str,
    factory_agents: Mapping[str, Any] | None,
    factory_worker_host: str | None,
) -> dict[str, Any]:
    """An automation's run config: its ``config`` over its factory agent's defaults, then the factory's
    ``workerHost`` when neither names a host. One function for every path that starts an automation's
    run (webhook ingress, scheduled agents), so they cannot drift apart."""
    defaults = (factory_agents or {}).get(agent)
    resolved = resolve_config(None, config, defaults if isinstance(defaults, Mapping) else None, None)
    if not resolved.get("worker_host") and factory_worker_host:
        resolved["worker_host"] = factory_worker_host
    return resolved


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def validate_config(obj: Any, *, field: str = "config") -> list[dict[str, Any]]:
    """Field errors (``{field, message}``) of a request's AmbientAgentConfig; empty when valid."""
    if obj is None:
        return []
    if not isinstance(obj, Mapping):
        return [field_error(field, "must be an object")]
    errors: list[dict[str, Any]] = []
    for key in obj:
        if key in UNSUPPORTED_KEYS:
            errors.append(
                field_error(
                    f"{field}.{key}",
                    "a known AmbientAgentConfig key that this server does not support"
                    ' (docs/agent-config.md, "The SDK\'s keys")',
                )
            )
        elif key not in CONFIG_KEYS:
            errors.append(
                field_error(f"{field}.{key}", f"unknown config key; allowed: {', '.join(CONFIG_KEYS)}")
            )
    errors += _check_auth_secrets(obj.get("harness_auth_secrets"), f"{field}.harness_auth_secrets")
    for key, limit in _SHORT_KEYS.items():
        errors += _check_string(obj.get(key), f"{field}.{key}", max_len=limit)
    errors += _check_string(obj.get("base_prompt"), f"{field}.base_prompt", max_len=MAX_BASE_PROMPT)
    skill = obj.get("skill_spec")
    skill_errors = _check_string(skill, f"{field}.skill_spec", max_len=500)
    if not skill_errors and skill is not None:
        problem = spec_problem(skill)
        if problem is not None:
            skill_errors.append(field_error(f"{field}.skill_spec", problem))
    errors += skill_errors + validate_skills(obj, field)
    errors += validate_mcp_servers(obj.get("mcp_servers"), field=f"{field}.mcp_servers")
    errors += _check_harness(obj.get("harness"), f"{field}.harness")
    return errors


def _check_auth_secrets(value: Any, where: str) -> list[dict[str, Any]]:
    """``{claude_auth_secret_name?, codex_auth_secret_name?, gemini_auth_secret_name?}``: secret names."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [field_error(where, "must be an object")]
    errors = [
        field_error(f"{where}.{key}", f"unknown key; allowed: {', '.join(AUTH_SECRET_KEYS.values())}")
        for key in value
        if key not in AUTH_SECRET_KEYS.values()
    ]
    for key in AUTH_SECRET_KEYS.values():
        errors += _check_string(value.get(key), f"{where}.{key}", max_len=200)
    return errors


def validate_skill_spec(value: str) -> bool:
    return spec_problem(value) is None


def validate_mcp_servers(value: Any, *, field: str = "mcp_servers") -> list[dict[str, Any]]:
    """A map of name -> MCPServerConfig with exactly one transport: url or warp_id (a command is refused)."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [field_error(field, "must be an object mapping server names to MCPServerConfig")]
    if len(value) > MAX_MCP_SERVERS:
        return [field_error(field, f"at most {MAX_MCP_SERVERS} servers")]
    errors: list[dict[str, Any]] = []
    for name, server in value.items():
        where = f"{field}.{name}"
        if not mcp.SERVER_NAME.match(str(name)):
            errors.append(field_error(where, "server names must match [A-Za-z0-9._-]{1,64}"))
            continue
        errors += _check_mcp_server(server, where)
    return errors


def _check_mcp_server(server: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(server, Mapping):
        return [field_error(where, "must be an object: {url, headers?} | {warp_id}")]
    if "command" in server:  # the program a worker would start: never the caller's choice
        return [field_error(f"{where}.{key}", why) for key, why in mcp.server_problems(server)]
    present = [t for t in mcp.RUN_TRANSPORTS if t in server]
    if len(present) != 1:
        found = ", ".join(present) if present else "none"
        return [field_error(where, f"exactly one transport of url, warp_id is required (found: {found})")]
    transport = present[0]
    allowed = {transport, *mcp.RUN_TRANSPORTS[transport]}
    errors = [
        field_error(
            f"{where}.{key}",
            f"not allowed with the {transport!r} transport; allowed: {', '.join(sorted(allowed))}",
        )
        for key in server
        if key not in allowed
    ]
    errors += _check_string(server.get(transport), f"{where}.{transport}", max_len=2000, required=True)
    if (
        transport == "url"
        and isinstance(server.get("url"), str)
        and not server["url"].startswith(("http://", "https://"))
    ):
        errors.append(field_error(f"{where}.url", "must be an http:// or https:// URL"))
    headers = server.get("headers")
    if headers is not None and (
        not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values())
    ):
        errors.append(field_error(f"{where}.headers", "must be an object of string values"))
    if not errors:  # a well-formed URL the outbound address rules refuse (secret: headers never go there)
        errors += [field_error(f"{where}.{key}", why) for key, why in mcp.server_problems(server)]
    return errors


def _check_harness(value: Any, where: str) -> list[dict[str, Any]]:
    # Only the harness *type* may be chosen per run: the command a worker executes is the worker's
    # own configuration, so an API caller can never make a worker run an arbitrary program.
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [field_error(where, f"must be an object {{type: {'|'.join(HARNESS_TYPES)}}}")]
    errors = [
        field_error(f"{where}.{key}", f"unknown harness key; allowed: {', '.join(HARNESS_KEYS)}")
        for key in value
        if key not in HARNESS_KEYS
    ]
    if value.get("type") not in HARNESS_TYPES:
        errors.append(field_error(f"{where}.type", f"must be one of {', '.join(HARNESS_TYPES)}"))
    for key in ("model_id", "reasoning_level"):
        errors += _check_string(value.get(key), f"{where}.{key}", max_len=200)
    return errors


def preset_of(config: Mapping[str, Any]) -> str:
    """The agent CLI preset a run's resolved config needs (``runs.harness_type``): ``claude``, ``codex`` or
    ``gemini``; ``""`` for every other harness (oz, echo, command, none), which any worker may run."""
    harness = config.get("harness")
    kind = harness.get("type") if isinstance(harness, Mapping) else None
    return kind if isinstance(kind, str) and kind in PRESET_HARNESSES else ""


def _check_string(value: Any, where: str, *, max_len: int, required: bool = False) -> list[dict[str, Any]]:
    if value is None:
        return [field_error(where, "is required")] if required else []
    if not isinstance(value, str):
        return [field_error(where, "must be a string")]
    if not value.strip():
        return [field_error(where, "must not be empty")]
    if len(value) > max_len:
        return [field_error(where, f"must be at most {max_len} characters")]
    return []


def worker_host_of(value: str | None) -> str:
    """The stored worker host: ``""`` (service-hosted) for None, empty or the literal ``warp``."""
    if value is None:
        return ""
    value = value.strip()
    return "" if value in ("", SERVICE_HOSTED) else value
