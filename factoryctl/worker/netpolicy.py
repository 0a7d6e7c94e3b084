"""Where a sandboxed run may connect: its network policy and the rule the egress proxy applies
(docs/workers.md, "Network"). Pure: no sockets, no DNS.

A policy is ``{"mode": "none" | "allowlist" | "open", "allow": ["host[:port]", ...]}``. Under ``none``
only the run's model endpoint is reachable, under ``allowlist`` the model endpoint and the listed
patterns; ``open`` shares the host's network and no proxy runs. A pattern is a host name, an IP
address (IPv6 in brackets) or ``*.`` and a domain (any name below it, not the domain itself), with an
optional port; without one it matches ports 443 and 80.

A destination matched by a plain host or address (not by a wildcard), or the model endpoint the worker
set, is *explicit*: the proxy lets it connect to a private or loopback address. A wildcard never reaches
one (a public domain cannot be made to point into the worker's network), nor does a model endpoint the
run's own variables chose.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

Mode = Literal["none", "allowlist", "open"]
MODES: tuple[Mode, ...] = ("none", "allowlist", "open")
DEFAULT_PORTS = (443, 80)  # what a pattern without a port matches
HTTPS_PORT, HTTP_PORT = 443, 80
MAX_PATTERNS = 1000  # the server sends its environment's 100 patterns plus its repositories' hosts
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
# The model endpoint of each agent preset: the variable that moves it, and the provider's own host.
MODEL_VARIABLES: dict[str, tuple[str, str]] = {
    "claude": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    "codex": ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    "gemini": ("GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"),
}


@dataclass(frozen=True)
class Pattern:
    """One ``allow`` entry: ``host`` lower-case (a wildcard keeps its ``*.``), ``port`` None for 443/80."""

    host: str
    port: int | None = None

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else DEFAULT_PORTS):
            return False
        if self.wildcard:
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host


@dataclass(frozen=True)
class NetworkPolicy:
    """A run's network (the claim's ``network``); a claim without one gets :meth:`default`."""

    mode: Mode = "allowlist"
    allow: tuple[str, ...] = ()

    @classmethod
    def default(cls) -> NetworkPolicy:
        return cls("allowlist", ())

    @classmethod
    def parse(cls, value: Any) -> NetworkPolicy:
        """The policy of a claim's ``network`` value; ValueError naming what is wrong."""
        if value is None:
            return cls.default()
        if not isinstance(value, Mapping):
            raise ValueError("network must be an object {mode, allow}")
        mode = value.get("mode", "allowlist")
        if mode not in MODES:
            raise ValueError(f"network.mode must be one of {', '.join(MODES)}, not {mode!r}")
        allow = value.get("allow") or []
        if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
            raise ValueError("network.allow must be a list of host[:port] strings")
        if len(allow) > MAX_PATTERNS:
            raise ValueError(f"network.allow holds more than {MAX_PATTERNS} patterns")
        for i, item in enumerate(allow):
            try:
                parse_pattern(item)
            except ValueError as exc:
                raise ValueError(f"network.allow[{i}]: {exc}") from None
        return cls(mode, tuple(allow))

    def patterns(self) -> tuple[Pattern, ...]:
        return tuple(parse_pattern(item) for item in self.allow)


@dataclass(frozen=True)
class Decision:
    """Whether the proxy may connect to a destination; ``explicit``: it may even reach a private or
    loopback address; ``reason``: why not (for the ``egress_refused`` event)."""

    allowed: bool
    explicit: bool = False
    reason: str | None = None


def normal_host(text: str) -> str:
    """``text`` as a host to compare: lower-case, no trailing dot, an IPv6 address without brackets and
    written canonically; ValueError when it is no host name or address."""
    host = text.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{text!r} is not a host name or IP address")
    return host


def split_host_port(text: str, default_port: int | None) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port`` for IPv6) as ``(host, port)``; the port is ``default_port`` when
    absent. ValueError on a malformed one."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: unclosed [")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r} is not host[:port]")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None  # a bare IPv6 address, or no port
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def parse_pattern(text: str) -> Pattern:
    """One ``allow`` entry; ValueError for a malformed one."""
    host, port = split_host_port(text, None)
    if host.startswith("*."):
        return Pattern("*." + normal_host(host[2:]), port)
    if "*" in host:
        raise ValueError(f"{text!r}: a wildcard is allowed only as a leading '*.'")
    return Pattern(normal_host(host), port)


def url_endpoint(url: str) -> tuple[str, int] | None:
    """The ``(host, port)`` an ``http(s)://`` URL connects to (the scheme's default port), or None."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        host = normal_host(parts.hostname)
    except ValueError:
        return None
    return host, port or (HTTPS_PORT if parts.scheme == "https" else HTTP_PORT)


def model_endpoints(preset: str | None, variables: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """Where the run's agent reaches its model: the preset's base-URL variable, else its provider's host.
    Without a preset (the command harness), each of those variables the run sets."""
    if preset in MODEL_VARIABLES:
        name, default = MODEL_VARIABLES[preset]
        urls = [variables.get(name) or default]
    else:
        urls = [variables[name] for name, _ in MODEL_VARIABLES.values() if variables.get(name)]
    found = (url_endpoint(url) for url in urls)
    return tuple(dict.fromkeys(e for e in found if e is not None))


class EgressRules:
    """The decision for each destination of one run: its policy plus its model endpoints. ``trusted``: the
    model endpoints the worker itself set (None: all of ``model``); only those may be private or loopback
    addresses, so a run's own ``ANTHROPIC_BASE_URL`` cannot make "the model" the server's own port.
    ``listed_private``: whether a destination the policy lists by name may be such an address too (the
    worker's operator decides: :class:`~factoryctl.worker.sandbox.Sandbox`)."""

    def __init__(
        self,
        policy: NetworkPolicy,
        model: Iterable[tuple[str, int]] = (),
        trusted: Iterable[tuple[str, int]] | None = None,
        *,
        listed_private: bool = True,
    ) -> None:
        self.policy = policy
        self.listed_private = listed_private
        self.model = frozenset(model)
        self.trusted = self.model if trusted is None else frozenset(trusted) & self.model
        self.patterns = policy.patterns() if policy.mode == "allowlist" else ()

    def decide(self, host: str, port: int) -> Decision:
        """Whether ``host:port`` (as the client named it) may be reached, before any DNS."""
        try:
            host = normal_host(host)
        except ValueError as exc:
            return Decision(False, reason=str(exc))
        if self.policy.mode == "open" or (host, port) in self.trusted:
            return Decision(True, explicit=True)
        matched = [p for p in self.patterns if p.matches(host, port)]
        listed = self.listed_private and any(not p.wildcard for p in matched)
        if (host, port) in self.model:
            return Decision(True, explicit=listed)
        if not matched:
            if self.policy.mode == "none":
                return Decision(False, reason="network mode none: only the model endpoint is reachable")
            return Decision(False, reason="not on the network allowlist")
        return Decision(True, explicit=listed)
