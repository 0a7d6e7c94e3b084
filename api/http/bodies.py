"""JSON request bodies and the field errors of a 422: one reader and one error shape for every endpoint.

:func:`read_json_object` is the only place a request body becomes JSON, so a client gets the same 400
for the same mistake everywhere (empty, invalid JSON, not an object, over the depth and number limits of
:mod:`api.http.jsonlimits`) and the same 413 over an endpoint's size limit, which each caller states
explicitly. Field errors are ``{field, message}``
objects; handlers collect them all and raise one 422 (:func:`fail_on`), so a client sees every
problem at once instead of fixing them one request at a time.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.errors import BadRequest, PayloadTooLarge, ValidationFailed
from api.http.jsonlimits import InvalidJson, loads_limited

SMALL_BODY_BYTES = 65_536  # names, flags and secrets: management writes and worker-protocol calls


async def read_json_object(request: web.Request, *, max_bytes: int, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying what is wrong with it (413 over ``max_bytes``).

    ``optional``: an absent or blank body means ``{}``, for actions whose every field has a default
    (``rotate-secret``, a heartbeat); otherwise it is a 400. The limit is checked against
    ``Content-Length`` before anything is read.
    """
    if request.content_length is not None and request.content_length > max_bytes:
        raise PayloadTooLarge(f"body exceeds {max_bytes} bytes")
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise BadRequest("request body is empty; a JSON object is required")
    try:
        data = loads_limited(raw)
    except InvalidJson as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def field_error(field: str, message: str) -> dict[str, Any]:
    """One entry of a problem's ``errors`` list."""
    return {"field": field, "message": message}


def fail_on(errors: list[dict[str, Any]]) -> None:
    """Raise one 422 listing every field error (the detail names the first); no-op without errors."""
    if errors:
        raise ValidationFailed(f"{errors[0]['field']}: {errors[0]['message']}", errors=errors)


def unknown_fields(body: dict[str, Any], allowed: set[str]) -> list[dict[str, Any]]:
    """Field errors for keys outside ``allowed``: strict bodies, so a typo never falls back to a default."""
    allowed_list = ", ".join(sorted(allowed))
    return [field_error(k, f"unknown field; allowed: {allowed_list}") for k in sorted(set(body) - allowed)]


def optional_string(
    body: dict[str, Any], name: str, errors: list[dict[str, Any]], *, max_length: int | None = None
) -> str | None:
    """A string field, stripped; absent, null or blank give None (so a blank secret means "not given").

    A non-string, or one longer than ``max_length`` (before stripping), adds a field error.
    """
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        errors.append(field_error(name, "must be a string"))
        return None
    if max_length is not None and len(value) > max_length:
        errors.append(field_error(name, f"must be at most {max_length} characters"))
    return value.strip() or None
