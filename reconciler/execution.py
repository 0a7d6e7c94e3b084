"""The execution keys of v1alpha1 (``model``/``harness``, ``runner``, ``environmentId``, ``secrets``,
``mcpServers``, ``workerHost``) in the run configuration's spelling, and their inheritance.

Definitions write camelCase keys at three layers, ``factory.yaml`` ``agentDefaults`` -> the agent -> the
automation (docs/definitions.md, "Inheritance"); runs carry the snake_case AmbientAgentConfig the run API
speaks (docs/agent-config.md). :func:`to_config` translates one layer; :func:`inherit` lays a layer over
the one below it, key by key, as the published format specifies:

- ``model: X`` is ``harness: {type: oz, model: X}``; harness fields override one by one;
- ``secrets`` and ``mcpServers`` replace the inherited ones; the factory's own ``secrets`` and
  ``mcpServers`` are then added to every agent's and automation's (:func:`with_factory_grants`);
- an explicit ``workerHost: null`` (or ``""``) clears an inherited host: runs go to service-hosted
  workers (``warp``); other keys inherit when null.

Pure: the offline validation path imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HARNESS_ALIASES = {"claude-code": "claude"}
SERVICE_HOSTED = "warp"
# The run-configuration keys a definition may set (docs/agent-config.md lists what a request may set).
_SIMPLE = {
    "runner": "runner",
    "environmentId": "environment_id",
    "skillSpec": "skill_spec",
    "runName": "name",
}


_ALIASES = {
    "model": "model_id",
    "harness.model": "model_id",
    "harness": "harness",
    "environmentId": "environment_id",
    "workerHost": "worker_host",
    "mcpServers": "mcp_servers",
    "secrets": "secrets",
    "runner": "runner",
    "skillSpec": "skill_spec",
    "runName": "name",
}


def location_aliases(locations: Mapping[str, Any]) -> dict[str, Any]:
    """``config.<key>`` aliases of the execution keys' locations (``mcpServers.x.url`` is also
    ``config.mcp_servers.x.url``), so rules written for run configurations point at the camelCase key."""
    out: dict[str, Any] = {}
    for key, where in locations.items():
        for written, internal in _ALIASES.items():
            if key == written or key.startswith(written + ".") or key.startswith(written + "["):
                rest = key[len(written) :].replace(".warpId", ".warp_id")
                out.setdefault(f"config.{internal}{rest}", where)
    return out


def to_config(doc: Mapping[str, Any]) -> dict[str, Any]:
    """One layer's execution keys as run configuration; only the keys the layer declares (a null
    ``workerHost`` is kept as the service-hosted host, which is what clearing it means)."""
    out: dict[str, Any] = {}
    if doc.get("model") is not None:
        out["model_id"] = doc["model"]
        out["harness"] = {"type": "oz"}
    harness = doc.get("harness")
    if isinstance(harness, Mapping):
        out["harness"] = _harness(harness)
        if harness.get("model") is not None:
            out["model_id"] = harness["model"]
    for key, internal in _SIMPLE.items():
        if doc.get(key) is not None:
            out[internal] = doc[key]
    if doc.get("secrets") is not None:
        out["secrets"] = list(dict.fromkeys(doc["secrets"]))
    if doc.get("mcpServers") is not None:
        out["mcp_servers"] = mcp_servers(doc["mcpServers"])
    if "workerHost" in doc:
        out["worker_host"] = doc["workerHost"] or SERVICE_HOSTED
    return out


def _harness(harness: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if harness.get("type") is not None:
        out["type"] = HARNESS_ALIASES.get(harness["type"], harness["type"])
    if harness.get("reasoningLevel") is not None:
        out["reasoning_level"] = harness["reasoningLevel"]
    auth = harness.get("auth")
    if isinstance(auth, Mapping):
        out["auth"] = {"source": auth["source"]}
        if auth.get("secretName"):
            out["auth"]["secret_name"] = auth["secretName"]
    return out


def mcp_servers(servers: Mapping[str, Any]) -> dict[str, Any]:
    """``{name: {warpId}}`` or ``{name: {url, headers}}`` in the run's spelling."""
    out: dict[str, Any] = {}
    for name, server in servers.items():
        if isinstance(server, Mapping) and "warpId" in server:
            out[name] = {"warp_id": server["warpId"]}
        elif isinstance(server, Mapping):
            out[name] = dict(server)
    return out


def inherit(lower: Mapping[str, Any], upper: Mapping[str, Any]) -> dict[str, Any]:
    """``upper`` laid over ``lower``: each key ``upper`` declares wins; ``harness`` merges field by field
    (an agent that names only ``harness.type`` keeps the inherited auth and reasoning level only when the
    type is the same harness)."""
    out = dict(lower)
    for key, value in upper.items():
        if key == "harness" and isinstance(lower.get("harness"), Mapping):
            below = dict(lower["harness"])
            if value.get("type") not in (None, below.get("type")):
                below = {}
            out[key] = {**below, **value}
        else:
            out[key] = value
    return out


def with_factory_grants(config: Mapping[str, Any], factory: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` plus the factory-wide ``secrets`` and ``mcpServers``, which always apply."""
    out = dict(config)
    secrets = factory.get("secrets") or []
    if secrets:
        out["secrets"] = list(dict.fromkeys([*secrets, *out.get("secrets", [])]))
    servers = factory.get("mcpServers") or {}
    if servers:
        out["mcp_servers"] = {**mcp_servers(servers), **out.get("mcp_servers", {})}
    return out


def automation_config(front: Mapping[str, Any], factory: Mapping[str, Any]) -> dict[str, Any]:
    """An automation's own run configuration: the legacy ``config`` (AmbientAgentConfig), then its
    v1alpha1 execution keys; a layer that declares ``secrets`` or ``mcpServers`` replaces the agent's,
    so the factory-wide grants are added to it."""
    config = inherit(dict(front.get("config") or {}), to_config(front))
    grants = {
        "secrets": factory.get("secrets") if "secrets" in config else None,
        "mcpServers": factory.get("mcpServers") if "mcp_servers" in config else None,
    }
    return with_factory_grants(config, grants)
