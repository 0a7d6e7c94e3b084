"""Signature schemes of ``signature`` webhooks: published vectors, and every way a delivery can fail."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from api.ingress.signatures import (
    bearer_token,
    delivery_id_header,
    generate_standard_webhooks_secret,
    sign,
    signs_delivery_id,
    standard_webhooks_secret_ok,
    token_matches,
    verify,
)
from store.rules.vocabulary import SIGNATURE_SCHEMES as SCHEMES
from store.rules.vocabulary import canonical_scheme

_VECTOR_FILES = [
    Path(__file__).resolve().parents[2]
    / "testdata"
    / "signature-vectors.json",  # tests/testdata/ in the repo
    Path("/work/shared/testdata/signature-vectors.json"),  # the design contract's copy
]
VECTORS = json.loads(next(p for p in _VECTOR_FILES if p.exists()).read_text())
NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PLAIN_SECRET = "s3cr3t-provider-signing-key"


def secret_for(scheme: str) -> str:
    return SW_SECRET if scheme == "standard_webhooks" else PLAIN_SECRET


def body_at(when: dt.datetime, **extra: object) -> bytes:
    """A JSON body that also satisfies Linear's signed ``webhookTimestamp`` (milliseconds)."""
    return json.dumps(
        {"action": "create", "webhookTimestamp": int(when.timestamp() * 1000), **extra}
    ).encode()


def at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


