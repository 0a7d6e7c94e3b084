"""Console pages for the team's secrets and API keys (docs/console.md, "Pages").

- ``/console/secrets``: names, scopes, current versions, times and the webhooks that use each secret, never a
  value. Admins (the API's rule: ``POST/PUT /api/v1/secrets`` need an admin key) create a secret or give it a
  new value; a value the service generated is shown once, in the POST's own response page (200, no
  redirect, never in a URL; ``Cache-Control: no-store`` comes from the console middleware).
- ``/console/keys``: the team's keys (name, role, prefix, times, revoked). Members get the list read-only;
  admins create keys (the plaintext is shown once, in the POST's response) and revoke them.

Both read and write through the store's functions (:mod:`store.secrets`, :mod:`store.apikeys`), the same ones
the API and the CLI use; every POST is checked by :func:`~api.console.security.changing` (CSRF, same site,
admin role) whatever the page showed.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from aiohttp import web

from api.console.rendering import render
from api.console.security import changing, signed_in
from api.console.sessions import ConsoleUser
from api.context import BOX, CLOCK, SESSIONS
from api.management.secrets import users as secret_users
from store import NotFound, StoreError
from store import apikeys as key_store
from store import secrets as secret_store
from store.clock import rfc3339

KEY_ROLES = ("member", "admin", "worker")
_HOSTS_SPLIT = re.compile(r"[\s,]+")


def _when(value: dt.datetime | None) -> str | None:
    """An RFC 3339 time for ``ui.ago`` (None when unset: the templates test "revoked" and "never used" by
    emptiness)."""
    return rfc3339(value)


def _page(
    request: web.Request,
    user: ConsoleUser,
    template: str,
    listing: dict[str, Any],
    *,
    shown: dict[str, Any] | None = None,
    message: str | None = None,
    error: str | None = None,
    form: dict[str, str] | None = None,
    status: int = 200,
) -> web.Response:
    """An admin page: its ``listing``, and the outcome of a POST (a value shown once, a message, or an
    error with the form as given and its status)."""
    context = {
        "user": user,
        **listing,
        "shown": shown,
        "message": message,
        "error": error,
        "form": form or {},
    }
    return render(request, template, context, status=status)


async def _secrets_page(request: web.Request, user: ConsoleUser, **outcome: Any) -> web.Response:
    async with request.app[SESSIONS]() as session:
        infos = await secret_store.list_secrets(session, user.team_id)
        used = await secret_users(session, user.team_id)
    rows = [
        {
            "name": i.name,
            "scope": i.scope,
            "version": i.version,
            "created_at": _when(i.created_at),
            "updated_at": _when(i.updated_at),
            "used_by": used.get(i.name, []),
        }
        for i in infos
    ]
    listing = {
        "nav": "secrets",
        "secrets": rows,
        "scopes": secret_store.SCOPES,
        "default_scope": secret_store.DEFAULT_SCOPE,
    }
    return _page(request, user, "secrets.html", listing, **outcome)


async def secrets_page(request: web.Request) -> web.StreamResponse:
    """``GET /console/secrets`` (member): the team's secrets, never their values."""
    return await _secrets_page(request, await signed_in(request))


