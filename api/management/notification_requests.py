"""Notification endpoint request bodies, as pure functions (docs/management.md, "Notification endpoints").

The rules are the ones ``notifications/<name>.yaml`` definitions keep, from the same places: where a URL may
point (:func:`store.rules.urlpolicy.url_refusal`), what ``events`` and ``filter`` may hold
(:mod:`store.rules.notification_rules`), and a name as webhooks of the API take it. Bodies are checked without
I/O (:func:`parse_endpoint`); the signing secret needs the store (:func:`check_signing_secret`): a
``webhook``-scoped team secret (runs can never read it) in Standard Webhooks form, checked as a
``standard_webhooks`` webhook's secret is (:func:`api.management.webhook_rules.secret_problem`).

Bodies are strict (an unknown field is a 422) and every field problem is reported at once. The secret is
``secretName``, as in the definition file; ``secret_name``, as endpoints are shown, is accepted too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api.errors import ValidationFailed
from api.http.bodies import fail_on, field_error, unknown_fields
from api.management.webhook_rules import SIGNATURE, check_name, secret_problem
from store import secrets as secret_store
from store.crypto import SecretBox
from store.models import NotificationEndpoint
from store.rules.notification_rules import RuleError, canonical_events, canonical_filter
from store.rules.urlpolicy import url_refusal

MAX_ENDPOINTS = 20  # per factory, as for definitions (docs/notifications.md, "Bounds and settings")
# Bounds of schemas/notification.schema.json, so a body the API takes is one a definition could hold.
MAX_DESCRIPTION = 4000
MAX_FILTER_ITEMS, MAX_FILTER_NAME = 100, 200
SECRET_FIELDS = ("secretName", "secret_name")
UPDATE_FIELDS = frozenset({"url", *SECRET_FIELDS, "events", "filter", "enabled", "description"})
CREATE_FIELDS = UPDATE_FIELDS | {"name"}


@dataclass(frozen=True)
class EndpointBody:
    """A checked create or update body. For an update, ``given`` holds the fields sent (canonical names:
    ``secret_name`` for either spelling), so ``filter``/``description`` sent as null clear them."""

    given: frozenset[str]
    name: str | None = None
    url: str | None = None
    secret_name: str | None = None
    secret_field: str = "secretName"  # noqa: S105 - the spelling the client used, for its field errors
    events: list[str] | None = None
    filter: dict[str, list[str]] | None = None
    enabled: bool | None = None
    description: str | None = None


def _url(value: object, errors: list[dict[str, Any]]) -> str | None:
    if not isinstance(value, str) or not value:
        errors.append(field_error("url", "is required: an https:// URL (http:// only to a loopback host)"))
        return None
    refusal = url_refusal(value)
    if refusal is not None:
        errors.append(field_error("url", refusal))
        return None
    return value


def _secret(body: dict[str, Any], errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """(the field's spelling, the secret name or None)."""
    sent = [f for f in SECRET_FIELDS if f in body]
    if len(sent) > 1:
        errors.append(field_error("secret_name", "give secretName or secret_name, not both"))
        return sent[0], None
    field = sent[0] if sent else SECRET_FIELDS[0]
    value = body.get(field)
    if not isinstance(value, str) or not secret_store.NAME_RE.match(value):
        errors.append(
            field_error(
                field,
                "is required: the name of a webhook-scoped team secret (letters, digits, '.', '_' or '-',"
                " 1-200, starting alnum) holding a Standard Webhooks whsec_ secret",
            )
        )
        return field, None
    return field, value


def _rules(
    body: dict[str, Any], errors: list[dict[str, Any]]
) -> tuple[list[str] | None, dict[str, list[str]] | None]:
    """Canonical ``events`` and ``filter`` of those given (None for an absent or refused one)."""
    events: list[str] | None = None
    flt: dict[str, list[str]] | None = None
    if "events" in body:
        try:
            events = canonical_events(body["events"])
        except RuleError as exc:
            errors.append(field_error(exc.field, str(exc)))
    if "filter" in body:
        try:
            flt = canonical_filter(body["filter"])
        except RuleError as exc:
            errors.append(field_error(exc.field, str(exc)))
        for key, names in (flt or {}).items():
            if len(names) > MAX_FILTER_ITEMS or any(len(n) > MAX_FILTER_NAME for n in names):
                message = f"at most {MAX_FILTER_ITEMS} names of at most {MAX_FILTER_NAME} characters"
                errors.append(field_error(f"filter.{key}", message))
    return events, flt


def _description(value: object, errors: list[dict[str, Any]]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION:
        errors.append(field_error("description", f"must be a string of at most {MAX_DESCRIPTION} characters"))
        return None
    return value.strip() or None


def parse_endpoint(body: dict[str, Any], *, create: bool) -> EndpointBody:
    """Check a create body (``name``, ``url``, ``secretName`` and ``events`` required) or an update body
    (at least one field; the name is the endpoint's identity and never changes); one 422 lists every
    problem."""
    if create:
        errors = unknown_fields(body, set(CREATE_FIELDS))
    else:
        errors = unknown_fields({k: v for k, v in body.items() if k != "name"}, set(UPDATE_FIELDS))
        if "name" in body:
            errors.append(
                field_error("name", "cannot change: create an endpoint with the new name and delete this one")
            )
        elif not body:
            errors.append(field_error("body", f"give at least one of: {', '.join(sorted(UPDATE_FIELDS))}"))
    name = check_name(body.get("name"), errors) if create else None
    url = _url(body.get("url"), errors) if create or "url" in body else None
    secret_field, secret_name = (
        _secret(body, errors) if create or any(f in body for f in SECRET_FIELDS) else ("secretName", None)
    )
    if create and "events" not in body:
        errors.append(field_error("events", "is required: run states (SUCCEEDED, FAILED...) or run.*"))
    events, flt = _rules(body, errors)
    enabled = body.get("enabled")
    if "enabled" in body and not isinstance(enabled, bool):
        errors.append(field_error("enabled", "must be true or false"))
    description = _description(body.get("description"), errors)
    fail_on(errors)
    given = {("secret_name" if k in SECRET_FIELDS else k) for k in body}
    return EndpointBody(
        given=frozenset(given),
        name=name,
        url=url,
        secret_name=secret_name,
        secret_field=secret_field,
        events=events,
        filter=flt if flt is not None or not create else {},
        enabled=enabled if isinstance(enabled, bool) else None,
        description=description,
    )


async def check_signing_secret(
    session: AsyncSession, box: SecretBox, team_id: str, name: str, field: str
) -> None:
    """422 on ``field`` unless team secret ``name`` exists, is ``webhook``-scoped and is a whsec_ secret."""
    row = await secret_store.get(session, team_id, name)
    if row is None:
        problem: str | None = (
            f"team secret {name!r} does not exist: create it first (a whsec_ secret, scope webhook)"
        )
    elif secret_store.webhook_problem(name, row.scope) is not None:
        problem = (
            f"team secret {name!r} may not sign notifications (scope: {row.scope}): runs can read run"
            " secrets; use a webhook-scoped secret"
        )
    else:
        value, _ = await secret_store.reveal(session, box, team_id, name)
        shape = secret_problem(SIGNATURE, "standard_webhooks", value)
        problem = f"team secret {name!r} {shape}" if shape else None
    if problem is not None:
        raise ValidationFailed(problem, errors=[field_error(field, problem)])


def apply_update(row: NotificationEndpoint, spec: EndpointBody) -> bool:
    """Write the fields an update gave onto ``row``; whether anything changed."""
    changes: dict[str, Any] = {}
    for field in ("url", "secret_name", "events", "filter", "enabled"):
        value = getattr(spec, field)
        if field in spec.given and value is not None:
            changes[field] = value
    if "description" in spec.given:
        changes["description"] = spec.description
    changed = False
    for field, value in changes.items():
        if getattr(row, field) != value:
            setattr(row, field, value)
            changed = True
    return changed


__all__ = [
    "CREATE_FIELDS",
    "MAX_ENDPOINTS",
    "UPDATE_FIELDS",
    "EndpointBody",
    "apply_update",
    "check_signing_secret",
    "parse_endpoint",
]