# --- published vectors ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["standard_webhooks"], ids=lambda c: c["webhook-id"])
@pytest.mark.parametrize("skew", [0, 299, -299])
def test_standard_webhooks_published_vectors_verify(case: dict[str, str], skew: int) -> None:
    headers = {k: case[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    now = at(int(case["webhook-timestamp"]) + skew)
    result = verify("standard_webhooks", case["secret"], headers, case["body"].encode(), now)
    assert result.ok, result.reason
    assert result.signed_delivery_id == case["webhook-id"]


@pytest.mark.parametrize("case", VECTORS["standard_webhooks"], ids=lambda c: c["webhook-id"])
def test_standard_webhooks_sign_reproduces_published_vectors(case: dict[str, str]) -> None:
    headers = sign(
        "standard_webhooks",
        case["secret"],
        case["body"].encode(),
        at(int(case["webhook-timestamp"])),
        case["webhook-id"],
    )
    assert headers == {k: case[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}


@pytest.mark.parametrize("case", VECTORS["standard_webhooks"], ids=lambda c: c["webhook-id"])
def test_svix_header_names_of_published_vectors_verify(case: dict[str, str]) -> None:
    headers = {
        "svix-id": case["webhook-id"],
        "svix-timestamp": case["webhook-timestamp"],
        "svix-signature": case["webhook-signature"],
    }
    result = verify(
        "svix", case["secret"], headers, case["body"].encode(), at(int(case["webhook-timestamp"]))
    )
    assert result.ok, result.reason
    assert result.signed_delivery_id == case["webhook-id"]


def test_github_published_vector() -> None:
    case = VECTORS["github"][0]
    headers = {"X-Hub-Signature-256": case["X-Hub-Signature-256"], "X-GitHub-Delivery": "d-1"}
    result = verify("github", case["secret"], headers, case["body"].encode(), NOW)
    assert result.ok and result.signed_delivery_id is None  # X-GitHub-Delivery is not signed
    assert sign("github", case["secret"], case["body"].encode(), NOW) == {
        "X-Hub-Signature-256": case["X-Hub-Signature-256"]
    }


def test_slack_published_vector() -> None:
    case = VECTORS["slack"][0]
    headers = {k: case[k] for k in ("X-Slack-Request-Timestamp", "X-Slack-Signature")}
    now = at(int(case["X-Slack-Request-Timestamp"]) + 60)
    assert verify("slack", case["secret"], headers, case["body"].encode(), now).ok
    assert sign("slack", case["secret"], case["body"].encode(), now - dt.timedelta(seconds=60)) == headers


def test_vectors_generated_with_official_libraries() -> None:
    """Made once with the ``standardwebhooks`` 1.1.0 and ``stripe`` 16.1.0 Python libraries."""
    body = b'{"type":"invoice.paid","id":"evt_1"}'
    sw = {
        "webhook-id": "msg_official",
        "webhook-timestamp": "1700000000",
        "webhook-signature": "v1,YxEMS4B/EFn7PwH4zA3wd0nxi/ZDiH/mdPBvvX+L0MQ=",
    }
    assert verify("standard_webhooks", SW_SECRET, sw, body, at(1700000000)).ok
    stripe = {
        "Stripe-Signature": "t=1700000000,v1=19c9c710738042b350c9917ce4d301c78cad78f127117a9a5d73a19565a33eec"
    }
    assert verify("stripe", "whsec_stripe_test_secret", stripe, body, at(1700000010)).ok


# --- each scheme's documented construction (independent of the module's own signer) ------------------


def _hex(key: bytes, data: bytes, algo: str = "sha256") -> str:
    return hmac.new(key, data, algo).hexdigest()


def test_sign_follows_the_documented_construction_for_every_scheme() -> None:
    body, key, ts = b'{"x": 1}', PLAIN_SECRET.encode(), int(NOW.timestamp())
    sw_key = base64.b64decode(SW_SECRET.removeprefix("whsec_"))
    sw_mac = base64.b64encode(hmac.new(sw_key, b"m1.%d." % ts + body, "sha256").digest()).decode()
    expected = {
        "standard_webhooks": {
            "webhook-id": "m1",
            "webhook-timestamp": str(ts),
            "webhook-signature": f"v1,{sw_mac}",
        },
        "stripe": {"Stripe-Signature": f"t={ts},v1={_hex(key, b'%d.' % ts + body)}"},
        "github": {"X-Hub-Signature-256": "sha256=" + _hex(key, body), "X-GitHub-Delivery": "m1"},
        "sentry": {"Sentry-Hook-Signature": _hex(key, body), "Request-ID": "m1"},
        "pagerduty": {"X-PagerDuty-Signature": "v1=" + _hex(key, body)},
        "vercel": {"x-vercel-signature": _hex(key, body, "sha1")},
        "slack": {
            "X-Slack-Signature": "v0=" + _hex(key, b"v0:%d:" % ts + body),
            "X-Slack-Request-Timestamp": str(ts),
        },
        "linear": {"Linear-Signature": _hex(key, body), "Linear-Delivery": "m1"},
        "shopify": {
            "X-Shopify-Hmac-SHA256": base64.b64encode(hmac.new(key, body, "sha256").digest()).decode(),
            "X-Shopify-Webhook-Id": "m1",
        },
    }
    assert set(expected) == set(SCHEMES)
    for scheme, headers in expected.items():
        assert sign(scheme, secret_for(scheme), body, NOW, "m1") == headers, scheme


# --- round trips and failures, every scheme -----------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_round_trip_and_signed_delivery_id(scheme: str) -> None:
    body = body_at(NOW)
    signed = sign(scheme, secret_for(scheme), body, NOW, "evt-42")
    result = verify(scheme, secret_for(scheme), signed, body, NOW)
    assert result.ok, result.reason
    assert result.reason is None
    # Only Standard Webhooks signs its id; the others' id headers are sent but not covered.
    assert signs_delivery_id(scheme) == (scheme == "standard_webhooks")
    assert result.signed_delivery_id == ("evt-42" if signs_delivery_id(scheme) else None)
    if delivery_id_header(scheme) and not signs_delivery_id(scheme):
        assert signed[delivery_id_header(scheme) or ""] == "evt-42"
        replayed = signed | {delivery_id_header(scheme) or "": "evt-43"}  # still verifies: not signed
        assert verify(scheme, secret_for(scheme), replayed, body, NOW).ok


def test_a_changed_standard_webhooks_id_breaks_the_signature() -> None:
    body = body_at(NOW)
    for family in ("webhook", "svix"):
        signed = {
            k.replace("webhook-", f"{family}-"): v
            for k, v in sign("standard_webhooks", SW_SECRET, body, NOW, "evt-1").items()
        }
        replayed = signed | {f"{family}-id": "evt-2"}
        assert not verify("standard_webhooks", SW_SECRET, replayed, body, NOW).ok


def test_only_the_verified_family_id_is_the_signed_id() -> None:
    # webhook-* headers verify; an unsigned svix-id beside them is not the delivery's id.
    body = body_at(NOW)
    headers = sign("standard_webhooks", SW_SECRET, body, NOW, "evt-1") | {"svix-id": "evt-forged"}
    assert verify("standard_webhooks", SW_SECRET, headers, body, NOW).signed_delivery_id == "evt-1"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_tampered_body_is_rejected(scheme: str) -> None:
    body = body_at(NOW)
    headers = sign(scheme, secret_for(scheme), body, NOW)
    tampered = body.replace(b"create", b"delete")
    result = verify(scheme, secret_for(scheme), headers, tampered, NOW)
    assert not result.ok and result.reason == "signature mismatch"
    assert result.signed_delivery_id is None
    # Re-serialised JSON with the same meaning is a different byte string: also rejected.
    reserialised = json.dumps(json.loads(body), indent=1).encode()
    assert not verify(scheme, secret_for(scheme), headers, reserialised, NOW).ok


@pytest.mark.parametrize("scheme", SCHEMES)
def test_wrong_secret_is_rejected(scheme: str) -> None:
    body = body_at(NOW)
    other = generate_standard_webhooks_secret() if scheme == "standard_webhooks" else "another-secret"
    result = verify(scheme, other, sign(scheme, secret_for(scheme), body, NOW), body, NOW)
    assert not result.ok and result.reason == "signature mismatch"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_unsigned_delivery_is_rejected(scheme: str) -> None:
    result = verify(scheme, secret_for(scheme), {"Content-Type": "application/json"}, body_at(NOW), NOW)
    assert not result.ok
    assert result.reason is not None and result.reason.startswith("missing")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_missing_or_blank_header_is_rejected(scheme: str) -> None:
    body = body_at(NOW)
    headers = sign(scheme, secret_for(scheme), body, NOW)
    for name in headers:
        without = {k: v for k, v in headers.items() if k != name}
        assert not verify(scheme, secret_for(scheme), without, body, NOW).ok, name
        assert not verify(scheme, secret_for(scheme), {**headers, name: "   "}, body, NOW).ok, name


GARBAGE = [
    "",
    "garbage",
    "v1,",
    "v1,!!!not-base64!!!",
    "sha256=",
    "sha256=zz",
    "t=,v1=",
    "t=abc,v1=00",
    "t=-5,v1=00",
    "t=99999999999999999999999,v1=00",
    "v0=",
    "=,=,=",
    "é漢字\udcff",
    "v1," + "A" * 5000,
    "\uff11\uff12\uff13\uff14",  # full-width digits: int() accepts them, a timestamp parser must not
]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_malformed_headers_fail_closed_without_raising(scheme: str) -> None:
    body = body_at(NOW)
    headers = sign(scheme, secret_for(scheme), body, NOW)
    for name in headers:
        for junk in GARBAGE:
            result = verify(scheme, secret_for(scheme), {**headers, name: junk}, body, NOW)
            assert not result.ok, (name, junk)
            assert result.reason


@settings(max_examples=150, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), value=st.text(max_size=80), body=st.binary(max_size=64))
def test_arbitrary_header_values_never_raise(scheme: str, value: str, body: bytes) -> None:
    headers = dict.fromkeys(sign(scheme, secret_for(scheme), b"{}", NOW), value)
    assert not verify(scheme, secret_for(scheme), headers, body, NOW).ok


# --- time windows -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "limit", "future_limit"),
    [("standard_webhooks", 300, 300), ("stripe", 300, 300), ("slack", 300, 300)],
)
def test_header_timestamp_windows(scheme: str, limit: int, future_limit: int) -> None:
    body = b'{"a":1}'
    headers = sign(scheme, secret_for(scheme), body, NOW)

    def check(offset: float) -> str | None:
        result = verify(scheme, secret_for(scheme), headers, body, NOW + dt.timedelta(seconds=offset))
        return "ok" if result.ok else result.reason

    assert check(limit) == "ok"
    assert check(limit + 1) == "timestamp too old"
    assert check(-future_limit) == "ok"
    assert check(-future_limit - 1) == "timestamp in the future"


def test_linear_webhook_timestamp_window_is_sixty_seconds() -> None:
    body = body_at(NOW)
    headers = sign("linear", PLAIN_SECRET, body, NOW)
    assert verify("linear", PLAIN_SECRET, headers, body, NOW + dt.timedelta(seconds=60)).ok
    late = verify("linear", PLAIN_SECRET, headers, body, NOW + dt.timedelta(seconds=61))
    assert late.reason == "timestamp too old"
    early = verify("linear", PLAIN_SECRET, headers, body, NOW - dt.timedelta(seconds=61))
    assert early.reason == "timestamp in the future"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1,2]",
        b'{"action":"x"}',
        b'{"webhookTimestamp":"1"}',
        b'{"webhookTimestamp":true}',
        b'{"webhookTimestamp":NaN}',
        b"\xff\xfe",
    ],
)
def test_linear_body_without_a_usable_timestamp_is_rejected(body: bytes) -> None:
    headers = sign("linear", PLAIN_SECRET, body, NOW)
    result = verify("linear", PLAIN_SECRET, headers, body, NOW)
    assert not result.ok and result.reason


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"webhookTimestamp": 1, "n": ' + b"9" * 5000 + b"}",
        b'{"webhookTimestamp": 1e400}',
    ],
    ids=["syntax", "not-utf8", "deep", "long-number", "overflow"],
)
def test_linear_signed_body_that_is_not_acceptable_json_is_an_invalid_body(body: bytes) -> None:
    # The MAC is good, so this is not an authentication failure: the ingress answers 400, never 500.
    headers = sign("linear", PLAIN_SECRET, body, NOW)
    result = verify("linear", PLAIN_SECRET, headers, body, NOW)
    assert (result.ok, result.invalid_body, result.reason) == (False, True, "body is not valid JSON")
    forged = verify("linear", PLAIN_SECRET, {"Linear-Signature": "0" * 64}, body, NOW)
    assert (forged.ok, forged.invalid_body) == (False, False)  # a bad MAC stays an auth failure


