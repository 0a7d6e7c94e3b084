"""Which IP addresses outbound requests may reach (docs/notifications.md, "Where a notification may be sent").

Judged twice for every request: on the literal address in a URL when it is written
(:func:`store.rules.urlpolicy.url_refusal`), and on the address a socket is about to connect to
(:func:`connect_refusal`, called by the notifications transport for every connection, whatever produced the
address: an IP literal or a DNS answer).

Allowed: public unicast addresses, and loopback (``127.0.0.0/8``, ``::1`` and the IPv4-mapped
``::ffff:127.0.0.0/104``, which is the same host) unless the caller refuses it too. Refused: private,
shared (100.64/10), link-local (169.254/16 — where cloud metadata services answer — and fe80::/10),
site-local, unique-local, unspecified, multicast, broadcast, documentation and reserved ranges, written
out below rather than left to :mod:`ipaddress`'s flags, whose tables change between Python versions (the
flags are consulted as well, so a range either knows is refused).

IPv6 addresses that carry an IPv4 address are judged as the address they carry: IPv4-mapped
(``::ffff:0:0/96``), IPv4-translated (``::ffff:0:0:0/96``), NAT64 (``64:ff9b::/96`` and the local-use
``64:ff9b:1::/48``, of which only ``64:ff9b:1::/96`` says unambiguously which IPv4 address it carries) and
6to4 (``2002::/16``). Loopback inside a translation prefix reaches the translator's loopback, not this
server's, and is refused. Teredo (``2001::/32``) and the deprecated IPv4-compatible ``::/96`` are refused
with the rest of their reserved ranges.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_REFUSED_V4: Final = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
    )
)
_REFUSED_V6: Final = tuple(
    ipaddress.ip_network(n)
    for n in (
        "::/8",  # IPv4-compatible and other reserved forms (loopback, mapped: judged before)
        "100::/64",
        "2001::/23",  # IETF protocol assignments, Teredo among them
        "2001:db8::/32",
        "3fff::/20",
        "fc00::/7",
        "fec0::/10",
    )
)
_GLOBAL_UNICAST: Final = ipaddress.ip_network("2000::/3")
_MAPPED: Final = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED: Final = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL: Final = ipaddress.ip_network("64:ff9b:1::/48")
_NAT64_LOCAL_96: Final = ipaddress.ip_network("64:ff9b:1::/96")
_6TO4: Final = ipaddress.ip_network("2002::/16")


def _low32(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _carried(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, bool] | None:
    """The IPv4 address ``ip`` carries, and whether it is the same host's (mapped) rather than a
    translator's; None when it carries none."""
    if ip in _MAPPED:
        return _low32(ip), True
    if ip in _TRANSLATED or ip in _NAT64 or ip in _NAT64_LOCAL_96:
        return _low32(ip), False
    if ip in _6TO4 and ip.sixtofour is not None:
        return ip.sixtofour, False
    return None


def _v4_refusal(ip: ipaddress.IPv4Address, allow_loopback: bool) -> str | None:
    if ip.is_loopback:
        return None if allow_loopback else f"{ip} is a loopback address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if ip.is_link_local:
        return f"{ip} is link-local (cloud metadata services live there)"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if any(ip in net for net in _REFUSED_V4) or not ip.is_global:
        return f"{ip} is a private or reserved address"
    return None


def _v6_refusal(ip: ipaddress.IPv6Address, allow_loopback: bool) -> str | None:
    if ip.is_loopback:
        return None if allow_loopback else f"{ip} is a loopback address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if ip.is_link_local:
        return f"{ip} is link-local"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if ip in _NAT64_LOCAL and ip not in _NAT64_LOCAL_96:
        return (
            f"{ip} is a local-use NAT64 address (64:ff9b:1::/48) outside 64:ff9b:1::/96,"
            " so which IPv4 address it reaches depends on the translator"
        )
    if any(ip in net for net in _REFUSED_V6) or ip not in _GLOBAL_UNICAST or not ip.is_global:
        return f"{ip} is a private or reserved address"
    return None


def address_refusal(ip: IPAddress, *, allow_loopback: bool = True) -> str | None:
    """Why a request may not reach ``ip``, or None when it may (loopback, unless refused, or public)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_refusal(ip, allow_loopback)
    carried = _carried(ip.__class__(int(ip)))  # without a scope id, so ``in`` and ``str`` are plain
    if carried is None:
        return _v6_refusal(ip, allow_loopback)
    inner, same_host = carried
    if inner.is_loopback and not same_host:
        return f"{ip} carries {inner}, the loopback of a translator, not of this server"
    reason = _v4_refusal(inner, allow_loopback)
    return None if reason is None else f"{reason} (carried by {ip})"


def is_loopback(ip: IPAddress) -> bool:
    """``127.0.0.0/8``, ``::1`` or an IPv4-mapped loopback address: this host, whatever the family."""
    carried = _carried(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if carried is not None:
        return carried[1] and carried[0].is_loopback
    return ip.is_loopback


def connect_refusal(address: str, *, allow_loopback: bool = True) -> str | None:
    """Why a socket may not connect to ``address`` (a socket address's host: an IPv4 or IPv6 address,
    perhaps with a ``%scope``), or None when it may. Anything that is not an address is refused."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address!r} is not an IP address"
    return address_refusal(ip, allow_loopback=allow_loopback)


__all__ = ["IPAddress", "address_refusal", "connect_refusal", "is_loopback"]
