"""The web console's routes (docs/console.md): sign-in, sign-out and the pages, under ``/console/``.

Pages are rendered on the server with Jinja2 (``autoescape`` on: every value from a payload, a definition
or a harness is text, never markup) and enhanced by one small script of our own (``static/console.js``);
every asset is served from here, so the console works with no internet access and needs no Node toolchain.
Pages read the store through the same functions as the API; handlers never trust the browser for the team
or the role.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from aiohttp import web
from sqlalchemy import select

from api import RateLimited
from api.auth import key_holder
from api.console import admin_pages, artifact_pages, automation_pages, factory_pages, run_list, run_pages
from api.console import sessions as console_sessions
from api.console.error_pages import setup_error_pages
from api.console.rendering import render, setup_templates
from api.console.security import (
    changing,
    csrf_ok,
    current_user,
    read_form,
    settings_of,
    setup_security,
    signed_in,
)
from api.context import CLOCK, SESSIONS, SETTINGS
from api.factories.serialize import factory_json
from store.models import Factory

HERE = Path(__file__).parent


def _secure(request: web.Request) -> bool:
    return request.app[SETTINGS].base_url.startswith("https://")


def _next(value: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if value and value.startswith("/console/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/console/factories"


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/console/")


async def home(request: web.Request) -> web.StreamResponse:
    await signed_in(request)
    raise web.HTTPFound("/console/factories")


async def login_form(request: web.Request, *, error: str | None = None, status: int = 200) -> web.Response:
    token = secrets.token_urlsafe(32)
    response = render(
        request,
        "login.html",
        {"login_token": token, "next": _next(request.query.get("next")), "error": error, "user": None},
        status=status,
    )
    console_sessions.set_cookie(
        response, console_sessions.LOGIN_COOKIE, token, secure=_secure(request), max_age=3600
    )
    return response


async def login_page(request: web.Request) -> web.StreamResponse:
    if await current_user(request) is not None:
        raise web.HTTPFound(_next(request.query.get("next")))
    return await login_form(request)


async def _too_many_failures(request: web.Request, retry_after: int) -> web.Response:
    """The sign-in page of an address whose failed-authentication budget is spent: 429, ``Retry-After``."""
    wait = f"{retry_after} seconds" if retry_after < 120 else f"{-(-retry_after // 60)} minutes"
    error = (
        f"Too many failed sign-ins from your network address. Wait {wait} before trying again: "
        "until then every key from this address is refused."
    )
    response = await login_form(request, error=error, status=429)
    response.headers["Retry-After"] = str(retry_after)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """``POST /console/login``: the key is checked once, a session is opened, the key is forgotten.

    A wrong or revoked key spends the address's failed-authentication budget, shared with the API
    (:mod:`api.auth_failures`); once it is spent every key is refused with 429 until it recovers."""
    form = await read_form(request)
    if not csrf_ok(request.cookies.get(console_sessions.LOGIN_COOKIE, ""), form.get("login_token")):
        return await login_form(request, error="The sign-in form expired; try again.", status=403)
    key = form.get("api_key", "")  # read_form keeps text fields only
    try:
        who = await key_holder(request, key) if key else None
    except RateLimited as spent:
        return await _too_many_failures(request, int(spent.headers["Retry-After"]))
    if who is None:
        return await login_form(request, error="That API key is not valid (unknown or revoked).", status=401)
    if who.role == "worker":
        error = "Worker keys cannot sign in to the console; use a member or admin key."
        return await login_form(request, error=error, status=401)
    async with request.app[SESSIONS]() as session, session.begin():
        token, _ = await console_sessions.open_session(
            session, request.app[CLOCK], who, settings_of(request.app)
        )
    response = web.HTTPSeeOther(_next(str(form.get("next") or "")))
    max_age = int(settings_of(request.app).absolute.total_seconds())
    console_sessions.set_cookie(
        response, console_sessions.COOKIE, token, secure=_secure(request), max_age=max_age
    )
    console_sessions.clear_cookie(response, console_sessions.LOGIN_COOKIE)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    """``POST /console/logout`` (CSRF-checked); a GET shows the sign-out button (no state change by GET)."""
    if request.method == "GET":
        user = await current_user(request)
        if user is None:
            raise web.HTTPSeeOther("/console/login")
        return render(request, "logout.html", {"user": user})
    await changing(request)
    async with request.app[SESSIONS]() as session, session.begin():
        await console_sessions.close_session(session, request.cookies.get(console_sessions.COOKIE, ""))
    response = web.HTTPSeeOther("/console/login")
    console_sessions.clear_cookie(response, console_sessions.COOKIE)
    raise response


async def factories(request: web.Request) -> web.StreamResponse:
    user = await signed_in(request)
    stmt = select(Factory).where(Factory.team_id == user.team_id).order_by(Factory.name, Factory.uid)
    async with request.app[SESSIONS]() as session:
        rows = [factory_json(r) for r in (await session.scalars(stmt.limit(500))).all()]
    return render(request, "factories.html", {"user": user, "factories": rows, "nav": "factories"})


def setup(app: web.Application) -> None:
    setup_templates(app)
    setup_error_pages(app)  # outside the security middleware: its refusals are restyled too
    setup_security(app)
    app.router.add_get("/", root)
    app.router.add_get("/console", home)
    app.router.add_get("/console/", home)
    app.router.add_get("/console/login", login_page)
    app.router.add_post("/console/login", login)
    app.router.add_route("*", "/console/logout", logout)
    app.router.add_get("/console/factories", factories)
    for pages in (factory_pages, automation_pages, run_list, run_pages, artifact_pages, admin_pages):
        pages.setup(app)
    app.router.add_static("/console/static/", HERE / "static", append_version=True, name="console_static")
