"""API-key authentication and role checks for ``/api/v1``.

Roles: ``admin`` manages everything of its team; ``member`` creates and drives runs and reads;
``worker`` claims and reports runs for its worker host IDs only. A resource of another team is
indistinguishable from a missing one (404), never a 403.

A presented key is looked up only while its client address has failed-authentication budget left
(:mod:`api.auth_failures`); a wrong or revoked key spends it, and past it the answer is ``429`` with
``Retry-After`` (docs/api.md, "Authentication").
"""

from __future__ import annotations

from aiohttp import web

from api import AuthenticationRequired, NotAuthorized, RateLimited
from api.auth_failures import AUTH_FAILURES
from api.context import CLOCK, SESSIONS
from store.apikeys import Principal, authenticate

PRINCIPAL = web.RequestKey("principal", Principal)
_RANK = {"worker": 0, "member": 1, "admin": 2}


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def principal(request: web.Request) -> Principal:
    """The authenticated caller (cached on the request)."""
    if PRINCIPAL in request:
        return request[PRINCIPAL]
    token = bearer_token(request)
    if token is None:
        raise AuthenticationRequired(
            "missing API key: send 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": 'Bearer realm="factoryctl"'},
        )
    found = await key_holder(request, token)
    if found is None:
        raise AuthenticationRequired(
            "invalid or revoked API key", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
        )
    request[PRINCIPAL] = found
    return found


async def key_holder(request: web.Request, key: str) -> Principal | None:
    """Who holds ``key`` (None: unknown or revoked), looked up only while the request's address has
    failed-authentication budget left, and spending it on a failure: the one path of the API's bearer keys
    and the console's sign-in form. Raises :class:`RateLimited` (:func:`too_many_failures`) past it."""
    budget = request.app[AUTH_FAILURES]
    if (wait := await budget.spent(request)) is not None:
        raise too_many_failures(wait)
    async with request.app[SESSIONS]() as session, session.begin():
        found = await authenticate(session, request.app[CLOCK], key)
    if found is None and (wait := await budget.failed(request)) is not None:
        raise too_many_failures(wait)
    return found


def too_many_failures(retry_after: int) -> RateLimited:
    """The 429 of a client address whose failed-authentication budget is spent."""
    return RateLimited(
        "too many failed authentications from this address; retry after the Retry-After delay",
        headers={"Retry-After": str(retry_after)},
    )


async def require(request: web.Request, role: str) -> Principal:
    """Authenticate and require at least ``role`` (worker < member < admin)."""
    who = await principal(request)
    if who.role == "worker" and role != "worker":
        raise NotAuthorized("worker keys may only claim and report runs")
    if role != "worker" and _RANK[who.role] < _RANK[role]:
        raise NotAuthorized(f"this action needs the {role} role; the key has {who.role}")
    return who


async def require_worker_host(request: web.Request, worker_host: str) -> Principal:
    """A worker may act for its own hosts; admins may act for any host (service-hosted workers)."""
    who = await principal(request)
    if who.role == "admin":
        return who
    if who.role != "worker" or worker_host not in who.worker_hosts:
        raise NotAuthorized(f"this key may not act for worker host {worker_host!r}")
    return who
