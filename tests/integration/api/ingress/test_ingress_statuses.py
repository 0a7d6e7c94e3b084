"""The ingress status table (docs/ingress.md, "Responses") over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

PROBLEM = "application/problem+json"


async def test_accepted_is_202_with_delivery_id_and_logged_with_payload(ingress) -> None:
    hook = await ingress.webhook()
    raw = b'{"event": "push",  "n": 1}'
    resp = await ingress.post(hook, raw=raw, delivery_id="evt-1")
    assert resp.status == 202
    assert resp.content_type == "application/json"
    assert await resp.json() == {"delivery_id": "evt-1"}
    [entry] = await ingress.deliveries(hook)
    assert (entry.status, entry.delivery_id, entry.size, entry.payload) == (
        "Accepted",
        "evt-1",
        len(raw),
        raw,
    )
    assert entry.received_at == ingress.clock.now()


@pytest.mark.parametrize("raw", [b"[1, 2, 3]", b'"just a string"', b"42", b"null", b"true", b"{}"])
async def test_any_json_value_is_a_valid_body(ingress, raw: bytes) -> None:
    hook = await ingress.webhook()
    resp = await ingress.post(hook, raw=raw)
    assert resp.status == 202
    assert (await resp.json())["delivery_id"].startswith("sha256_")


async def test_content_type_is_not_enforced(ingress) -> None:
    hook = await ingress.webhook()
    resp = await ingress.post(hook, raw=b'{"a": 1}', headers={"Content-Type": "text/plain"})
    assert resp.status == 202


DEEP = b"[" * 100_000 + b"]" * 100_000
LONG_NUMBER = b'{"n": ' + b"9" * 5000 + b"}"


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"",
        b'{"a": NaN}',
        b"\xff\xfe{}",
        b'{"text": "caf\xe9"}',
        '{"a": 1}'.encode("utf-16"),
        DEEP,
        b"[" * 65 + b"]" * 65,
        LONG_NUMBER,
        b'{"n": 1e400}',
    ],
    ids=[
        "syntax",
        "empty",
        "nan",
        "bad-utf8",
        "latin1",
        "utf16",
        "deep",
        "depth-65",
        "long-number",
        "overflow",
    ],
)
async def test_invalid_json_or_utf8_is_400_logged_without_payload(ingress, raw: bytes) -> None:
    hook = await ingress.webhook()
    resp = await ingress.post(hook, raw=raw, delivery_id="bad-1")
    assert resp.status == 400
    assert resp.content_type == PROBLEM
    problem = await resp.json()
    assert problem["status"] == 400 and problem["error_code"] == "invalid_request"
    [entry] = await ingress.deliveries(hook)
    assert (entry.status, entry.delivery_id, entry.size, entry.payload) == (
        "Rejected (invalid JSON)",
        "bad-1",
        len(raw),
        None,
    )
    assert await ingress.runs() == []


async def test_json_limits_leave_room_for_real_payloads(ingress) -> None:
    hook = await ingress.webhook()
    raw = b"[" * 63 + b'{"id": 12345678901234567890, "text": "[[[[ not nesting", "x": -1.5e300}' + b"]" * 63
    assert (await ingress.post(hook, raw=raw)).status == 202
    assert (await ingress.post(hook, raw=b'{"emoji": "\\ud83d"}')).status == 202  # truncated by a sender


@pytest.mark.parametrize("raw", [DEEP, LONG_NUMBER], ids=["deep", "long-number"])
async def test_validly_signed_linear_body_over_the_json_limits_is_400_not_500(ingress, raw: bytes) -> None:
    """The finding: Linear's scheme parses the body for ``webhookTimestamp``; a signed 100k-deep body
    was a RecursionError (500). It is an invalid body: 400, logged, counted against the budget."""
    hook = await ingress.webhook(auth_mode="signature", scheme="linear")
    resp = await ingress.post(hook, raw=raw)
    assert (resp.status, resp.content_type) == (400, PROBLEM)
    [entry] = await ingress.deliveries(hook)
    assert (entry.status, entry.size, entry.payload) == ("Rejected (invalid JSON)", len(raw), None)


async def test_404_is_one_response_for_unknown_disabled_and_deleted(ingress) -> None:
    hook = await ingress.webhook()
    assert (await ingress.post(hook)).status == 202

    async def body_of(path: str) -> dict[str, object]:
        resp = await ingress.post(hook, path=path)
        assert resp.status == 404
        assert resp.content_type == PROBLEM
        body: dict[str, object] = await resp.json()
        assert body["instance"] == path  # the only varying member: the path the sender used
        return {k: v for k, v in body.items() if k != "instance"}

    await ingress.update_webhook(hook, enabled=False)
    disabled = await body_of(hook.path)
    await ingress.update_webhook(hook, enabled=True, deleted_at=ingress.clock.now())
    deleted = await body_of(hook.path)
    unknown = await body_of("/webhooks/w/wh_doesnotexist")
    assert disabled == deleted == unknown
    assert disabled["error_code"] == "resource_not_found"
    assert await ingress.statuses(hook) == ["Accepted"]  # 404s are not logged


async def test_reenabling_resumes_deliveries_immediately(ingress) -> None:
    hook = await ingress.webhook()
    await ingress.update_webhook(hook, enabled=False)
    assert (await ingress.post(hook, {"n": 1})).status == 404
    await ingress.update_webhook(hook, enabled=True)
    assert (await ingress.post(hook, {"n": 2})).status == 202


async def test_token_segment_on_a_non_url_token_webhook_is_404(ingress) -> None:
    hook = await ingress.webhook()
    resp = await ingress.post(hook, path=f"{hook.path}/{hook.secret}")
    assert resp.status == 404


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
async def test_other_methods_are_405_with_allow_post(ingress, method: str) -> None:
    hook = await ingress.webhook(auth_mode="url_token")
    for path in (hook.path, f"{hook.path}/{hook.secret}"):
        resp = await ingress.client.request(method, path)
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"
        assert resp.content_type == PROBLEM
        assert (await resp.json())["error_code"] == "operation_not_supported"
    assert await ingress.deliveries(hook) == []


async def test_413_from_content_length_without_reading_the_body(make_ingress) -> None:
    ingress = await make_ingress(max_body_bytes=1024)
    hook = await ingress.webhook()
    raw = json.dumps({"blob": "x" * 2000}).encode()
    resp = await ingress.post(hook, raw=raw, delivery_id="big-1")
    assert resp.status == 413
    assert resp.content_type == PROBLEM
    [entry] = await ingress.deliveries(hook)
    assert (entry.status, entry.delivery_id, entry.size, entry.payload) == (
        "Rejected (too large)",
        "big-1",
        len(raw),
        None,
    )
    exact = json.dumps({"b": "y" * (1024 - 9)}).encode()
    assert len(exact) == 1024
    assert (await ingress.post(hook, raw=exact)).status == 202  # the limit itself is allowed


async def _chunks(data: bytes, size: int = 300) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def test_413_while_streaming_a_chunked_body(make_ingress) -> None:
    ingress = await make_ingress(max_body_bytes=1024)
    hook = await ingress.webhook()
    headers = {"Authorization": f"Bearer {hook.secret}"}
    big = json.dumps({"blob": "x" * 5000}).encode()
    resp = await ingress.client.post(hook.path, data=_chunks(big), headers=headers)
    assert resp.status == 413
    assert resp.request_info.headers.get("Transfer-Encoding") == "chunked"
    [entry] = await ingress.deliveries(hook)
    assert entry.status == "Rejected (too large)" and entry.payload is None
    assert 1024 < entry.size < len(big)  # stopped reading just past the limit
    small = json.dumps({"blob": "x" * 900}).encode()
    resp = await ingress.client.post(hook.path, data=_chunks(small), headers=headers)
    assert resp.status == 202
    assert (await ingress.deliveries(hook))[-1].payload == small


async def test_429_over_the_delivery_rate_with_retry_after(make_ingress) -> None:
    ingress = await make_ingress(delivery_rate_limit=3)
    hook = await ingress.webhook()
    for n in range(3):
        assert (await ingress.post(hook, {"n": n})).status == 202
    resp = await ingress.post(hook, {"n": 3})
    assert resp.status == 429
    assert resp.content_type == PROBLEM
    retry_after = int(resp.headers["Retry-After"])
    assert retry_after >= 1
    assert await ingress.statuses(hook) == ["Accepted"] * 3  # 429 is not logged
    ingress.clock.advance(retry_after)
    assert (await ingress.post(hook, {"n": 4})).status == 202


async def test_429_from_the_failed_auth_budget_on_its_own(make_ingress) -> None:
    ingress = await make_ingress(auth_failure_limit=3, delivery_rate_limit=100)
    hook = await ingress.webhook()
    bad = {"Authorization": "Bearer wrong"}
    for _ in range(3):
        assert (await ingress.post(hook, {"x": 1}, auth=False, headers=bad)).status == 401
    resp = await ingress.post(hook, {"x": 1}, auth=False, headers=bad)
    assert resp.status == 429
    retry_after = int(resp.headers["Retry-After"])
    assert retry_after >= 1
    # The budget is spent for the webhook: even a correct credential waits, and nothing more is logged.
    assert (await ingress.post(hook, {"x": 2})).status == 429
    assert await ingress.statuses(hook) == ["Rejected (auth)"] * 3
    ingress.clock.advance(retry_after)
    assert (await ingress.post(hook, {"x": 3})).status == 202


# --- the failed-request budget bounds the delivery log (docs/ingress.md, "Limits") ---------------------


async def test_oversized_deliveries_spend_the_budget_then_429_unlogged(make_ingress) -> None:
    """The finding: 300 signed-webhook requests with a huge body were all logged ``Rejected (too large)``
    without a 429. Each one is a failure now; past the budget they are 429s and the log stops growing."""
    ingress = await make_ingress(auth_failure_limit=5, delivery_rate_limit=100, max_body_bytes=1024)
    hook = await ingress.webhook(auth_mode="signature", scheme="github")
    big = b'{"blob": "' + b"x" * 4096 + b'"}'
    statuses = [(await ingress.post(hook, raw=big)).status for _ in range(20)]
    assert statuses == [413] * 5 + [429] * 15
    assert await ingress.statuses(hook) == ["Rejected (too large)"] * 5
    resp = await ingress.post(hook, {"ok": True})  # the budget is the webhook's, like failed auth
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
    ingress.clock.advance(int(resp.headers["Retry-After"]))
    assert (await ingress.post(hook, {"ok": True})).status == 202


async def test_invalid_json_spends_the_budget_too(make_ingress) -> None:
    ingress = await make_ingress(auth_failure_limit=3, delivery_rate_limit=100)
    hook = await ingress.webhook()
    statuses = [(await ingress.post(hook, raw=b"{not json")).status for _ in range(6)]
    assert statuses == [400] * 3 + [429] * 3
    assert await ingress.statuses(hook) == ["Rejected (invalid JSON)"] * 3


async def test_concurrent_failures_never_log_more_than_the_budget(make_ingress) -> None:
    # The budget is taken count-then-decide, so a burst cannot slip past a check made before counting.
    ingress = await make_ingress(auth_failure_limit=5, delivery_rate_limit=100, max_body_bytes=64)
    hook = await ingress.webhook()
    big = b'{"blob": "' + b"x" * 200 + b'"}'
    wrong = {"Authorization": "Bearer wrong"}

    async def one(n: int) -> int:
        if n % 2:
            return (await ingress.post(hook, raw=big)).status
        return (await ingress.post(hook, {"n": n}, auth=False, headers=wrong)).status

    statuses = await asyncio.gather(*(one(n) for n in range(40)))
    assert statuses.count(429) == 35 and set(statuses) <= {401, 413, 429}
    assert len(await ingress.deliveries(hook)) == 5


async def test_a_wrong_credential_on_an_oversized_request_is_one_failure(make_ingress) -> None:
    ingress = await make_ingress(auth_failure_limit=2, delivery_rate_limit=100, max_body_bytes=64)
    hook = await ingress.webhook()
    big = b'{"blob": "' + b"x" * 200 + b'"}'
    wrong = {"Authorization": "Bearer wrong"}
    assert (await ingress.post(hook, raw=big, auth=False, headers=wrong)).status == 413
    assert (await ingress.post(hook, {"n": 1}, auth=False, headers=wrong)).status == 401
    assert (await ingress.post(hook, {"n": 2})).status == 429
