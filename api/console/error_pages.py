"""The console's error pages (docs/console.md, "Error pages"): every refusal or failure under ``/console``
is a page of the console's layout with its status, never a plain-text body or an API problem document.

Handlers and :func:`api.console.security.console_middleware` answer refusals as short plain-text
responses (``Refused: …``, ``No such factory.``); this middleware, outside that one, turns each such
answer into ``error.html`` with the same status, text and ``Retry-After`` / ``Allow`` headers, and a static
file that does not exist into a 404 page. An unexpected
exception becomes a 500 page carrying a reference that is also in the server's log (the exception's text is
not shown: it may hold SQL or a value); an unreachable database is a 503.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Final

from aiohttp import web

from api.console.rendering import render
from api.console.security import Handler, current_user, is_console
from api.console.sessions import ConsoleUser
from api.errors import ApiError
from api.problems import store_unavailable

log = logging.getLogger("factoryctl.console")

TITLES: Final = {
    400: "Bad request",
    401: "Sign-in needed",
    403: "Refused",
    404: "Not found",
    405: "Not allowed",
    409: "Conflict",
    413: "Too large",
    422: "Not accepted",
    429: "Too many requests",
    500: "Something went wrong",
    503: "Temporarily unavailable",
}
KEPT_HEADERS: Final = ("Retry-After", "Allow")


def _text(status: int, body: str, path: str) -> str:
    """The page's message: the handler's own text, or a readable one for aiohttp's default (``404: Not
    Found``)."""
    body = body.strip()
    if body and not body.startswith(f"{status}:"):
        return body
    if status == 404:
        return f"There is no console page at {path}."
    if status == 405:
        return "This page does not take that kind of request."
    return TITLES.get(status, "The request could not be completed.")


async def _user(request: web.Request) -> ConsoleUser | None:
    """The signed-in user for the layout's navigation; an error page must render even when the store is the
    reason for the error, so a failure here means "signed out"."""
    try:
        return await current_user(request)
    except Exception:  # the page shows the original error, not this one
        return None


async def error_page(
    request: web.Request, status: int, text: str, *, reference: str | None = None
) -> web.Response:
    """``error.html`` inside the layout, with ``status``."""
    context = {
        "user": await _user(request),
        "status": status,
        "title": TITLES.get(status, "Error"),
        "text": text,
        "reference": reference,
        "signed_out": status == 401,
    }
    return render(request, "error.html", context, status=status)


async def _restyled(request: web.Request, response: web.Response) -> web.Response:
    body = response.text or "" if response.content_type == "text/plain" else ""
    page = await error_page(request, response.status, _text(response.status, body, request.path))
    for name in KEPT_HEADERS:
        if name in response.headers:
            page.headers[name] = response.headers[name]
    return page


def _static_exists(request: web.Request) -> bool:
    """Whether a static file's response has a file to send: aiohttp's file response finds out only when it
    is sent (and answers an empty 404), after every middleware."""
    resource = request.match_info.route.resource
    directory = resource.get_info().get("directory") if resource is not None else None
    if not isinstance(directory, Path):
        return True
    return (directory / request.match_info.get("filename", "")).is_file()


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not is_console(request):
        return await handler(request)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = web.Response(status=exc.status, text=exc.text or "", headers=exc.headers)
    except ApiError as exc:  # the API's rule refused (a bad cursor, the stream cap: 429 with Retry-After)
        page = await error_page(request, exc.status, exc.detail)
        for name in KEPT_HEADERS:
            if name in exc.headers:
                page.headers[name] = exc.headers[name]
        return page
    except Exception as exc:
        reason = store_unavailable(exc)
        if reason is not None:
            log.warning("console: store unavailable (%s) on %s %s", reason, request.method, request.path)
            return await error_page(request, 503, "The store is unavailable right now; try again shortly.")
        ref = uuid.uuid4().hex[:12]
        log.exception("console: unhandled error (ref %s) on %s %s", ref, request.method, request.path)
        text = "The server failed to answer this page. The error is in its log under this reference."
        return await error_page(request, 500, text, reference=ref)
    if isinstance(response, web.FileResponse) and not _static_exists(request):
        return await error_page(request, 404, _text(404, "", request.path))
    # a page (the sign-in form's 401/429) or JSON (run-states) is left as it is; any other error body (a
    # plain text) becomes the page
    if (
        isinstance(response, web.Response)
        and response.status >= 400
        and response.content_type != "text/html"
        and not response.content_type.endswith("json")
    ):
        return await _restyled(request, response)
    return response


def setup_error_pages(app: web.Application) -> None:
    """Install the middleware; call before :func:`api.console.security.setup_security` so that it wraps the
    security middleware and restyles its refusals too."""
    app.middlewares.append(error_middleware)


__all__ = ["error_middleware", "error_page", "setup_error_pages"]
