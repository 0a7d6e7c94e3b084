"""Where outbound requests may go (docs/notifications.md, "Where a notification may be sent").

An endpoint URL is hostile input: whoever writes a definition (or holds an admin key) chooses it, and the
server then makes requests to it from inside the operator's network — server-side request forgery. The
rule, checked twice:

1. **When the URL is written** (definitions FC080, the management API, MCP URL servers):
   :func:`url_refusal` judges the URL **as the HTTP client will connect to it**: parsed and normalised by
   ``yarl.URL`` — the parser aiohttp uses — so the host is judged after IDNA/UTS-46 mapping, where
   full-width digits (U+FF10...), ideographic full stops (U+3002) and circled digits (U+2460...)
   have become ASCII. ``https``, or ``http`` only to a loopback host (``localhost``, ``127.0.0.0/8``,
   ``::1``); no user name or password; a host. A literal address must pass
   :func:`store.rules.addresspolicy.address_refusal`; a host written with non-ASCII characters that becomes an
   address, or a number that is not a canonical address (``2852039166``, ``0x7f.1``), is refused, as
   resolvers and libraries read such hosts differently. Any other host must be a DNS name a resolver takes:
   labels of 1 to 63 letters, digits, ``-`` or ``_``, at most 253 characters (``a..localhost`` made
   ``getaddrinfo`` raise at send time).
2. **When a request is made**: the URL is judged again, and the address every connection is about to reach,
   however it was found, must pass :func:`store.rules.addresspolicy.connect_refusal`
   (``api/notifications/transport.py``). Redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

from store.rules.addresspolicy import IPAddress, address_refusal, connect_refusal, is_loopback

MAX_URL_LENGTH: Final = 2000
MAX_NAME_LENGTH: Final = 253
MAX_LABEL_LENGTH: Final = 63
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost."})
_NUMERIC: Final = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+))*\.?", re.IGNORECASE)
_LABEL: Final = re.compile(r"[a-z0-9_-]+")
PRIVATE_NETWORK: Final = "the URL points at a private network"


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


def _written_host(url: str) -> str:
    """The host as written (before any mapping), only to tell whether it was ASCII and to quote it."""
    rest = url.split("//", 1)[1] if "//" in url else ""
    host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


def _name_refusal(host: str) -> str | None:
    """Why ``host`` (ASCII, lower case, not an address) is not a DNS name a resolver takes."""
    name = host[:-1] if host.endswith(".") else host
    if len(name) > MAX_NAME_LENGTH:
        return f"the URL's host is longer than {MAX_NAME_LENGTH} characters"
    for label in name.split("."):
        if not label:
            return f"the URL's host {host!r} has an empty label (two dots in a row, or a leading dot)"
        if len(label) > MAX_LABEL_LENGTH:
            return f"the URL's host has a label longer than {MAX_LABEL_LENGTH} characters"
        if not _LABEL.fullmatch(label):
            return (
                f"the URL's host {host!r} has characters a DNS name cannot hold"
                " (letters, digits, '-' and '_' only)"
            )
    return None


def _host_refusal(host: str, written: str) -> str | None:
    """Why a URL may not point at ``host`` (as the HTTP client connects to it), or None."""
    ascii_written = written.isascii()
    ip = _literal(host)
    trailing_dot = False
    if ip is None and host.endswith("."):
        ip = _literal(host[:-1])  # 169.254.169.254. resolves to the address
        trailing_dot = ip is not None
    if ip is not None and (reason := address_refusal(ip)) is not None:  # loopback passes
        shown = "" if ascii_written else f" (the host {written!r} is read as {host})"
        return f"{PRIVATE_NETWORK}: {reason}{shown}"
    if not ascii_written and (ip is not None or _NUMERIC.fullmatch(host)):
        return (
            f"the URL's host {written!r} is read as the address {host}:"
            " write an address in ASCII digits (a.b.c.d or [IPv6])"
        )
    if trailing_dot or (ip is None and _NUMERIC.fullmatch(host)):
        return f"the URL's host {host!r} is a number but not a canonical IP address (write it as a.b.c.d)"
    if ip is None and ":" in host:
        return f"the URL's host {host!r} is not an IP address"
    return None if ip is not None else _name_refusal(host)


def url_refusal(url: str) -> str | None:
    """Why ``url`` may not be an outbound endpoint, or None when it may (rule 1 above)."""
    from yarl import URL  # here, not at import: an offline ``validate`` starts fast (docs/cli.md, "Start-up")

    if len(url) > MAX_URL_LENGTH:
        return f"the URL is longer than {MAX_URL_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "the URL contains whitespace or control characters"
    try:
        parsed = URL(url)  # exactly as aiohttp parses the URL it is given
        port = parsed.explicit_port
        parsed.host  # noqa: B018 - decodes punycode labels; a label that does not decode is refused
    except (ValueError, UnicodeError) as exc:
        return f"the URL cannot be parsed ({exc})"
    scheme = parsed.scheme.lower()
    host = parsed.raw_host or ""
    if scheme not in ("https", "http"):
        return "the URL must start with https:// (or http:// to a loopback host)"
    if not host or not parsed.is_absolute():
        return "the URL has no host"
    if parsed.raw_user is not None or parsed.raw_password is not None:
        return "the URL must not carry a user name or password (use the signing secret to authenticate)"
    if port == 0:
        return "the URL's port must be between 1 and 65535"
    written = _written_host(url)
    reason = _host_refusal(host.lower(), written)
    if reason is not None:
        return reason
    if scheme == "http" and not is_loopback_host(host):
        return "plain http is allowed only to a loopback host (localhost, 127.0.0.1, ::1); use https"
    return None


__all__ = [
    "MAX_URL_LENGTH",
    "PRIVATE_NETWORK",
    "address_refusal",
    "connect_refusal",
    "is_loopback",
    "is_loopback_host",
    "url_refusal",
]
