"""The console's request rules (docs/console.md, "Security"): headers, cross-site refusal, CSRF, sign-in.

- Every console response carries a strict Content-Security-Policy (scripts, styles and images only from
  this server; no inline script; no framing), ``X-Frame-Options: DENY``, ``nosniff``,
  ``Referrer-Policy: same-origin`` and ``Cache-Control: no-store`` (a secret shown once must not come back
  from a cache or the history).
- A state-changing request (anything but GET/HEAD) is refused with 403 when the browser says it is
  cross-site (``Sec-Fetch-Site``) or its ``Origin`` is not this server, and when its form's ``csrf_token``
  is not the session's (constant-time comparison). Session cookies are also ``SameSite=Strict``.
- :func:`signed_in` finds the session of the request's cookie or sends the browser to the sign-in page.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import quote, urlsplit

from aiohttp import web

from api.console.sessions import COOKIE, SESSION_SETTINGS, ConsoleUser, SessionSettings, find_session
from api.context import CLOCK, SESSIONS, SETTINGS

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # not ``no-referrer``: under it Chromium sends ``Origin: null`` with the console's own form posts, which
    # the cross-site check must refuse; ``same-origin`` still sends no referrer to any other site.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
USER = web.RequestKey("console_user", ConsoleUser)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_console(request: web.BaseRequest) -> bool:
    return request.path == "/console" or request.path.startswith("/console/")


def _same_origin(request: web.Request) -> bool:
    """False when the browser says the request comes from another site (``Sec-Fetch-Site``, ``Origin``).
    Clients that send neither (curl) still need the CSRF token."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    ours = {f"{request.scheme}://{request.host}", request.app[SETTINGS].base_url}
    return f"{parts.scheme}://{parts.netloc}" in ours


async def add_headers(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the security headers on every console response, however it was made (a
    page, a redirect or refusal raised as an HTTPException, a problem answer, a static file)."""
    if is_console(request):
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)


@web.middleware
async def console_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Cross-site state changes refused before any handler; a refusal raised by a console handler (403,
    404...) is answered as the console's plain text, not turned into an API problem document."""
    if not is_console(request):
        return await handler(request)
    if request.method not in ("GET", "HEAD") and not _same_origin(request):
        return web.Response(status=403, text="Refused: a cross-site request may not change anything here.")
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:  # redirects go out as raised (with their cookies)
            raise
        return web.Response(status=exc.status, reason=exc.reason, headers=exc.headers, body=exc.body)


def setup_security(app: web.Application) -> None:
    app.middlewares.append(console_middleware)
    app.on_response_prepare.append(add_headers)


def settings_of(app: web.Application) -> SessionSettings:
    return app.get(SESSION_SETTINGS) or SessionSettings()


async def current_user(request: web.Request) -> ConsoleUser | None:
    if USER in request:
        return request[USER]
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    async with request.app[SESSIONS]() as session, session.begin():
        user = await find_session(session, request.app[CLOCK], token, settings_of(request.app))
    if user is not None:
        request[USER] = user
    return user


async def signed_in(request: web.Request) -> ConsoleUser:
    """The signed-in user, or a redirect to the sign-in page that comes back here afterwards."""
    user = await current_user(request)
    if user is None:
        raise web.HTTPSeeOther(f"/console/login?next={quote(request.path_qs, safe='')}")
    return user


def csrf_ok(expected: str, presented: object) -> bool:
    """Constant-time, over bytes: ``compare_digest`` raises on ``str`` holding non-ASCII characters, and a
    form field is whatever the sender wrote."""
    if not isinstance(presented, str) or not expected:
        return False
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), presented.encode("utf-8", "surrogatepass")
    )


async def read_form(request: web.Request) -> dict[str, str]:
    """A POSTed form's text fields; a body that is not a readable form (bytes that are not UTF-8 in a
    multipart field, a broken multipart body) is a 400 with a readable page, never a 500."""
    try:
        fields = await request.post()
    except (UnicodeDecodeError, ValueError) as exc:
        raise web.HTTPBadRequest(
            text=f"Refused: the form could not be read ({type(exc).__name__})."
        ) from None
    return {k: v for k, v in fields.items() if isinstance(v, str)}


async def changing(request: web.Request, *, admin: bool = False) -> tuple[ConsoleUser, dict[str, str]]:
    """The user and form of a state-changing POST: signed in, the session's CSRF token, the role."""
    user = await signed_in(request)
    form = await read_form(request)
    if not csrf_ok(user.csrf_token, form.get("csrf_token")):
        raise web.HTTPForbidden(text="Refused: the form's CSRF token is missing or stale; reload the page.")
    if admin and not user.is_admin:
        raise web.HTTPForbidden(text="Refused: this action needs an admin key.")
    return user, form


__all__ = [
    "CSP",
    "HEADERS",
    "changing",
    "console_middleware",
    "csrf_ok",
    "current_user",
    "read_form",
    "setup_security",
    "signed_in",
]
