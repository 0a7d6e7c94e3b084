"""Management API (docs/management.md): webhooks, their delivery logs, test filters, team secrets and
online validation of factory files for CI.

Modules: :mod:`.webhooks` (create, list, get, enable/disable, rename, rotate, supply, delete),
:mod:`.deliveries` (delivery log and "Test filter"), :mod:`.secrets` (``/secrets``) and :mod:`.validate`
(``/factory-files/validate``, whose checks are injected because ``api`` never imports ``reconciler``).

Writes need the ``admin`` role, reads ``member``; worker keys get 403 and another team's resource is a
404. Request bodies are strict: unknown fields are a 422 naming them, so a typo never silently falls
back to a default such as ``auth_mode: token``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from api import BadRequest, PayloadTooLarge, ValidationFailed
from api.problems import field_error, read_json_object

PREFIX = "/api/v1"
MAX_BODY = 65_536


def fail_on(errors: list[dict[str, Any]]) -> None:
    """Raise one 422 listing every field error (the detail names the first)."""
    if errors:
        raise ValidationFailed(f"{errors[0]['field']}: {errors[0]['message']}", errors=errors)


def unknown_fields(body: dict[str, Any], allowed: set[str]) -> list[dict[str, Any]]:
    allowed_list = ", ".join(sorted(allowed))
    return [field_error(k, f"unknown field; allowed: {allowed_list}") for k in sorted(set(body) - allowed)]


def optional_string(body: dict[str, Any], name: str, errors: list[dict[str, Any]]) -> str | None:
    """A string field; absent, null or blank give None (so a blank secret means "not given")."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        errors.append(field_error(name, "must be a string"))
        return None
    return value.strip() or None


async def read_optional_json(request: web.Request) -> dict[str, Any]:
    """A JSON object body, or ``{}`` when the body is empty (``POST .../rotate-secret`` needs none)."""
    if request.content_length == 0 or not request.body_exists:
        return {}
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise PayloadTooLarge(f"body exceeds {MAX_BODY} bytes")
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


async def read_body(request: web.Request) -> dict[str, Any]:
    return await read_json_object(request, max_bytes=MAX_BODY)


def setup(app: web.Application) -> None:
    from api.management import deliveries, secrets, validate, webhooks

    for module in (webhooks, deliveries, secrets, validate):
        module.setup(app)
