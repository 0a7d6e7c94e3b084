"""Delivery identity: which id a delivery is deduplicated under (docs/ingress.md, "Delivery identity and
duplicates": first present wins)."""

from __future__ import annotations

import hashlib

from multidict import CIMultiDict, CIMultiDictProxy

from api.ingress.identity import FACTORY_DELIVERY_ID_HEADER, body_identity, delivery_identity, normalize_id

BODY = b'{"event":"push"}'


def identity(headers: dict[str, str], *, header: str | None = None, provider: str | None = None) -> str:
    return delivery_identity(headers, BODY, delivery_id_header=header, provider_delivery_id=provider)


def test_sources_in_order_of_precedence() -> None:
    headers = {"X-Request-Id": "custom-1", FACTORY_DELIVERY_ID_HEADER: "factory-1"}
    assert identity(headers, header="X-Request-Id", provider="prov-1") == "custom-1"
    assert identity(headers, header="X-Missing", provider="prov-1") == "prov-1"
    assert identity(headers, header=None, provider=None) == "factory-1"
    assert identity({}, header="X-Request-Id", provider=None) == body_identity(BODY)


def test_configured_header_is_ignored_when_not_configured() -> None:
    # A sender-set header only counts when the webhook names it in deliveryIdHeader.
    assert identity({"X-Request-Id": "custom-1"}) == body_identity(BODY)


def test_body_hash_makes_identical_bodies_duplicates() -> None:
    expected = "sha256_" + hashlib.sha256(BODY).hexdigest()[:40]
    assert identity({}) == expected == body_identity(BODY)
    assert len(expected) == 47
    assert delivery_identity({}, BODY + b" ", delivery_id_header=None, provider_delivery_id=None) != expected


def test_header_lookup_is_case_insensitive() -> None:
    assert identity({"x-request-id": "a"}, header="X-Request-ID") == "a"
    assert identity({"X-FACTORY-DELIVERY-ID": "b"}) == "b"
    proxy = CIMultiDictProxy(CIMultiDict([("X-Request-Id", "c"), ("x-request-id", "second")]))
    assert delivery_identity(proxy, BODY, delivery_id_header="x-request-id", provider_delivery_id=None) == "c"


def test_whitespace_is_stripped_and_blank_values_fall_through() -> None:
    headers = {"X-Request-Id": "   ", FACTORY_DELIVERY_ID_HEADER: "  f-1 \t"}
    assert identity(headers, header="X-Request-Id", provider="") == "f-1"
    assert identity({FACTORY_DELIVERY_ID_HEADER: ""}, provider=" \t") == body_identity(BODY)


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