@pytest.mark.parametrize("scheme", ["github", "sentry", "pagerduty", "vercel", "shopify"])
def test_schemes_without_a_window_accept_old_signatures(scheme: str) -> None:
    body = body_at(NOW)
    headers = sign(scheme, PLAIN_SECRET, body, NOW)
    assert verify(scheme, PLAIN_SECRET, headers, body, NOW + dt.timedelta(days=30)).ok


def test_naive_now_is_taken_as_utc() -> None:
    body = b"{}"
    headers = sign("stripe", PLAIN_SECRET, body, NOW)
    assert verify("stripe", PLAIN_SECRET, headers, body, NOW.replace(tzinfo=None)).ok


# --- multiple signatures, header variants, aliases ---------------------------------------------------


def test_standard_webhooks_any_listed_v1_signature_passes() -> None:
    body = b'{"a":1}'
    headers = sign("standard_webhooks", SW_SECRET, body, NOW, "msg_1")
    good = headers["webhook-signature"]
    wrong = "v1," + base64.b64encode(b"x" * 32).decode()
    for listed in (f"{wrong} {good}", f"v1a,abc {good}", f"{good} {wrong}", f"  {wrong}   {good}  "):
        assert verify("standard_webhooks", SW_SECRET, {**headers, "webhook-signature": listed}, body, NOW).ok
    only_others = f"{wrong} v1a,{good[3:]}"
    assert not verify(
        "standard_webhooks", SW_SECRET, {**headers, "webhook-signature": only_others}, body, NOW
    ).ok


