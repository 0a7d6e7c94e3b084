"""Delivery identity (docs/ingress.md, "Delivery identity and duplicates"): the key that makes a sender's
retries duplicates.

The first present source wins: the webhook's ``deliveryIdHeader``; the signature scheme's provider
delivery id (passed by the caller only for a verified signed delivery); ``X-Factory-Delivery-Id``;
else a hash of the body, so identical bodies without a sender id are duplicates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

FACTORY_DELIVERY_ID_HEADER = "X-Factory-Delivery-Id"
MAX_ID_LENGTH = 200
_PREFIX = "sha256_"


def body_identity(body: bytes) -> str:
    """``sha256_`` + the first 40 hex characters of SHA-256 of the raw body."""
    return _PREFIX + hashlib.sha256(body).hexdigest()[:40]


def normalize_id(value: str | None) -> str | None:
    """A sender-provided id as stored: stripped; None when absent or empty.

    Ids longer than 200 characters, or holding non-printable characters (controls, or undecodable
    bytes that aiohttp surrogate-escapes), become ``sha256_`` + 40 hex of SHA-256 of the value's
    bytes. Truncating instead could merge distinct ids into one and drop real deliveries as
    duplicates; hashing keeps them apart and keeps the stored id short and printable.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) <= MAX_ID_LENGTH and value.isprintable():
        return value
    return body_identity(value.encode("utf-8", "surrogateescape"))


def delivery_identity(
    headers: Mapping[str, str],
    body: bytes,
    *,
    delivery_id_header: str | None,
    provider_delivery_id: str | None,
) -> str:
    """The identity of one delivery; header names match case-insensitively.

    ``provider_delivery_id`` must be None unless the delivery's signature verified (see
    :attr:`api.ingress.signatures.Verification.provider_delivery_id`).
    """
    lower: dict[str, str] = {}
    for key, value in headers.items():
        lower.setdefault(str(key).lower(), value)  # first of repeated headers wins
    candidates = (
        lower.get(delivery_id_header.lower()) if delivery_id_header else None,
        provider_delivery_id,
        lower.get(FACTORY_DELIVERY_ID_HEADER.lower()),
    )
    for candidate in candidates:
        found = normalize_id(candidate)
        if found is not None:
            return found
    return body_identity(body)
