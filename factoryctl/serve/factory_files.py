"""The answer of ``POST /api/v1/factory-files/validate`` in the product's shape (docs/api.md).

:func:`answer` turns what the loader and the rules found into ``{valid, schema_version, diagnostics,
deferred_resolutions, state_dependent_checks_not_run, validation_scope}``. Each diagnostic's ``code`` is the
product's ``FF_*`` code where one clearly corresponds, else factoryctl's own rule ID; ``rule``,
``severity`` and ``hint`` are factoryctl extensions, so ``factoryctl validate --server`` prints exactly
what a local run prints. ``valid`` ignores warnings.

:func:`deferred_resolutions` lists the names the offline tiers cannot resolve (secrets, environment IDs,
runners, MCP ``warpId``s, Slack/Linear names): it reads the loaded definition defensively, because the
definition kinds keep growing; add a kind by adding a few lines there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

from reconciler.diagnostics import Diagnostic
from reconciler.loader import LoadResult

DEFAULT_SCHEMA_VERSION = "v1alpha1"

# factoryctl rule -> product code, where the meaning is the same (FC010 is split by what the schema says).
_CODES = {
    "FC002": "FF_INVALID_YAML",
    "FC003": "FF_INVALID_DOCUMENT",
    "FC004": "FF_DUPLICATE_KEY",
    "FC005": "FF_MALFORMED_FRONTMATTER",
    "FC030": "FF_INVALID_VALUE",
    "FC031": "FF_INVALID_REFERENCE",
    "FC032": "FF_INVALID_REFERENCE",
    "FC043": "FF_INVALID_REFERENCE",
    "FC060": "FF_INVALID_REFERENCE",
    "FC061": "FF_INVALID_REFERENCE",
    "FC062": "FF_INVALID_REFERENCE",
    "FC070": "FF_INVALID_VALUE",
    "FC071": "FF_INVALID_VALUE",
    "FC072": "FF_INVALID_REFERENCE",
    "FC080": "FF_INVALID_VALUE",
    "FC081": "FF_INVALID_VALUE",
}

# The state-dependent checks an anonymous call does not run (names of factoryctl's online checks).
STATE_DEPENDENT_CHECKS = (
    "secrets_exist",
    "secret_shapes",
    "webhook_uids_exist",
    "names_not_taken",
)


def code_of(diagnostic: Diagnostic) -> str:
    """The product code of ``diagnostic``, or its own rule ID when none corresponds."""
    if diagnostic.rule == "FC001" and "factory.yaml not found" in diagnostic.message:
        return "FF_MISSING_FACTORY"
    if diagnostic.rule == "FC010":
        text = diagnostic.message
        if text.startswith("unknown key"):
            return "FF_UNKNOWN_FIELD"
        if "missing required key" in text:
            return "FF_MISSING_REQUIRED"
        if " must be a" in text and ", got " in text and "must be at" not in text:
            return "FF_TYPE_MISMATCH"
        return "FF_INVALID_VALUE"
    return _CODES.get(diagnostic.rule, diagnostic.rule)


def wire(diagnostic: Diagnostic) -> dict[str, Any]:
    """One diagnostic on the wire: 1-based line and column (1 when unknown, ``located`` says which)."""
    return {
        "code": code_of(diagnostic),
        "path": diagnostic.path,
        "line": diagnostic.line or 1,
        "column": diagnostic.column or 1,
        "message": diagnostic.message,
        "rule": diagnostic.rule,
        "severity": diagnostic.severity,
        "hint": diagnostic.hint,
        "located": bool(diagnostic.line),
    }


def schema_version(files: Mapping[str, bytes]) -> str:
    """What ``factory.yaml`` declares as ``schemaVersion``, else the default (a broken file too)."""
    try:
        doc = yaml.safe_load(files.get("factory.yaml", b"").decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return DEFAULT_SCHEMA_VERSION
    found = doc.get("schemaVersion") if isinstance(doc, dict) else None
    return found if isinstance(found, str) and found else DEFAULT_SCHEMA_VERSION


def _entry(path: str, field: str, kind: str) -> dict[str, str]:
    return {"path": path, "field": field, "kind": kind}


def _config_refs(path: str, prefix: str, config: Any, environments: set[str]) -> Iterator[dict[str, str]]:
    """Names an agent configuration (``factory.yaml`` agents, automation or schedule ``config``) defers."""
    if not isinstance(config, Mapping):
        return
    env = config.get("environment_id")
    if isinstance(env, str) and env not in environments:
        yield _entry(path, f"{prefix}environment_id", "environment")
    if isinstance(config.get("worker_host"), str):
        yield _entry(path, f"{prefix}worker_host", "worker_host")
    yield from _mcp_refs(path, f"{prefix}mcp_servers", config.get("mcp_servers"))


def _mcp_refs(path: str, field: str, servers: Any) -> Iterator[dict[str, str]]:
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(servers, Mapping):
        items = servers.items()
    elif isinstance(servers, list):
        items = enumerate(servers)
    for key, server in items:
        if isinstance(server, Mapping) and isinstance(server.get("warpId"), str):
            yield _entry(path, f"{field}.{key}.warpId", "mcp_server")


# Trigger filter keys that take names the server resolves against a connected workspace.
_NAME_KEYS = {"slack": ("channels", "users"), "linear": ("teams", "projects", "states")}


def deferred_resolutions(loaded: LoadResult) -> list[dict[str, str]]:
    """Every reference the offline tiers leave to the server's state: ``{path, field, kind}``."""
    definition = loaded.definition
    if definition is None:
        return []
    out: list[dict[str, str]] = []
    environments = {e.name for e in getattr(definition, "environments", ())}
    factory = definition.factory
    if getattr(factory, "worker_host", None):
        out.append(_entry(factory.path, "workerHost", "worker_host"))
    for name, agent in (getattr(factory, "agents", None) or {}).items():
        out += _config_refs(factory.path, f"agents.{name}.", agent, environments)
    settings = getattr(factory, "settings", None) or {}
    out += _layer_refs(factory.path, "", settings, environments)
    out += _layer_refs(factory.path, "agentDefaults.", settings.get("agentDefaults") or {}, environments)
    if getattr(factory, "alias", None):
        out.append(_entry(factory.path, "alias", "alias_uniqueness"))
    for agent in getattr(definition, "agents", ()):
        if not getattr(agent, "legacy", True):
            out += _layer_refs(agent.path, "", agent.overrides, environments)
    for hook in getattr(definition, "webhooks", ()):
        out.append(_entry(hook.path, "secretName", "secret"))
    for note in getattr(definition, "notifications", ()):
        out.append(_entry(note.path, "secretName", "secret"))
    for env in getattr(definition, "environments", ()):
        spec = getattr(env, "spec", None) or {}
        secrets = spec.get("secrets") if isinstance(spec, Mapping) else None
        for i, _ in enumerate(secrets if isinstance(secrets, list) else ()):
            out.append(_entry(env.path, f"secrets[{i}]", "secret"))
        if isinstance(spec, Mapping):
            out += _mcp_refs(env.path, "mcpServers", spec.get("mcpServers"))
    for automation in getattr(definition, "automations", ()):
        front = getattr(automation, "front_matter", None) or {}
        out += _config_refs(automation.path, "config.", front.get("config"), environments)
        out += _layer_refs(automation.path, "", front, environments)
        out += _trigger_refs(automation.path, front.get("triggers"))
    for schedule in getattr(definition, "schedules", ()):
        if getattr(schedule, "inline_of", None) is None:
            out += _config_refs(schedule.path, "config.", getattr(schedule, "config", None), environments)
    return out


