"""The one HTTP boundary of notifications: POST a signed body to an endpoint, guarded against SSRF.

:class:`Transport` is the interface the sender sees; :class:`GuardedTransport` is the real one
(docs/notifications.md, "Where a notification may be sent"): every URL is checked again when it is used
(:func:`store.urlpolicy.url_refusal`), every address a hostname resolves to must pass
:func:`store.urlpolicy.address_refusal` and the connection goes to exactly those addresses (the resolver
is the connector's, so no second lookup can be answered differently), redirects are never followed,
proxies from the environment are ignored, and each attempt has a deadline.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from api.notifications.policy import NotificationSettings
from store import urlpolicy

SUCCEEDED, FAILED, TIMEOUT, REFUSED = "succeeded", "failed", "timeout", "refused"
USER_AGENT = "factoryctl-notifications"


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
    """A hostname resolved to an address notifications may not reach."""


class GuardedResolver(AbstractResolver):
    """Resolves with the system resolver and refuses a host if any of its addresses is refused."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            reason = urlpolicy.address_refusal(ipaddress.ip_address(result["host"]))
            if reason is not None:
                raise DestinationRefused(f"{host} resolves to a private network address: {reason}")
        return results

    async def close(self) -> None:
        await self._inner.close()


class GuardedTransport:
    """The real transport; an async context manager owning one connection pool."""

    def __init__(self, settings: NotificationSettings, *, user_agent: str = USER_AGENT) -> None:
        self._settings = settings
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> GuardedTransport:
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(), limit=self._settings.max_in_flight)
        self._session = aiohttp.ClientSession(
            connector=connector,
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
        if refusal is not None:
            return Outcome(REFUSED, elapsed(), error=refusal)
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
                return Outcome(REFUSED, elapsed(), error=str(exc.os_error))
            return Outcome(FAILED, elapsed(), error=f"cannot connect: {exc.os_error.strerror or exc}"[:500])
        except DestinationRefused as exc:
            return Outcome(REFUSED, elapsed(), error=str(exc))
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
            return Outcome(FAILED, elapsed(), error=f"{type(exc).__name__}: {exc}"[:500])


__all__ = ["FAILED", "REFUSED", "SUCCEEDED", "TIMEOUT", "GuardedTransport", "Outcome", "Transport"]
