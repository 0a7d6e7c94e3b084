"""Where outbound notifications may go (docs/notifications.md, "Where a notification may be sent").

An endpoint URL is hostile input: whoever writes a definition (or holds an admin key) chooses it, and the
server then makes requests to it from inside the operator's network — server-side request forgery. The
rule, checked twice:

1. **When the URL is written** (definitions FC080, the management API): ``https``, or ``http`` only to a
   loopback host (``localhost``, ``127.0.0.0/8``, ``::1``); no user name or password in the URL; a host;
   a literal address must be public (:func:`address_refusal`). Hostnames cannot be judged here.
   A host made only of numbers that is not a canonical address (``2852039166``, ``0x7f.1``, ``0``) is
   refused too: resolvers read such names as addresses in ways that differ between libraries.
2. **When a message is sent**: every address the hostname resolves to must pass :func:`address_refusal`,
   and the connection goes to the checked address (no second lookup a rebinding DNS server could
   answer differently). Redirects are never followed.

Refused: private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16 — cloud metadata
services — and fe80::/10), shared address space (100.64/10), unspecified, multicast, reserved and
documentation ranges, and IPv4 addresses embedded in IPv6 (mapped ``::ffff:a.b.c.d`` and NAT64
``64:ff9b::/96``) judged as the IPv4 address they carry. Loopback is allowed, so a receiver (or a relay to an
internal service) can run beside the server.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import urlsplit

MAX_URL_LENGTH: Final = 2000
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost."})
_NUMERIC: Final = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+))*\.?", re.IGNORECASE)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_loopback(ip: IPAddress) -> bool:
    inner = _embedded_v4(ip)
    return (inner or ip).is_loopback


def address_refusal(ip: IPAddress) -> str | None:
    """Why a notification may not connect to ``ip``, or None when it may (loopback or public)."""
    inner = _embedded_v4(ip)
    target = inner if inner is not None else ip
    if target.is_loopback:
        return None
    if target.is_unspecified:
        return f"{ip} is the unspecified address"
    if target.is_link_local:
        return f"{ip} is link-local (cloud metadata services live there)"
    if target.is_multicast:
        return f"{ip} is a multicast address"
    if not target.is_global:
        return f"{ip} is a private or reserved address"
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a literal loopback address (hostnames that merely resolve there do not count)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    ip = _literal(host)
    return ip is not None and is_loopback(ip)


def url_refusal(url: str) -> str | None:
    """Why ``url`` may not be a notification endpoint, or None when it may (rule 1 above)."""
    if len(url) > MAX_URL_LENGTH:
        return f"the URL is longer than {MAX_URL_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "the URL contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"the URL cannot be parsed ({exc})"
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme not in ("https", "http"):
        return "the URL must start with https:// (or http:// to a loopback host)"
    if not host:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "the URL must not carry a user name or password (use the signing secret to authenticate)"
    if port == 0:
        return "the URL's port must be between 1 and 65535"
    loopback = is_loopback_host(host)
    if scheme == "http" and not loopback:
        return "plain http is allowed only to a loopback host (localhost, 127.0.0.1, ::1); use https"
    ip = _literal(host)
    if ip is None and _NUMERIC.fullmatch(host):
        return f"the URL's host {host!r} is a number but not a canonical IP address (write it as a.b.c.d)"
    if ip is not None and not loopback:
        reason = address_refusal(ip)
        if reason is not None:
            return f"the URL points at a private network: {reason}"
    return None


__all__ = ["MAX_URL_LENGTH", "address_refusal", "is_loopback", "is_loopback_host", "url_refusal"]
