"""Webhook request rules, as pure functions (no I/O): names, auth modes, schemes and secret shapes.

A secret must fit the webhook that uses it (docs/definitions.md, "Online checks"): a ``url_token`` secret
travels in the
URL, so it must be URL-safe (``[A-Za-z0-9._~-]+``); a Standard Webhooks secret is ``whsec_`` + base64 of
24-64 bytes. The service generates ``token``/``url_token`` secrets and, when left blank, Standard
Webhooks ones; other providers issue their own (given at creation, in a second step, or on rotation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from api.errors import ValidationFailed
from api.http.bodies import fail_on, field_error, optional_string, unknown_fields
from api.ingress.signatures import generate_standard_webhooks_secret
from api.ingress.signatures import standard_webhooks_secret_ok as sw_secret_ok
from store import secrets as secret_store
from store.rules.vocabulary import SIGNATURE_SCHEMES as SCHEMES
from store.rules.vocabulary import canonical_scheme

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
HEADER_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,200}$")
AUTH_MODES = ("token", "url_token", "signature")
TOKEN, URL_TOKEN, SIGNATURE = AUTH_MODES
MAX_WEBHOOKS = 20
_CREATE_FIELDS = {"name", "auth_mode", "signature_scheme", "secret", "secret_name", "delivery_id_header"}
_NAME_RULE = "lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters"


@dataclass(frozen=True)
class NewWebhook:
    """A validated create request."""

    name: str
    auth_mode: str
    signature_scheme: str | None
    secret: str | None
    secret_name: str
    delivery_id_header: str | None


def suggested_secret_name(name: str) -> str:
    return f"webhook-{name}-secret"


def secret_problem(auth_mode: str, scheme: str | None, value: str) -> str | None:
    """Why ``value`` cannot be this webhook's secret (docs/definitions.md, "Online checks"), or None."""
    if auth_mode == URL_TOKEN and not secret_store.URL_SAFE_RE.match(value):
        return "is not URL-safe: a url_token secret may only hold A-Z, a-z, 0-9, '.', '_', '~' and '-'"
    if scheme == "standard_webhooks" and not sw_secret_ok(value):
        return "is not a Standard Webhooks secret: expected 'whsec_' + base64 of 24-64 bytes"
    return None


def generated_secret(auth_mode: str, scheme: str | None) -> str | None:
    """A service-generated value, or None when the provider issues the secret (signature, not Standard)."""
    if auth_mode in (TOKEN, URL_TOKEN):
        return secret_store.generate_value()
    if scheme == "standard_webhooks":
        return generate_standard_webhooks_secret()
    return None


def check_name(value: object, errors: list[dict[str, Any]]) -> str | None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        errors.append(field_error("name", f"is required: {_NAME_RULE}"))
        return None
    return value


def parse_create(body: dict[str, Any]) -> NewWebhook:
    """Validate a create body; raises one 422 listing every field problem."""
    errors = unknown_fields(body, _CREATE_FIELDS)
    name = check_name(body.get("name"), errors)
    mode = body.get("auth_mode", TOKEN)
    if mode not in AUTH_MODES:
        errors.append(field_error("auth_mode", f"must be one of {', '.join(AUTH_MODES)}"))
    raw_scheme = optional_string(body, "signature_scheme", errors)
    scheme = canonical_scheme(raw_scheme) if raw_scheme else None
    if mode == SIGNATURE and raw_scheme is None:
        errors.append(
            field_error("signature_scheme", f"is required with auth_mode signature: {', '.join(SCHEMES)}")
        )
    elif raw_scheme is not None and mode in (TOKEN, URL_TOKEN):
        errors.append(field_error("signature_scheme", "is only used with auth_mode signature"))
    elif raw_scheme is not None and scheme is None:
        errors.append(field_error("signature_scheme", f"unknown scheme; use one of {', '.join(SCHEMES)}"))
    secret = optional_string(body, "secret", errors)
    if secret is not None and mode in (TOKEN, URL_TOKEN):
        errors.append(
            field_error(
                "secret", f"the service generates {mode} secrets; reference your own through secret_name"
            )
        )
    elif secret is not None:
        problem = secret_problem(str(mode), scheme, secret)
        if problem is None and len(secret.encode("utf-8")) > secret_store.MAX_VALUE_BYTES:
            problem = f"is longer than {secret_store.MAX_VALUE_BYTES} bytes"
        if problem:
            errors.append(field_error("secret", problem))
    secret_name = optional_string(body, "secret_name", errors)
    if secret_name is not None and not secret_store.NAME_RE.match(secret_name):
        errors.append(
            field_error("secret_name", "use letters, digits, '.', '_' or '-' (1-200, starting alnum)")
        )
    header = optional_string(body, "delivery_id_header", errors)
    if header is not None and not HEADER_RE.match(header):
        errors.append(
            field_error("delivery_id_header", "must be an HTTP header name (at most 200 characters)")
        )
    fail_on(errors)
    assert name is not None
    return NewWebhook(name, str(mode), scheme, secret, secret_name or suggested_secret_name(name), header)


def new_secret_value(auth_mode: str, scheme: str | None, given: str | None) -> str:
    """A rotated or supplied value: generated, or the provider's signing secret (validated); 422 otherwise."""
    if given is not None and auth_mode != SIGNATURE:
        message = f"the service generates {auth_mode} secrets; send no secret to rotate"
        raise ValidationFailed(message, errors=[field_error("secret", message)])
    value = given or generated_secret(auth_mode, scheme)
    if value is None:
        message = f"{scheme} issues its own signing secret: pass the provider's new secret as secret"
        raise ValidationFailed(message, errors=[field_error("secret", message)])
    problem = secret_problem(auth_mode, scheme, value)
    if problem is None and len(value.encode("utf-8")) > secret_store.MAX_VALUE_BYTES:
        problem = f"is longer than {secret_store.MAX_VALUE_BYTES} bytes"
    if problem:
        raise ValidationFailed(f"secret {problem}", errors=[field_error("secret", problem)])
    return value
