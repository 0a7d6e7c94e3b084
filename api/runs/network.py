"""The network policy a run's sandbox gets (docs/security.md, "Network policy"), computed on the server from
the run's environment as it is when the run is claimed, the same for every run source (API, webhook,
schedule, follow-up, scorer):

- the environment says ``network: {mode: none}`` or ``{mode: open}``: that mode, no entries;
- otherwise (``mode: allowlist``, or no ``network`` at all, the default): ``allowlist`` with the hosts of the
  environment's ``repos`` (https 443, http 80, ssh and scp-like ``git@host:path`` 22, ``git://`` 9418, or
  the port the URL names; local paths add nothing) followed by the environment's ``allow`` patterns,
  written canonically (:func:`store.rules.network_policy.parse_pattern`) and without repeats;
- a run with no environment, or one whose environment no longer exists: ``allowlist`` with no entries.

The worker always adds the agent's model endpoint (docs/workers.md, "Sandbox"); ``open`` is only ever the
explicit choice of an environment. Pure: callers read the environment row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import safegit
from store.rules.network_policy import DEFAULT_MODE, BadPattern, HostPattern, parse_pattern

DEFAULT_PORTS: Final = {"https": 443, "http": 80, "ssh": 22, "git": 9418}


def network_policy(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"mode", "allow"}`` for a run whose environment spec is ``spec`` (None: no environment)."""
    if spec is None:
        return {"mode": DEFAULT_MODE, "allow": []}
    network = spec.get("network")
    network = network if isinstance(network, Mapping) else {}
    mode = network.get("mode", DEFAULT_MODE)
    if mode in ("none", "open"):
        return {"mode": mode, "allow": []}
    found: list[HostPattern] = []
    repos, allow = spec.get("repos"), network.get("allow")
    for repo in repos if isinstance(repos, list) else []:
        url = repo.get("url") if isinstance(repo, Mapping) else None
        destination = repository_destination(url) if isinstance(url, str) else None
        if destination is not None:
            found.append(destination)
    for text in allow if isinstance(allow, list) else []:
        try:
            found.append(parse_pattern(str(text)))
        except BadPattern:
            continue  # refused when the environment was written; an older row is read leniently
    return {"mode": DEFAULT_MODE, "allow": list(dict.fromkeys(str(p) for p in found))}


def repository_destination(url: str) -> HostPattern | None:
    """The host and port a worker's clone of ``url`` connects to; None for a local path or a URL git
    must not be given (refused before it is stored, docs/definitions.md, "Repository URLs")."""
    try:
        transport = safegit.transport_of(url)
    except safegit.UnsafeLocation:
        return None
    if transport == "file":
        return None
    if "://" in url:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            return None
    else:  # scp-like [user@]host:path
        host, port = url.split(":", 1)[0].rpartition("@")[2], None
    if not host:
        return None
    try:
        parsed = parse_pattern(f"[{host}]" if ":" in host else host)
    except BadPattern:
        return None
    return HostPattern(parsed.host, port or DEFAULT_PORTS[transport])
