"""The failed-authentication budget per client address (docs/api.md, "Authentication"; docs/console.md,
"Signing in").

A wrong or revoked API key - in ``Authorization: Bearer`` on the API or pasted into the console's sign-in
form - is one failure of the client address it came from. Past ``client_auth_failure_limit`` failures per
minute (sliding window) every request of that address that presents a key is refused with ``429`` and
``Retry-After`` - a correct key included, or the budget would not stop guessing - until the window has slid
far enough; other addresses are not affected. API and console share one budget per address, separate from
the ingress's per-webhook budget (docs/ingress.md, "Limits").

The counting is the ingress's one implementation (:mod:`api.ratelimit`): the budget is checked before a key
is looked up (:meth:`~api.ratelimit.policy.Limiter.check`: from memory while the replica holds a leased
token) and spent only by a failure (:meth:`~api.ratelimit.policy.Limiter.consume`), exactly on SQLite (one
process) and across replicas on PostgreSQL (leases from the shared ``rate_counters`` rows). A successful
request spends nothing; on PostgreSQL it costs at most one lease statement per address, replica and minute.

The client address is the TCP peer, unless the peer is a configured trusted proxy
(``--trusted-proxy CIDR``): then it is the right-most ``X-Forwarded-For`` hop that is not a trusted proxy
(hops to its left are whatever the client wrote). IPv6 clients are counted per ``/64``, which is what one
host usually holds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from sqlalchemy.ext.asyncio import AsyncEngine

from api.ratelimit.counters import counter_for
from api.ratelimit.policy import Limiter
from store.clock import Clock

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
KEY_PREFIX = "client-auth:"
IPV6_PREFIX = 64
# X-Forwarded-For hops looked at, right to left (a longer header is mostly what the client wrote)
_MAX_HOPS = 64


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """``--trusted-proxy`` values (CIDRs or single addresses; blank ones skipped, each stripped) as networks;
    ValueError names a bad one."""
    networks = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"--trusted-proxy {text!r} is not an IP address or CIDR (e.g. 10.0.0.0/8)"
            ) from None
    return tuple(networks)


def _address(text: str | None) -> Address | None:
    if not text:
        return None
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[2001:db8::1]:443"
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # "192.0.2.7:51234": some proxies append the client's port
        text = text.partition(":")[0]
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def _trusted(address: Address, trusted: tuple[Network, ...]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def forwarded_client(
    peer: str | None, forwarded_for: Iterable[str], trusted: tuple[Network, ...]
) -> str | None:
    """The client behind trusted proxies: the right-most ``X-Forwarded-For`` hop that is not one of them (a
    hop that is not an address stops the walk at the last trusted one); ``peer`` itself when it is not a
    trusted proxy; None when ``peer`` is not an address."""
    current = _address(peer)
    if current is None:
        return None
    if trusted and _trusted(current, trusted):
        hops = [hop for header in forwarded_for for hop in header.split(",")]
        for hop in reversed(hops[-_MAX_HOPS:]):
            found = _address(hop)
            if found is None:
                break
            current = found
            if not _trusted(found, trusted):
                break
    return str(current)


def client_address(peer: str | None, forwarded_for: Iterable[str], trusted: tuple[Network, ...]) -> str:
    """Whose budget a request spends: the :func:`forwarded_client`, IPv6 addresses reduced to their
    ``/64``."""
    client = forwarded_client(peer, forwarded_for, trusted)
    if client is None:
        return peer or "unknown"
    found = ipaddress.ip_address(client)
    if isinstance(found, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((found, IPV6_PREFIX), strict=False))
    return client


@dataclass
class AuthFailureBudget:
    """The budget of one app: ``limit`` failures per address per minute, counted by ``limiter``."""

    limiter: Limiter
    limit: int
    clock: Clock
    trusted: tuple[Network, ...] = ()

    def client(self, request: web.BaseRequest) -> str | None:
        """The request's client address as the access log shows it (behind trusted proxies, the hop they
        name; else the TCP peer)."""
        return forwarded_client(request.remote, request.headers.getall("X-Forwarded-For", []), self.trusted)

    def key(self, request: web.BaseRequest) -> str:
        forwarded = request.headers.getall("X-Forwarded-For", [])
        return KEY_PREFIX + client_address(request.remote, forwarded, self.trusted)

    async def spent(self, request: web.BaseRequest) -> int | None:
        """Before a key is looked up: ``Retry-After`` seconds when the budget is spent, else None."""
        decision = await self.limiter.check(self.key(request), self.limit, self.clock.now().timestamp())
        return None if decision.allowed else decision.retry_after or 1

    async def failed(self, request: web.BaseRequest) -> int | None:
        """Count a failed authentication; ``Retry-After`` seconds when it no longer fits the budget (the
        caller answers 429 instead of 401), else None."""
        decision = await self.limiter.consume(self.key(request), self.limit, self.clock.now().timestamp())
        return None if decision.allowed else decision.retry_after or 1


AUTH_FAILURES = web.AppKey("auth_failure_budget", AuthFailureBudget)
CLIENT = web.RequestKey("client", str)  # read by the access log (api/ops.py); set only behind trusted proxies


def forwarded_client_middleware(budget: AuthFailureBudget) -> Middleware:
    """Behind ``--trusted-proxy`` networks, note each request's forwarded client for the access log (a
    request aiohttp could not parse never reaches a middleware, and is logged with its TCP peer only)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        client = budget.client(request)
        if client is not None:
            request[CLIENT] = client
        return await handler(request)

    return middleware


def budget_for(
    engine: AsyncEngine, clock: Clock, limit: int, trusted_proxies: Iterable[str]
) -> AuthFailureBudget:
    """The app's budget: leases from the shared rows on PostgreSQL, process memory on SQLite."""
    if limit < 1:
        raise ValueError("the failed-authentication limit must be at least 1")
    return AuthFailureBudget(counter_for(engine), limit, clock, parse_networks(trusted_proxies))


__all__ = [
    "AUTH_FAILURES",
    "CLIENT",
    "AuthFailureBudget",
    "budget_for",
    "client_address",
    "forwarded_client",
    "forwarded_client_middleware",
    "parse_networks",
]
