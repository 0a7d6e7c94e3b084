"""An environment's ``network`` policy: its modes and its ``host[:port]`` patterns (docs/definitions.md,
"Network policy").

Pure rules shared by the reconciler (FC012, at the line of the value) and the environments API (a 422
field error), so a pattern that loads is one the server can hand to a worker. The structure (``mode``
one of :data:`MODES`, ``allow`` a list of at most :data:`MAX_ALLOW` strings) is the JSON Schema's
(``schemas/environment.schema.json``); what a schema cannot judge is judged here:

- a pattern is an exact host (``github.com``), a wildcard of its subdomains (``*.example.com``: any
  depth, never ``example.com`` itself), an IPv4 literal or a bracketed IPv6 literal (``[2001:db8::1]``),
  each with an optional ``:port`` (1-65535; without one, the worker's proxy allows ports 443 and 80). No
  scheme, user, path, CIDR range or ``*`` elsewhere than as the first label, and a wildcard covers at least
  two labels (``*.com`` would be most of the internet: say ``mode: open`` instead);
- ``allow`` is read only with ``mode: allowlist``: a non-empty ``allow`` with ``none`` or ``open`` is an
  error, since either the mode or the list is not what the writer meant.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final

MODES: Final = ("none", "allowlist", "open")
DEFAULT_MODE: Final = "allowlist"
MAX_ALLOW: Final = 100
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_BRACKETED = re.compile(r"^\[([^\]]+)\](?::([^:]*))?$")
_EXAMPLE: Final = "'github.com', '*.example.com', 'registry.npmjs.org:443' or '[2001:db8::1]:443'"


class BadPattern(ValueError):
    """A ``host[:port]`` pattern that is not one; the message says why, in words for the writer."""


@dataclass(frozen=True, order=True)
class HostPattern:
    """One allowed destination: ``host`` in lower case (``*.`` first for a wildcard, an IPv6 literal
    without brackets) and ``port`` (None: 443 and 80)."""

    host: str
    port: int | None = None

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def parse_pattern(text: str) -> HostPattern:
    """``text`` as a :class:`HostPattern`; raises :class:`BadPattern`."""
    if not text or text != text.strip() or any(c.isspace() or ord(c) < 0x20 for c in text):
        raise BadPattern("a host pattern must not be empty or contain white space")
    if "://" in text:
        raise BadPattern(f"write a host, not a URL: {_EXAMPLE}")
    if any(c in text for c in "/@?#"):
        raise BadPattern(
            f"a host pattern has no user, path or query (CIDR ranges are not supported): {_EXAMPLE}"
        )
    if not text.isascii():
        raise BadPattern("write an internationalised host name in its ASCII form ('xn--…')")
    bracketed = _BRACKETED.match(text)
    if bracketed:
        host, port = bracketed.group(1), bracketed.group(2)
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            raise BadPattern(f"'[{host}]' is not an IPv6 address") from None
        return HostPattern(str(address), _port(port))
    if text.count(":") > 1:
        raise BadPattern(f"write an IPv6 address in brackets, with the port after them: '[{text}]'")
    host, _, port = text.partition(":")
    return HostPattern(_host(host.lower()), _port(port if ":" in text else None))


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise BadPattern(f"the port must be a number from 1 to 65535, not {text!r}")
    return int(text)


def _host(host: str) -> str:
    if host == "*":
        raise BadPattern("'*' alone would allow every host: use mode: open for that")
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    if "*" in name:
        raise BadPattern("'*' is allowed only as the whole first label: '*.example.com'")
    labels = name.split(".")
    if all(label.isdigit() for label in labels):
        try:
            address = ipaddress.IPv4Address(name)
        except ValueError:
            raise BadPattern(f"{name!r} is not an IPv4 address") from None
        if wildcard:
            raise BadPattern("a wildcard needs a host name, not an address")
        return str(address)
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise BadPattern(
            f"{name!r} is not a host name: labels of letters, digits, '-' and '_' (1-63 each)"
            " separated by '.'"
        )
    if wildcard and len(labels) < 2:
        raise BadPattern(
            f"'*.{name}' is too broad: name at least two labels ('*.example.com'), or use mode: open"
        )
    return host


def network_problems(network: object) -> list[tuple[tuple[str | int, ...], str]]:
    """``(where, why)`` for each problem of an environment's ``network`` value, ``where`` relative to it
    (``("allow", 2)``); call after the JSON Schema passed (other shapes are left to it)."""
    if not isinstance(network, dict):
        return []
    mode, allow = network.get("mode", DEFAULT_MODE), network.get("allow")
    if not isinstance(allow, list):
        return []
    if mode in ("none", "open") and allow:
        return [
            (("allow",), f"'allow' is read only with mode: allowlist (this environment's mode is {mode})")
        ]
    found: list[tuple[tuple[str | int, ...], str]] = []
    for index, item in enumerate(allow):
        if isinstance(item, str):
            try:
                parse_pattern(item)
            except BadPattern as exc:
                found.append((("allow", index), f"host pattern {item!r}: {exc}"))
    return found