def test_standard_webhooks_signature_binds_id_and_timestamp() -> None:
    body = b'{"a":1}'
    headers = sign("standard_webhooks", SW_SECRET, body, NOW, "msg_1")
    assert not verify("standard_webhooks", SW_SECRET, {**headers, "webhook-id": "msg_2"}, body, NOW).ok
    later = str(int(headers["webhook-timestamp"]) + 1)
    assert not verify("standard_webhooks", SW_SECRET, {**headers, "webhook-timestamp": later}, body, NOW).ok


def test_stripe_and_pagerduty_accept_one_valid_among_several() -> None:
    body = b'{"a":1}'
    stripe = sign("stripe", PLAIN_SECRET, body, NOW)["Stripe-Signature"]
    t, v1 = stripe.split(",")
    several = f"{t},v1={'0' * 64},{v1},v0=abc"
    assert verify("stripe", PLAIN_SECRET, {"Stripe-Signature": several}, body, NOW).ok
    assert not verify("stripe", PLAIN_SECRET, {"Stripe-Signature": f"{t},v0={v1[3:]}"}, body, NOW).ok
    pd = sign("pagerduty", PLAIN_SECRET, body, NOW)["X-PagerDuty-Signature"]
    assert verify("pagerduty", PLAIN_SECRET, {"X-PagerDuty-Signature": f"v1={'a' * 64}, {pd}"}, body, NOW).ok