def _layer_refs(path: str, prefix: str, layer: Any, environments: set[str]) -> Iterator[dict[str, str]]:
    """What one v1alpha1 layer (factory.yaml, agentDefaults, an agent, an automation) names."""
    if not isinstance(layer, Mapping):
        return
    for i, _ in enumerate(layer.get("secrets") or ()):
        yield _entry(path, f"{prefix}secrets[{i}]", "secret")
    harness = layer.get("harness")
    auth = harness.get("auth") if isinstance(harness, Mapping) else None
    if isinstance(auth, Mapping) and auth.get("secretName"):
        yield _entry(path, f"{prefix}harness.auth.secretName", "secret")
    model = layer.get("model") or (harness.get("model") if isinstance(harness, Mapping) else None)
    if isinstance(model, str):
        yield _entry(path, f"{prefix}{'model' if layer.get('model') else 'harness.model'}", "model")
    env = layer.get("environmentId")
    if isinstance(env, str) and env not in environments:
        yield _entry(path, f"{prefix}environmentId", "environment")
    host = layer.get("workerHost")
    if isinstance(host, str) and host and host != "warp":
        yield _entry(path, f"{prefix}workerHost", "worker_host")
    yield from _mcp_refs(path, f"{prefix}mcpServers", layer.get("mcpServers"))


def _trigger_refs(path: str, triggers: Any) -> Iterator[dict[str, str]]:
    for index, trigger in enumerate(triggers if isinstance(triggers, list) else ()):
        if not isinstance(trigger, Mapping):
            continue
        found = trigger.get("filter")
        flt: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        provider = trigger.get("provider")
        for key in _NAME_KEYS.get(str(provider), ()):
            if key in flt:
                yield _entry(path, f"triggers[{index}].filter.{key}", f"{provider}_name_alias")
        if "webhook_ids" in flt:
            yield _entry(path, f"triggers[{index}].filter.webhook_ids", "webhook")
        if "schedule_ids" in flt:
            yield _entry(path, f"triggers[{index}].filter.schedule_ids", "schedule")


def answer(
    files: Mapping[str, bytes],
    loaded: LoadResult,
    diagnostics: Iterable[Diagnostic],
    *,
    online: bool,
) -> dict[str, Any]:
    """The endpoint's answer; ``online``: the state-dependent tier ran (an authenticated call)."""
    found = list(diagnostics)
    name = loaded.definition.factory.name if loaded.definition else None
    return {
        "valid": not any(d.severity == "error" for d in found),
        "schema_version": schema_version(files),
        "diagnostics": [wire(d) for d in found],
        "deferred_resolutions": deferred_resolutions(loaded),
        "state_dependent_checks_not_run": [] if online else list(STATE_DEPENDENT_CHECKS),
        "validation_scope": {
            "parser": "checked",
            "state_independent": "checked" if loaded.definition is not None else "not_run",
            "state_dependent": "checked" if online else "not_checked",
        },
        "factory": {"name": name, "files": loaded.files},  # factoryctl extension: the text report's header
    }