async def save_secret(request: web.Request) -> web.StreamResponse:
    """``POST /console/secrets`` (admin): create ``name`` or give it a new version (and scope). A generated
    value is shown once, in this response."""
    user, form = await changing(request, admin=True)
    name = form.get("name", "").strip()
    given = form.get("value", "")
    generate = form.get("generate") == "on" or not given
    scope = form.get("scope") or None
    kept = {"name": name, "scope": scope or ""}
    if given and form.get("generate") == "on":
        return await _secrets_page(
            request, user, error="Give a value or tick “generate”, not both.", form=kept, status=400
        )
    value = secret_store.generate_value() if generate else given
    box, clock = request.app[BOX], request.app[CLOCK]
    try:
        async with request.app[SESSIONS]() as session, session.begin():
            if await secret_store.get(session, user.team_id, name) is None:
                info = await secret_store.create(
                    session, box, clock, user.team_id, name, value, scope=scope or secret_store.DEFAULT_SCOPE
                )
                done = f"Created secret {name} (version 1, scope {info.scope})."
            else:
                if scope is not None:
                    await secret_store.set_scope(session, clock, user.team_id, name, scope)
                info = await secret_store.set_value(session, box, clock, user.team_id, name, value)
                done = f"Secret {name} now has version {info.version} (scope {info.scope})."
    except StoreError as exc:
        status = 404 if isinstance(exc, NotFound) else 400
        return await _secrets_page(request, user, error=str(exc), form=kept, status=status)
    shown = {"name": name, "value": value, "version": info.version} if generate else None
    return await _secrets_page(request, user, shown=shown, message=done)


def _key_row(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "role": row.role,
        "worker_hosts": list(row.worker_hosts or []),
        "prefix": row.prefix,
        "created_at": _when(row.created_at),
        "last_used_at": _when(row.last_used_at),
        "revoked_at": _when(row.revoked_at),
    }


async def _keys_page(request: web.Request, user: ConsoleUser, **outcome: Any) -> web.Response:
    async with request.app[SESSIONS]() as session:
        rows = [_key_row(r) for r in await key_store.list_keys(session, user.team_id)]
    return _page(request, user, "keys.html", {"nav": "keys", "keys": rows, "roles": KEY_ROLES}, **outcome)


async def keys_page(request: web.Request) -> web.StreamResponse:
    """``GET /console/keys`` (member: read-only; admin: create and revoke)."""
    return await _keys_page(request, await signed_in(request))


async def create_key(request: web.Request) -> web.StreamResponse:
    """``POST /console/keys`` (admin): a new key, its plaintext shown once in this response."""
    user, form = await changing(request, admin=True)
    name, role = form.get("name", "").strip(), form.get("role", "")
    hosts = [h for h in _HOSTS_SPLIT.split(form.get("worker_hosts", "")) if h]
    kept = {"name": name, "role": role, "worker_hosts": form.get("worker_hosts", "")}
    if role not in KEY_ROLES:
        return await _keys_page(request, user, error="Choose a role.", form=kept, status=400)
    if role != "worker" and hosts:
        error = "Only worker keys take worker hosts."
        return await _keys_page(request, user, error=error, form=kept, status=400)
    try:
        async with request.app[SESSIONS]() as session, session.begin():
            row, plaintext = await key_store.create_key(
                session, request.app[CLOCK], user.team_id, name, role, hosts or None
            )
            created = _key_row(row)
    except StoreError as exc:
        return await _keys_page(request, user, error=str(exc), form=kept, status=400)
    shown = {"name": created["name"], "role": created["role"], "id": created["id"], "key": plaintext}
    return await _keys_page(request, user, shown=shown, message=f"Created {role} key {created['name']}.")


async def revoke_key(request: web.Request) -> web.StreamResponse:
    """``POST /console/keys/{key_id}/revoke`` (admin). Revoking the key this session was opened with ends
    the session (the next request signs in again)."""
    user, _ = await changing(request, admin=True)
    key_id = request.match_info["key_id"]
    try:
        async with request.app[SESSIONS]() as session, session.begin():
            await key_store.revoke_key(session, request.app[CLOCK], user.team_id, key_id)
    except NotFound as exc:
        return await _keys_page(request, user, error=str(exc), status=404)
    raise web.HTTPSeeOther("/console/keys")


def setup(app: web.Application) -> None:
    app.router.add_get("/console/secrets", secrets_page)
    app.router.add_post("/console/secrets", save_secret)
    app.router.add_get("/console/keys", keys_page)
    app.router.add_post("/console/keys", create_key)
    app.router.add_post("/console/keys/{key_id}/revoke", revoke_key)
