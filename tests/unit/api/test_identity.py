"""Delivery identity: which id a delivery is deduplicated under (docs/ingress.md, "Delivery identity and
duplicates"): for ``signature`` webhooks only signed material, for token modes the first present of the
sender's headers, else the body hash."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from api.ingress.identity import (
    FACTORY_DELIVERY_ID_HEADER,
    body_identity,
    delivery_identity,
    normalize_id,
    signed_delivery_identity,
)
from api.ingress.signatures import generate_standard_webhooks_secret, sign, verify
from store.rules.vocabulary import SIGNATURE_SCHEMES as SCHEMES

BODY = b'{"event":"push"}'
NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def identity(headers: dict[str, str], *, header: str | None = None) -> str:
    return delivery_identity(headers, BODY, delivery_id_header=header)


def test_token_modes_take_the_configured_header_then_the_factory_header_then_the_body_hash() -> None:
    headers = {"X-Request-Id": "custom-1", FACTORY_DELIVERY_ID_HEADER: "factory-1"}
    assert identity(headers, header="X-Request-Id") == "custom-1"
    assert identity(headers, header="X-Missing") == "factory-1"
    assert identity(headers, header=None) == "factory-1"
    assert identity({}, header="X-Request-Id") == body_identity(BODY)


def test_configured_header_is_ignored_when_not_configured() -> None:
    # A sender-set header only counts when the webhook names it in deliveryIdHeader.
    assert identity({"X-Request-Id": "custom-1"}) == body_identity(BODY)


def test_provider_headers_never_count_in_token_modes() -> None:
    assert identity({"X-GitHub-Delivery": "gh-1", "webhook-id": "msg-1"}) == body_identity(BODY)


def test_signed_identity_is_the_signed_id_else_the_body_hash() -> None:
    assert signed_delivery_identity(BODY, signed_id="msg_1") == "msg_1"
    assert signed_delivery_identity(BODY, signed_id=None) == body_identity(BODY)
    assert signed_delivery_identity(BODY, signed_id=" \t") == body_identity(BODY)
    assert signed_delivery_identity(BODY, signed_id="m" * 201) == body_identity(b"m" * 201)


def _secret(scheme: str) -> str:
    return generate_standard_webhooks_secret() if scheme == "standard_webhooks" else "provider-secret"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_replay_with_new_unsigned_ids_keeps_its_identity(scheme: str) -> None:
    """The finding: a captured signed request, resent with fresh ``X-Factory-Delivery-Id`` / provider id
    headers, must stay the same delivery (a duplicate), for every scheme."""
    secret = _secret(scheme)
    body = b'{"action": "create", "webhookTimestamp": %d}' % int(NOW.timestamp() * 1000)
    captured = sign(scheme, secret, body, NOW, "evt-1")
    first = verify(scheme, secret, captured, body, NOW)
    assert first.ok, first.reason
    original = signed_delivery_identity(body, signed_id=first.signed_delivery_id)
    for forged_header in (FACTORY_DELIVERY_ID_HEADER, "X-GitHub-Delivery", "Request-ID", "Linear-Delivery"):
        replay = captured | {forged_header: "evt-new", "X-Shopify-Webhook-Id": "evt-new"}
        again = verify(scheme, secret, replay, body, NOW)
        assert again.ok
        assert signed_delivery_identity(body, signed_id=again.signed_delivery_id) == original


def test_body_hash_makes_identical_bodies_duplicates() -> None:
    expected = "sha256_" + hashlib.sha256(BODY).hexdigest()[:40]
    assert identity({}) == expected == body_identity(BODY)
    assert len(expected) == 47
    assert delivery_identity({}, BODY + b" ", delivery_id_header=None) != expected


def test_header_lookup_is_case_insensitive() -> None:
    assert identity({"x-request-id": "a"}, header="X-Request-ID") == "a"
    assert identity({"X-FACTORY-DELIVERY-ID": "b"}) == "b"
    proxy = CIMultiDictProxy(CIMultiDict([("X-Request-Id", "c"), ("x-request-id", "second")]))
    assert delivery_identity(proxy, BODY, delivery_id_header="x-request-id") == "c"


def test_whitespace_is_stripped_and_blank_values_fall_through() -> None:
    headers = {"X-Request-Id": "   ", FACTORY_DELIVERY_ID_HEADER: "  f-1 \t"}
    assert identity(headers, header="X-Request-Id") == "f-1"
    assert identity({FACTORY_DELIVERY_ID_HEADER: ""}) == body_identity(BODY)


def test_over_long_ids_are_hashed_not_truncated() -> None:
    exact = "a" * 200
    assert identity({FACTORY_DELIVERY_ID_HEADER: exact}) == exact
    long_a, long_b = "a" * 200 + "-first", "a" * 200 + "-second"
    id_a, id_b = (
        identity({FACTORY_DELIVERY_ID_HEADER: long_a}),
        identity({FACTORY_DELIVERY_ID_HEADER: long_b}),
    )
    assert id_a != id_b  # truncation would have merged them into one duplicate
    assert id_a == "sha256_" + hashlib.sha256(long_a.encode()).hexdigest()[:40]
    assert identity({FACTORY_DELIVERY_ID_HEADER: long_a}) == id_a  # and stays stable across retries


def test_non_printable_ids_are_hashed() -> None:
    for raw in ("evt\x00", "evt\x1b[31m", "evt\udcff"):  # control chars, an undecodable byte from aiohttp
        result = normalize_id(raw)
        assert result is not None and result.startswith("sha256_") and result.isprintable()
    assert normalize_id("évènement 42") == "évènement 42"
    assert normalize_id(None) is None
