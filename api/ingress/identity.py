"""Delivery identity (docs/ingress.md, "Delivery identity and duplicates"): the key that makes a sender's
retries duplicates.

The identity must come from material the webhook authenticates, or a captured request could be replayed
as a "new" delivery just by changing an unauthenticated header:

- ``signature`` webhooks (:func:`signed_delivery_identity`): the delivery id the signature covers
  (Standard Webhooks' ``webhook-id``/``svix-id``), else a hash of the signed body. No header outside
  the signed content counts - not ``X-Factory-Delivery-Id``, not a provider's unsigned id header
  (``X-GitHub-Delivery``...), not a ``deliveryIdHeader`` (which can only ever repeat the signed id).
- ``token`` and ``url_token`` webhooks (:func:`delivery_identity`): the credential authenticates the
  sender, not the request, so a sender-chosen header is as trustworthy as anything else it sends:
  the webhook's ``deliveryIdHeader``, then ``X-Factory-Delivery-Id``, else a hash of the body.
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


def delivery_identity(headers: Mapping[str, str], body: bytes, *, delivery_id_header: str | None) -> str:
    """The identity of a ``token``/``url_token`` delivery: the first of the webhook's
    ``deliveryIdHeader``, ``X-Factory-Delivery-Id`` and the body hash. Header names match
    case-insensitively; the first of repeated headers wins.

    Also the label of a rejected delivery of any mode (it identifies nothing there: only Accepted
    entries are deduplicated).
    """
    lower: dict[str, str] = {}
    for key, value in headers.items():
        lower.setdefault(str(key).lower(), value)
    candidates = (
        lower.get(delivery_id_header.lower()) if delivery_id_header else None,
        lower.get(FACTORY_DELIVERY_ID_HEADER.lower()),
    )
    for candidate in candidates:
        found = normalize_id(candidate)
        if found is not None:
            return found
    return body_identity(body)


def signed_delivery_identity(body: bytes, *, signed_id: str | None) -> str:
    """The identity of a verified ``signature`` delivery: the id its signature covers
    (:attr:`api.ingress.signatures.Verification.signed_delivery_id`), else the hash of its body.

    A provider that signs only the body resends that same body on a retry, so the hash still makes
    retries duplicates, while a replayed request cannot become a new delivery.
    """
    return normalize_id(signed_id) or body_identity(body)
