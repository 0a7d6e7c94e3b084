"""The asyncio client: ``AsyncFactoryClient`` has the surface of ``FactoryClient`` with awaitables.

::

    async with AsyncFactoryClient("http://127.0.0.1:8080", key) as client:
        run = await client.runs.get(run_id)
        async for delivery in client.deliveries.iter(factory_uid, webhook_uid, status="Accepted"):
            ...
        async for event in client.events.stream(factory_uid=factory_uid):  # live, until you stop
            ...

Endpoints come from :mod:`factoryctl.client.resources`; only waiting differs from the sync executor.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from factoryctl.client._endpoints import Async, AsyncRaw
from factoryctl.client._transport import (
    ClientOptions,
    RawResponse,
    RequestSpec,
    build_request,
    connection_error,
    delay_after_error,
    delay_after_status,
    parse_answer,
)
from factoryctl.client.errors import error_from_response
from factoryctl.client.resources import Resources
from factoryctl.client.sync_client import USER_AGENT

T = TypeVar("T")
log = logging.getLogger("factoryctl.client")


class AsyncExecutor:
    """Sends specs with retries over one ``httpx.AsyncClient``."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        options: ClientOptions,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.http, self.options, self.sleep, self.rng = http, options, sleep, rng

    async def send(self, spec: RequestSpec[Any]) -> tuple[httpx.Response, int]:
        attempt = 0
        while True:
            request = build_request(self.http, self.options, spec)
            try:
                response = await self.http.send(request)
            except httpx.TransportError as exc:
                delay = delay_after_error(self.options, spec, attempt, exc, self.rng)
                if delay is None:
                    raise connection_error(exc, request) from exc
                log.info(
                    "retrying %s %s in %.2fs after %s", spec.method, spec.path, delay, type(exc).__name__
                )
            else:
                if response.status_code < 400:
                    return response, attempt
                delay = delay_after_status(self.options, spec, attempt, response, self.rng)
                if delay is None:
                    raise error_from_response(response)
                log.info(
                    "retrying %s %s in %.2fs after %s", spec.method, spec.path, delay, response.status_code
                )
            await self.sleep(delay)
            attempt += 1

    async def call(self, spec: RequestSpec[T]) -> T:
        response, _ = await self.send(spec)
        return parse_answer(spec, response)

    async def paginate(
        self, builder: Callable[..., RequestSpec[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> AsyncIterator[Any]:
        params = dict(kwargs)
        while True:
            page = await self.call(builder(*args, **params))
            for item in page.items:
                yield item
            following = page.next_page_params()
            if following is None:
                return
            params.update(following)


class RawAsyncExecutor:
    def __init__(self, inner: AsyncExecutor) -> None:
        self.inner = inner

    async def call(self, spec: RequestSpec[T]) -> RawResponse[T]:
        response, retries = await self.inner.send(spec)
        return RawResponse(response, spec, retries)


class AsyncFactoryClient(Resources[Async]):
    """Asyncio client of the factoryctl API (same arguments as ``FactoryClient``)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float | httpx.Timeout | None = 30.0,
        max_retries: int = 2,
        http_client: httpx.AsyncClient | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.options = ClientOptions.build(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            headers=default_headers,
            user_agent=USER_AGENT,
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient()
        self._executor = AsyncExecutor(self._http, self.options)
        super().__init__(self._executor)
        self.with_raw_response: Resources[AsyncRaw] = Resources(RawAsyncExecutor(self._executor))

    @property
    def base_url(self) -> str:
        return self.options.base_url

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncFactoryClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