def test_svix_headers_round_trip_with_svix_id_as_provider_id() -> None:
    body = b'{"a":1}'
    signed = sign("svix", SW_SECRET, body, NOW, "msg_svix")
    headers = {k.replace("webhook-", "svix-"): v for k, v in signed.items()}
    result = verify("standard_webhooks", SW_SECRET, headers, body, NOW)
    assert result.ok and result.signed_delivery_id == "msg_svix"


def test_aliases_and_unknown_schemes() -> None:
    assert canonical_scheme("standard-webhooks") == "standard_webhooks"
    assert canonical_scheme("svix") == "standard_webhooks"
    assert canonical_scheme("github") == "github"
    assert canonical_scheme("gitlab") is None
    assert delivery_id_header("svix") == "webhook-id"
    assert delivery_id_header("stripe") is None
    body = b"{}"
    headers = sign("standard-webhooks", SW_SECRET, body, NOW)
    assert verify("svix", SW_SECRET, headers, body, NOW).ok
    assert verify("gitlab", PLAIN_SECRET, headers, body, NOW).reason == "unknown signature scheme"
    with pytest.raises(ValueError, match="unknown"):
        sign("gitlab", PLAIN_SECRET, body, NOW)


def test_header_names_are_case_insensitive_in_dicts_and_multidicts() -> None:
    body = body_at(NOW)
    for scheme in SCHEMES:
        headers = sign(scheme, secret_for(scheme), body, NOW, "id-1")
        upper = {k.upper(): v for k, v in headers.items()}
        proxy = CIMultiDictProxy(CIMultiDict(headers))
        for variant in (upper, proxy):
            result = verify(scheme, secret_for(scheme), variant, body, NOW)
            assert result.ok, (scheme, result.reason)
            assert result.signed_delivery_id == ("id-1" if signs_delivery_id(scheme) else None)


# --- secrets ------------------------------------------------------------------------------------------


def test_unusable_secrets_fail_closed() -> None:
    body = b"{}"
    headers = sign("standard_webhooks", SW_SECRET, body, NOW)
    bad = verify("standard_webhooks", "whsec_***not base64***", headers, body, NOW)
    assert not bad.ok and bad.reason == "secret is not a valid Standard Webhooks secret"
    with pytest.raises(ValueError):
        sign("standard_webhooks", "whsec_***", body, NOW)
    for scheme in SCHEMES:
        assert verify(scheme, "", sign(scheme, secret_for(scheme), body, NOW), body, NOW).reason == (
            "no secret configured"
        )
    with pytest.raises(ValueError):
        sign("github", "", body, NOW)


