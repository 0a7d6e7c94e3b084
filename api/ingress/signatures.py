"""Provider signature schemes for ``signature`` webhooks, as pure functions (docs/ingress.md,
"Provider signatures").

Every verifier works on the raw request bytes (never re-serialised JSON), compares MACs with
:func:`hmac.compare_digest` and takes "now" from the caller, so tests can pin time. ``verify``
never raises on anything a sender controls: malformed headers, bad base64 or a non-JSON body give
``ok=False`` with a short fixed reason that contains neither the secret nor header values (reasons
end up in the delivery log). ``sign`` produces the headers a real sender would send; tests,
benchmarks and the docs use it.

Only Standard Webhooks signs a delivery id (``webhook-id``/``svix-id`` is part of the signed content);
the other providers sign the body alone, so their delivery-id headers (``X-GitHub-Delivery``,
``Request-ID``, ``Linear-Delivery``, ``X-Shopify-Webhook-Id``) can be changed by anyone replaying a
captured request and never decide a delivery's identity (docs/ingress.md, "Delivery identity and
duplicates"). :attr:`Verification.signed_delivery_id` carries the signed id, and nothing else.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import math
import re
import secrets as _random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from api.http.jsonlimits import InvalidJson, loads_limited
from store.rules.vocabulary import canonical_scheme

TOLERANCE_SECONDS = 300  # Standard Webhooks (both ways), Stripe and Slack
LINEAR_TOLERANCE_MS = 60_000
_WHSEC = "whsec_"
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_Lower = dict[str, str]
# (secret, lower-cased headers, body, now) -> the signed delivery id, if the scheme signs one; raises _Reject.
_Verifier = Callable[[str, _Lower, bytes, float], "str | None"]


@dataclass(frozen=True)
class Verification:
    """Outcome of :func:`verify`.

    ``signed_delivery_id``: the delivery id the signature covers (Standard Webhooks' ``webhook-id`` or
    ``svix-id``, whichever family was verified), set only when ``ok``; None for schemes that sign the
    body alone. ``invalid_body``: the MAC matched but the scheme must read the body (Linear's
    ``webhookTimestamp``) and it is not acceptable JSON - not an authentication failure, the ingress
    answers it as the invalid body it is (400).
    """

    ok: bool
    reason: str | None = None
    signed_delivery_id: str | None = None
    invalid_body: bool = False


class _Reject(Exception):
    """Internal: carries a fixed, secret-free reason out of a verifier."""


class _InvalidBody(_Reject):
    """Internal: the signature is good, but the body the scheme must read is not acceptable JSON."""


def delivery_id_header(scheme: str) -> str | None:
    """The header a ``scheme`` sender puts its delivery id in (signed or not: see :func:`signs_delivery_id`),
    or None if it sends none."""
    canonical = canonical_scheme(scheme)
    names = _SCHEMES[canonical].delivery_headers if canonical else ()
    return names[0] if names else None


def verify(
    scheme: str, secret: str, headers: Mapping[str, str], body: bytes, now: dt.datetime
) -> Verification:
    """Check a delivery against ``scheme`` with ``secret``. Header names are matched case-insensitively
    (plain dicts and aiohttp's ``CIMultiDictProxy`` both work); a naive ``now`` is taken as UTC."""
    canonical = canonical_scheme(scheme)
    if canonical is None:
        return Verification(False, "unknown signature scheme")
    if not secret:
        return Verification(False, "no secret configured")
    impl = _SCHEMES[canonical]
    try:
        signed_id = impl.verify(secret, _lowered(headers), body, _epoch(now))
    except _InvalidBody as exc:
        return Verification(False, str(exc), invalid_body=True)
    except _Reject as exc:
        return Verification(False, str(exc))
    except (ValueError, TypeError, UnicodeError):
        return Verification(False, "malformed signature")
    return Verification(True, None, signed_id or None)


def signs_delivery_id(scheme: str) -> bool:
    """Whether ``scheme``'s signature covers its delivery id (only Standard Webhooks)."""
    return canonical_scheme(scheme) == "standard_webhooks"


def sign(
    scheme: str, secret: str, body: bytes, now: dt.datetime, delivery_id: str | None = None
) -> dict[str, str]:
    """Headers a real sender of ``scheme`` would attach to ``body`` at ``now``.

    ``delivery_id`` goes into the scheme's delivery-id header (for Standard Webhooks it is the signed
    ``webhook-id``, derived from the body and time when omitted); schemes without one ignore it.
    For ``linear`` the body itself must carry ``webhookTimestamp``. Raises ValueError for an unknown
    scheme, an empty secret or an undecodable Standard Webhooks secret.
    """
    canonical = canonical_scheme(scheme)
    if canonical is None:
        raise ValueError(f"unknown signature scheme {scheme!r}")
    if not secret:
        raise ValueError("empty secret")
    impl = _SCHEMES[canonical]
    ts = int(_epoch(now))
    if canonical == "standard_webhooks" and delivery_id is None:
        delivery_id = "msg_" + hashlib.sha256(b"%d." % ts + body).hexdigest()[:26]
    headers = impl.sign(secret, body, ts, delivery_id or "")
    if impl.delivery_headers and delivery_id is not None:
        headers.setdefault(impl.delivery_headers[0], delivery_id)
    return headers


# --- secrets and tokens ----------------------------------------------------------------------------


def standard_webhooks_secret_ok(secret: str) -> bool:
    """True when ``secret`` is ``whsec_`` + strict base64 of 24-64 bytes (docs/definitions.md, "Online
    checks")."""
    if not secret.startswith(_WHSEC):
        return False
    try:
        key = base64.b64decode(secret[len(_WHSEC) :], validate=True)
    except (binascii.Error, ValueError):
        return False
    return 24 <= len(key) <= 64


def generate_standard_webhooks_secret() -> str:
    """A fresh ``whsec_`` secret with a 32-byte key, for senders that left the secret blank."""
    return _WHSEC + base64.b64encode(_random.token_bytes(32)).decode("ascii")


def token_matches(expected: str, presented: str | None) -> bool:
    """Constant-time token check; hashing first hides the expected length too. Empty never matches."""
    if not expected or not presented:
        return False
    a = hashlib.sha256(expected.encode("utf-8", "surrogateescape")).digest()
    b = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
    return hmac.compare_digest(a, b)


def bearer_token(authorization: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <x>`` value (scheme case-insensitive), else None."""
    if not authorization:
        return None
    kind, _, value = authorization.strip().partition(" ")
    value = value.strip()
    return value if kind.lower() == "bearer" and value else None


# --- helpers ---------------------------------------------------------------------------------------


def _lowered(headers: Mapping[str, str]) -> _Lower:
    out: _Lower = {}
    for key, value in headers.items():
        out.setdefault(str(key).lower(), value)
    return out


def _epoch(now: dt.datetime) -> float:
    return (now if now.tzinfo else now.replace(tzinfo=dt.UTC)).timestamp()


def _required(h: _Lower, name: str, what: str = "signature") -> str:
    value = h.get(name, "").strip()
    if not value:
        raise _Reject(f"missing {what} header")
    return value


def _timestamp(raw: str) -> int:
    if not _TIMESTAMP.fullmatch(raw):
        raise _Reject("malformed timestamp")
    return int(raw)


def _window(ts: float, now: float, tolerance: float) -> None:
    """Both directions: a far-future timestamp would otherwise stay replayable for longer."""
    if now - ts > tolerance:
        raise _Reject("timestamp too old")
    if ts - now > tolerance:
        raise _Reject("timestamp in the future")


def _mac(key: bytes, data: bytes, algo: str = "sha256") -> bytes:
    return hmac.new(key, data, algo).digest()


def _any_match(expected: str, presented: list[str]) -> None:
    """Constant-time compare of ``expected`` against each candidate; one match is enough."""
    want = expected.encode("ascii")
    if not any(hmac.compare_digest(want, p.encode("utf-8", "surrogateescape")) for p in presented):
        raise _Reject("signature mismatch")


def _hex_of_body(header: str, algo: str = "sha256", prefix: str = "") -> _Verifier:
    """Verifier for schemes whose header is ``<prefix><hex MAC of the body>`` (no signed delivery id)."""

    def check(secret: str, h: _Lower, body: bytes, now: float) -> None:
        value = _required(h, header)
        if not value.startswith(prefix):
            raise _Reject("malformed signature header")
        _any_match(_mac(secret.encode(), body, algo).hex(), [value[len(prefix) :].lower()])

    return check


def _hex_signer(
    header: str, algo: str = "sha256", prefix: str = ""
) -> Callable[[str, bytes, int, str], dict[str, str]]:
    def make(secret: str, body: bytes, ts: int, delivery_id: str) -> dict[str, str]:
        return {header: prefix + _mac(secret.encode(), body, algo).hex()}

    return make


# --- Standard Webhooks / Svix ----------------------------------------------------------------------


def _sw_key(secret: str) -> bytes:
    raw = secret[len(_WHSEC) :] if secret.startswith(_WHSEC) else secret
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise _Reject("secret is not a valid Standard Webhooks secret") from None


def _sw_signature(key: bytes, msg_id: str, ts: int, body: bytes) -> str:
    signed = f"{msg_id}.{ts}.".encode("utf-8", "surrogateescape") + body
    return base64.b64encode(_mac(key, signed)).decode("ascii")


def _verify_standard_webhooks(secret: str, h: _Lower, body: bytes, now: float) -> str:
    """Returns the signed message id: of the header family that was verified, never the other one."""
    family = "webhook" if "webhook-signature" in h or "webhook-id" in h else "svix"
    msg_id = _required(h, f"{family}-id", "message id")
    ts = _timestamp(_required(h, f"{family}-timestamp", "timestamp"))
    presented = _required(h, f"{family}-signature")
    _window(ts, now, TOLERANCE_SECONDS)
    expected = _sw_signature(_sw_key(secret), msg_id, ts, body)
    candidates = [part[3:] for part in presented.split() if part.startswith("v1,")]
    if not candidates:
        raise _Reject("malformed signature header")
    _any_match(expected, candidates)
    return msg_id


def _sign_standard_webhooks(secret: str, body: bytes, ts: int, msg_id: str) -> dict[str, str]:
    try:
        key = _sw_key(secret)
    except _Reject:
        raise ValueError("secret is not a valid Standard Webhooks secret") from None
    signature = _sw_signature(key, msg_id, ts, body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": f"v1,{signature}"}


# --- Stripe, PagerDuty, Slack, Linear, Shopify -----------------------------------------------------


def _pairs(value: str) -> list[tuple[str, str]]:
    out = []
    for item in value.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            out.append((key.strip(), val.strip()))
    return out


def _verify_stripe(secret: str, h: _Lower, body: bytes, now: float) -> None:
    pairs = _pairs(_required(h, "stripe-signature"))
    stamps = [v for k, v in pairs if k == "t"]
    candidates = [v.lower() for k, v in pairs if k == "v1"]
    if not stamps or not candidates:
        raise _Reject("malformed signature header")
    ts = _timestamp(stamps[0])
    _window(ts, now, TOLERANCE_SECONDS)
    _any_match(_mac(secret.encode(), b"%d." % ts + body).hex(), candidates)


def _sign_stripe(secret: str, body: bytes, ts: int, delivery_id: str) -> dict[str, str]:
    return {"Stripe-Signature": f"t={ts},v1={_mac(secret.encode(), b'%d.' % ts + body).hex()}"}


def _verify_pagerduty(secret: str, h: _Lower, body: bytes, now: float) -> None:
    candidates = [v.lower() for k, v in _pairs(_required(h, "x-pagerduty-signature")) if k == "v1"]
    if not candidates:
        raise _Reject("malformed signature header")
    _any_match(_mac(secret.encode(), body).hex(), candidates)


def _verify_slack(secret: str, h: _Lower, body: bytes, now: float) -> None:
    presented = _required(h, "x-slack-signature")
    ts = _timestamp(_required(h, "x-slack-request-timestamp", "timestamp"))
    if not presented.startswith("v0="):
        raise _Reject("malformed signature header")
    _window(ts, now, TOLERANCE_SECONDS)
    _any_match(_mac(secret.encode(), b"v0:%d:" % ts + body).hex(), [presented[3:].lower()])


def _sign_slack(secret: str, body: bytes, ts: int, delivery_id: str) -> dict[str, str]:
    mac = _mac(secret.encode(), b"v0:%d:" % ts + body).hex()
    return {"X-Slack-Signature": f"v0={mac}", "X-Slack-Request-Timestamp": str(ts)}


def _verify_linear(secret: str, h: _Lower, body: bytes, now: float) -> None:
    _hex_of_body("linear-signature")(secret, h, body, now)
    try:  # parsed only once the signature is known good, with the limits of every other body
        payload = loads_limited(body, lone_surrogates=True)
    except InvalidJson:
        raise _InvalidBody("body is not valid JSON") from None
    stamp = payload.get("webhookTimestamp") if isinstance(payload, dict) else None
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        raise _Reject("body has no webhookTimestamp")
    _window(stamp, now * 1000, LINEAR_TOLERANCE_MS)


def _verify_shopify(secret: str, h: _Lower, body: bytes, now: float) -> None:
    presented = _required(h, "x-shopify-hmac-sha256")
    _any_match(base64.b64encode(_mac(secret.encode(), body)).decode("ascii"), [presented])


def _sign_shopify(secret: str, body: bytes, ts: int, delivery_id: str) -> dict[str, str]:
    return {"X-Shopify-Hmac-SHA256": base64.b64encode(_mac(secret.encode(), body)).decode("ascii")}


@dataclass(frozen=True)
class _Scheme:
    verify: _Verifier
    sign: Callable[[str, bytes, int, str], dict[str, str]]
    delivery_headers: tuple[str, ...] = ()


_SCHEMES: dict[str, _Scheme] = {
    "standard_webhooks": _Scheme(
        _verify_standard_webhooks, _sign_standard_webhooks, ("webhook-id", "svix-id")
    ),
    "stripe": _Scheme(_verify_stripe, _sign_stripe),
    "github": _Scheme(
        _hex_of_body("x-hub-signature-256", prefix="sha256="),
        _hex_signer("X-Hub-Signature-256", prefix="sha256="),
        ("X-GitHub-Delivery",),
    ),
    "sentry": _Scheme(
        _hex_of_body("sentry-hook-signature"), _hex_signer("Sentry-Hook-Signature"), ("Request-ID",)
    ),
    "pagerduty": _Scheme(_verify_pagerduty, _hex_signer("X-PagerDuty-Signature", prefix="v1=")),
    "vercel": _Scheme(_hex_of_body("x-vercel-signature", "sha1"), _hex_signer("x-vercel-signature", "sha1")),
    "slack": _Scheme(_verify_slack, _sign_slack),
    "linear": _Scheme(_verify_linear, _hex_signer("Linear-Signature"), ("Linear-Delivery",)),
    "shopify": _Scheme(_verify_shopify, _sign_shopify, ("X-Shopify-Webhook-Id",)),
}
