"""The one HTTP boundary of notifications: POST a signed body to an endpoint, guarded against SSRF.

:class:`Transport` is the interface the sender sees; :class:`GuardedTransport` is the real one
(docs/notifications.md, "Where a notification may be sent"): every URL is checked again when it is used
(:func:`store.rules.urlpolicy.url_refusal`); every connection is checked where it is made —
:func:`guarded_connector`'s socket factory judges the address each socket is about to connect to
(:func:`store.rules.addresspolicy.connect_refusal`), whether it came from a DNS answer or from an IP literal
that aiohttp never resolves — and the resolver refuses a name if any of its addresses is refused, so the
connection goes to exactly the checked addresses (no second lookup can be answered differently).
Redirects are never followed, proxies from the environment are ignored, each attempt has a deadline.

A refused destination is never connected to, and its attempt says only :data:`NOT_ALLOWED` (plus, for a
URL refused on its text alone, why): whether anything listens there, resets, speaks TLS or hangs is never
shown, so attempts are no port-scan oracle. The detail of a connect-time refusal is logged for operators.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Protocol

import aiohttp
from aiohttp import AddrInfoType, SocketFactoryType
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from api.notifications.policy import NotificationSettings
from store.rules import addresspolicy, urlpolicy

log = logging.getLogger("factoryctl.notifications")

SUCCEEDED, FAILED, TIMEOUT, REFUSED = "succeeded", "failed", "timeout", "refused"
USER_AGENT = "factoryctl-notifications"
NOT_ALLOWED: Final = "destination not allowed"


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: ``outcome`` is succeeded (2xx) | failed | timeout | refused."""

    outcome: str
    duration_ms: int
    status: int | None = None
    excerpt: str | None = None
    error: str | None = None
    retry_after: str | None = None


class Transport(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Outcome: ...


class DestinationRefused(OSError):
    """A connection notifications may not make. Its text is always :data:`NOT_ALLOWED` (aiohttp keeps an
    exception's type only when every address failed with the same text); ``reason`` says why, for logs."""

    def __init__(self, reason: str) -> None:
        super().__init__(NOT_ALLOWED)
        self.reason = reason


def _refuse(reason: str) -> DestinationRefused:
    log.warning("notification destination refused: %s", reason)
    return DestinationRefused(reason)


class GuardedResolver(AbstractResolver):
    """Resolves with the system resolver and refuses a host if any of its addresses is refused."""

    def __init__(self, *, allow_loopback: bool = True) -> None:
        self._inner = DefaultResolver()
        self._allow_loopback = allow_loopback

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            reason = addresspolicy.connect_refusal(result["host"], allow_loopback=self._allow_loopback)
            if reason is not None:
                raise _refuse(f"{host} resolves to a refused address: {reason}")
        return results

    async def close(self) -> None:
        await self._inner.close()


def checked_socket(allow_loopback: bool) -> SocketFactoryType:
    """A socket factory that refuses to open a socket for a refused destination. aiohttp (through
    aiohappyeyeballs) calls it with the address of every connection it is about to make, resolved or
    literal, so this is the one place every notification connection goes through."""

    def open_socket(addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        reason = addresspolicy.connect_refusal(str(sockaddr[0]), allow_loopback=allow_loopback)
        if reason is not None:
            raise _refuse(f"connection to {sockaddr[0]} refused: {reason}")
        return socket.socket(family, type_, proto)

    return open_socket


def guarded_connector(settings: NotificationSettings) -> aiohttp.TCPConnector:
    """The connection pool notifications use: every address checked, by the resolver and the socket."""
    allow = settings.allow_loopback
    return aiohttp.TCPConnector(
        resolver=GuardedResolver(allow_loopback=allow),
        socket_factory=checked_socket(allow),
        limit=settings.max_in_flight,
    )


class GuardedTransport:
    """The real transport; an async context manager owning one connection pool."""

    def __init__(self, settings: NotificationSettings, *, user_agent: str = USER_AGENT) -> None:
        self._settings = settings
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> GuardedTransport:
        self._session = aiohttp.ClientSession(
            connector=guarded_connector(self._settings),
            trust_env=False,  # no proxy from the environment decides where a notification goes
            timeout=aiohttp.ClientTimeout(
                total=self._settings.timeout_seconds, connect=self._settings.connect_timeout_seconds
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Outcome:
        if self._session is None:
            raise RuntimeError("GuardedTransport used outside its context")
        started = time.perf_counter()

        def elapsed() -> int:
            return int((time.perf_counter() - started) * 1000)

        # again, as when it was written; literal addresses bypass the resolver and are judged here
        refusal = urlpolicy.url_refusal(url)
        if refusal is not None:  # judged on the URL's text alone: the reason tells nothing of the network
            return Outcome(REFUSED, elapsed(), error=f"{NOT_ALLOWED}: {refusal}")
        sent = {"Content-Type": "application/json", "User-Agent": self._user_agent, **headers}
        try:
            async with self._session.post(url, data=body, headers=sent, allow_redirects=False) as resp:
                raw = await resp.content.read(self._settings.excerpt_bytes)
                excerpt = raw.decode("utf-8", "replace") or None
                outcome = SUCCEEDED if 200 <= resp.status < 300 else FAILED
                error = None if outcome == SUCCEEDED else f"HTTP {resp.status}"
                return Outcome(
                    outcome, elapsed(), resp.status, excerpt, error, resp.headers.get("Retry-After")
                )
        except TimeoutError:
            return Outcome(TIMEOUT, elapsed(), error=f"no answer within {self._settings.timeout_seconds:g}s")
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, DestinationRefused):
                return Outcome(REFUSED, elapsed(), error=NOT_ALLOWED)
            return Outcome(FAILED, elapsed(), error=f"cannot connect: {exc.os_error.strerror or exc}"[:500])
        except DestinationRefused:
            return Outcome(REFUSED, elapsed(), error=NOT_ALLOWED)
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
            return Outcome(FAILED, elapsed(), error=f"{type(exc).__name__}: {exc}"[:500])


__all__ = [
    "FAILED",
    "NOT_ALLOWED",
    "REFUSED",
    "SUCCEEDED",
    "TIMEOUT",
    "DestinationRefused",
    "GuardedResolver",
    "GuardedTransport",
    "Outcome",
    "Transport",
    "checked_socket",
    "guarded_connector",
]