def test_failure_reasons_never_reveal_the_secret_or_header_values() -> None:
    secret_b64 = base64.b64encode(b"k" * 32).decode()
    sw_secret = "whsec_" + secret_b64
    reasons: set[str] = set()
    for scheme in SCHEMES:
        secret = sw_secret if scheme == "standard_webhooks" else "TOPSECRET-value"
        body = body_at(NOW)
        headers = sign(scheme, secret, body, NOW)
        attempts = [
            (secret, headers, b"tampered"),
            (secret, {k: f"{v}TOPSECRET" for k, v in headers.items()}, body),
            (secret, {}, body),
            (secret, headers, body),  # at a stale time below
        ]
        for attempt_secret, attempt_headers, attempt_body in attempts:
            for when in (NOW, NOW + dt.timedelta(hours=1)):
                result = verify(scheme, attempt_secret, attempt_headers, attempt_body, when)
                if not result.ok:
                    assert result.reason
                    reasons.add(result.reason)
    assert reasons
    for reason in reasons:
        assert "TOPSECRET" not in reason and secret_b64 not in reason and "whsec_" not in reason
        assert len(reason) < 60


def test_standard_webhooks_secret_format() -> None:
    def whsec(n: int) -> str:
        return "whsec_" + base64.b64encode(b"\x01" * n).decode()

    assert standard_webhooks_secret_ok(SW_SECRET)
    assert standard_webhooks_secret_ok(whsec(24)) and standard_webhooks_secret_ok(whsec(64))
    assert not standard_webhooks_secret_ok(whsec(23)) and not standard_webhooks_secret_ok(whsec(65))
    assert not standard_webhooks_secret_ok(whsec(32)[6:])  # no prefix
    assert not standard_webhooks_secret_ok("whsec_not*base64")
    assert not standard_webhooks_secret_ok("whsec_")
    generated = {generate_standard_webhooks_secret() for _ in range(20)}
    assert len(generated) == 20 and all(standard_webhooks_secret_ok(s) for s in generated)


def test_generated_secret_signs_and_verifies() -> None:
    secret = generate_standard_webhooks_secret()
    body = b'{"hello":"world"}'
    assert verify("standard_webhooks", secret, sign("standard_webhooks", secret, body, NOW), body, NOW).ok


# --- bearer tokens ------------------------------------------------------------------------------------


def test_token_matches_only_the_exact_token() -> None:
    token = "tok_" + hashlib.sha256(b"x").hexdigest()
    assert token_matches(token, token)
    assert not token_matches(token, token[:-1])
    assert not token_matches(token, token + "x")
    assert not token_matches(token, token.upper())
    assert not token_matches(token, "")
    assert not token_matches(token, None)
    assert not token_matches("", "")
    assert token_matches("ünïcode", "ünïcode")
    assert not token_matches(token, "\udcff")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Bearer abc123", "abc123"),
        ("bearer abc123", "abc123"),
        ("BEARER   abc123  ", "abc123"),
        ("Basic abc123", None),
        ("Bearer", None),
        ("Bearer    ", None),
        ("abc123", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token_parsing(value: str | None, expected: str | None) -> None:
    assert bearer_token(value) == expected


@pytest.mark.parametrize(
    ("scheme", "header"), [("standard_webhooks", "webhook-timestamp"), ("slack", "X-Slack-Request-Timestamp")]
)
def test_timestamps_must_be_plain_ascii_digits(scheme: str, header: str) -> None:
    body = b"{}"
    headers = sign(scheme, secret_for(scheme), body, NOW)
    fullwidth = "".join(chr(ord(c) - ord("0") + 0xFF10) for c in headers[header])
    assert int(fullwidth) == int(headers[header])  # Python's int() would have accepted it
    for variant in (fullwidth, f"+{headers[header]}", f"{headers[header][:4]}_{headers[header][4:]}"):
        result = verify(scheme, secret_for(scheme), {**headers, header: variant}, body, NOW)
        assert result.reason == "malformed timestamp"
