"""Notification endpoints, messages and attempts over HTTP (docs/management.md, "Notification endpoints").

The real app on SQLite and PostgreSQL. Messages and attempts are inserted as the fan-out and the sender
write them (ORM rows), so what is tested is the management API's reading and the resend's state change;
the sender itself is tested in ``tests/integration/api/notifications/``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import secrets
from typing import TYPE_CHECKING, Any

import builders
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from sqlalchemy import func, select

from api.runs.routes import load_openapi
from store import ids
from store.clock import SystemClock
from store.models import NotificationAttempt, NotificationEndpoint, NotificationMessage

if TYPE_CHECKING:
    from conftest import Mgmt

BASE = "/api/v1/factory"
DOC_URI = "urn:factoryctl:openapi"
REGISTRY: Registry[Any] = Registry().with_resource(
    DOC_URI, Resource.from_contents(load_openapi(), default_specification=DRAFT202012)
)
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def documented(body: object, schema: str) -> None:
    """``body`` validates against ``#/components/schemas/<schema>`` of schemas/openapi.yaml."""
    validator = Draft202012Validator({"$ref": f"{DOC_URI}#/components/schemas/{schema}"}, registry=REGISTRY)
    errors = list(validator.iter_errors(body))
    assert not errors, errors


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def body(**fields: Any) -> dict[str, Any]:
    return {
        "name": "ops",
        "url": "https://hooks.example.com/factory",
        "secretName": "HOOK",
        "events": ["SUCCEEDED", "run.failed"],
    } | fields


async def shop(mgmt: Mgmt) -> str:
    """An API-managed factory and the signing secret ``HOOK``."""
    await mgmt.secret("HOOK", whsec())
    return await mgmt.factory()


async def create(mgmt: Mgmt, fa: str, **fields: Any) -> dict[str, Any]:
    status, out = await mgmt.call("POST", f"{BASE}/{fa}/notifications", json=body(**fields))
    assert status == 201, out
    result: dict[str, Any] = out
    return result


async def message(
    mgmt: Mgmt,
    endpoint_uid: str,
    run_id: str,
    *,
    at: dt.datetime,
    status: str = "delivered",
    event_id: int = 1,
    attempts: int = 1,
) -> str:
    """A message as the fan-out makes it and the sender leaves it."""
    msg_id = ids.new_id(ids.MESSAGE)
    body = {"type": "run.succeeded", "data": {"run_id": run_id, "state": "SUCCEEDED"}}
    async with mgmt.sessions() as s, s.begin():
        s.add(
            NotificationMessage(
                id=msg_id,
                team_id=mgmt.team_id,
                endpoint_uid=endpoint_uid,
                run_id=run_id,
                event_id=event_id,
                event_type="run.succeeded",
                payload=json.dumps(body, separators=(",", ":")),
                status=status,
                attempts=attempts,
                next_attempt_at=at + dt.timedelta(seconds=5) if status == "pending" else None,
                claim_token="clm_held" if status == "pending" else None,
                manual=False,
                last_attempt_at=at if attempts else None,
                last_response_status=204 if status == "delivered" else 500,
                last_error=None if status == "delivered" else "HTTP 500",
                delivered_at=at if status == "delivered" else None,
                created_at=at,
            )
        )
    return msg_id


async def attempt(mgmt: Mgmt, msg_id: str, endpoint_uid: str, n: int, outcome: str, at: dt.datetime) -> None:
    async with mgmt.sessions() as s, s.begin():
        s.add(
            NotificationAttempt(
                message_id=msg_id,
                endpoint_uid=endpoint_uid,
                attempt=n,
                trigger="scheduled",
                started_at=at,
                duration_ms=12,
                outcome=outcome,
                response_status=204 if outcome == "succeeded" else 500,
                response_excerpt="ok" if outcome == "succeeded" else "boom",
                error=None if outcome == "succeeded" else "HTTP 500",
                next_attempt_at=None if outcome == "succeeded" else at + dt.timedelta(seconds=5),
            )
        )


async def a_run(mgmt: Mgmt, fa: str) -> str:
    async with mgmt.sessions() as s, s.begin():
        return (await builders.run(s, SystemClock(), mgmt.team_id, factory_uid=fa)).run_id


async def stored_message(mgmt: Mgmt, msg_id: str) -> NotificationMessage | None:
    async with mgmt.sessions() as s:
        return await s.get(NotificationMessage, msg_id)


# --- endpoints ------------------------------------------------------------------------------------


async def test_create_list_get_update_delete_and_no_secret_value_is_ever_shown(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    created = await create(
        mgmt, fa, filter={"sources": ["SCHEDULED_AGENT"], "factories": ["*"]}, description=" nightly "
    )
    documented(created, "NotificationEndpoint")
    assert created["id"].startswith("ne_") and created["name"] == "ops"
    assert created["events"] == ["SUCCEEDED", "FAILED"]  # canonical: state names
    assert created["filter"] == {"factories": ["*"], "sources": ["SCHEDULED_AGENT"]}
    assert created["enabled"] is True and created["description"] == "nightly"
    assert created["secret_name"] == "HOOK" and created["managed_by"] == "api"
    assert created["definition_path"] is None and created["failing"] is False
    assert created["consecutive_failures"] == 0 and created["last_success_at"] is None

    status, listed = await mgmt.call("GET", f"{BASE}/{fa}/notifications", mgmt.member)
    assert status == 200 and listed["endpoints"] == [created]
    assert listed["page_info"] == {"has_next_page": False, "next_cursor": None}
    documented(listed, "ListNotificationEndpointsResponse")
    assert "whsec_" not in json.dumps(listed)  # the secret's name, never its value
    for ref in (created["id"], "ops"):  # the ID or the name
        status, got = await mgmt.call("GET", f"{BASE}/{fa}/notifications/{ref}", mgmt.member)
        assert status == 200 and got == created

    await mgmt.secret("HOOK-2", whsec())
    status, patched = await mgmt.call(
        "PATCH",
        f"{BASE}/{fa}/notifications/ops",
        json={"enabled": False, "secret_name": "HOOK-2", "events": ["run.*"], "filter": None},
    )
    assert status == 200, patched
    assert patched["enabled"] is False and patched["secret_name"] == "HOOK-2"
    assert patched["events"] == ["run.*"] and patched["filter"] == {}
    assert patched["description"] == "nightly" and patched["url"] == created["url"]
    assert patched["updated_at"] >= created["updated_at"]
    status, same = await mgmt.call(
        "PATCH", f"{BASE}/{fa}/notifications/{created['id']}", json={"description": None}
    )
    assert status == 200 and same["description"] is None

    status, _ = await mgmt.call("DELETE", f"{BASE}/{fa}/notifications/ops")
    assert status == 204
    status, gone = await mgmt.call("GET", f"{BASE}/{fa}/notifications/ops")
    assert status == 404 and gone["error_code"] == "resource_not_found"
    status, _ = await mgmt.call("DELETE", f"{BASE}/{fa}/notifications/ops")
    assert status == 404


async def test_roles_members_read_workers_are_refused_other_teams_see_404(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    created = await create(mgmt, fa)
    one = f"{BASE}/{fa}/notifications/{created['id']}"
    status, problem = await mgmt.call("POST", f"{BASE}/{fa}/notifications", mgmt.member, json=body(name="b"))
    assert status == 403 and problem["error_code"] == "not_authorized"
    assert (await mgmt.call("PATCH", one, mgmt.member, json={"enabled": False}))[0] == 403
    assert (await mgmt.call("DELETE", one, mgmt.member))[0] == 403
    for method, path in (("GET", f"{BASE}/{fa}/notifications"), ("GET", one), ("GET", one + "/messages")):
        assert (await mgmt.call(method, path, mgmt.worker))[0] == 403
        assert (await mgmt.call(method, path, mgmt.other_admin))[0] == 404
    assert (await mgmt.call("DELETE", one, mgmt.other_admin))[0] == 404
    status, _ = await mgmt.call("POST", f"{BASE}/{fa}/notifications", mgmt.other_admin, json=body(name="x"))
    assert status == 404
    # the other team's own factory does not see ours either
    other = await mgmt.client.post("/api/v1/factory", json={"name": "theirs"}, headers=mgmt.other_admin)
    theirs = (await other.json())["uid"]
    status, _ = await mgmt.call("GET", f"{BASE}/{theirs}/notifications/{created['id']}", mgmt.other_admin)
    assert status == 404
    assert (await mgmt.call("GET", one))[0] == 200  # unchanged for its own team


async def test_urls_events_filters_and_bodies_are_checked_like_definitions(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    path = f"{BASE}/{fa}/notifications"
    cases: list[tuple[dict[str, Any], str, str]] = [
        (body(url="https://10.0.0.7/hook"), "url", "private network"),
        (body(url="https://169.254.169.254/latest"), "url", "link-local"),
        (body(url="http://hooks.example.com/x"), "url", "plain http"),
        (body(url="https://user:pw@hooks.example.com/"), "url", "user name"),
        (body(url="https://2852039166/"), "url", "canonical"),
        (body(events=["DONE"]), "events[0]", "unknown event"),
        (body(events=[]), "events", "non-empty"),
        (body(filter={"teams": ["a"]}), "filter.teams", "unknown filter key"),
        (body(filter={"sources": ["EMAIL"]}), "filter.sources[0]", "unknown source"),
        (body(filter={"automations": ["a" * 201]}), "filter.automations", "at most 100 names"),
        (body(description="d" * 4001), "description", "at most 4000"),
        (body(name="Not_Valid"), "name", "lowercase"),
        (body(enabled="yes"), "enabled", "true or false"),
        (body(colour="red"), "colour", "unknown field"),
        (body(secret_name="HOOK"), "secret_name", "not both"),
    ]
    for sent, field, words in cases:
        status, problem = await mgmt.call("POST", path, json=sent)
        assert status == 422, (sent, problem)
        assert problem["errors"][0]["field"] == field, problem
        assert words in problem["errors"][0]["message"], problem
    missing = {k: v for k, v in body().items() if k not in ("url", "events")}
    status, problem = await mgmt.call("POST", path, json=missing)
    assert status == 422 and {e["field"] for e in problem["errors"]} == {"url", "events"}
    # loopback over plain http is allowed: a receiver (or a relay) beside the server
    assert (await create(mgmt, fa, url="http://127.0.0.1:9000/hook"))["url"] == "http://127.0.0.1:9000/hook"
    status, problem = await mgmt.call("PATCH", f"{path}/ops", json={"url": "https://192.168.1.2/"})
    assert status == 422 and problem["errors"][0]["field"] == "url"
    status, problem = await mgmt.call("PATCH", f"{path}/ops", json={"name": "renamed"})
    assert status == 422 and problem["errors"][0]["field"] == "name"
    status, problem = await mgmt.call("PATCH", f"{path}/ops", json={})
    assert status == 422


async def test_the_signing_secret_must_exist_be_webhook_scoped_and_whsec(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    await mgmt.secret("RUN-HOOK", whsec(), scope="run")
    await mgmt.secret("PLAIN", "not-a-whsec-value")
    path = f"{BASE}/{fa}/notifications"
    for name, words in (
        ("NOPE", "does not exist"),
        ("RUN-HOOK", "scope: run"),
        ("PLAIN", "not a Standard Webhooks secret"),
    ):
        status, problem = await mgmt.call("POST", path, json=body(secretName=name))
        assert status == 422 and problem["errors"] == [
            {"field": "secretName", "message": problem["detail"]}
        ], problem
        assert words in problem["detail"]
        assert "not-a-whsec-value" not in json.dumps(problem)
    await create(mgmt, fa)
    status, problem = await mgmt.call("PATCH", f"{path}/ops", json={"secret_name": "PLAIN"})
    assert status == 422 and problem["errors"][0]["field"] == "secret_name"


async def test_duplicate_names_and_more_than_twenty_are_conflicts(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    await create(mgmt, fa, name="n0")
    status, problem = await mgmt.call("POST", f"{BASE}/{fa}/notifications", json=body(name="n0"))
    assert status == 409 and "already has a notification endpoint named 'n0'" in problem["detail"]
    for i in range(1, 20):
        await create(mgmt, fa, name=f"n{i}")
    status, problem = await mgmt.call("POST", f"{BASE}/{fa}/notifications", json=body(name="n20"))
    assert status == 409 and "20 notification endpoints" in problem["detail"]
    other = await mgmt.factory("other-shop")  # the limit and the names are per factory
    await create(mgmt, other, name="n0")
    racing = await asyncio.gather(
        *(mgmt.call("POST", f"{BASE}/{other}/notifications", json=body(name="race")) for _ in range(3))
    )
    assert sorted(status for status, _ in racing) == [201, 409, 409]


async def test_definitions_managed_factories_answer_409_naming_the_file(mgmt: Mgmt) -> None:
    await mgmt.secret("HOOK", whsec())
    fa = await mgmt.definitions_factory(webhooks=())
    status, problem = await mgmt.call("POST", f"{BASE}/{fa}/notifications", json=body(name="alerts"))
    assert status == 409 and "notifications/alerts.yaml" in problem["detail"], problem
    now = SystemClock().now()
    async with mgmt.sessions() as s, s.begin():
        s.add(
            NotificationEndpoint(
                uid=ids.new_id(ids.NOTIFICATION),
                team_id=mgmt.team_id,
                factory_uid=fa,
                name="ops",
                url="https://hooks.example.com/",
                secret_name="HOOK",
                events=["FAILED"],
                filter={},
                enabled=True,
                managed_by="definitions",
                definition_path="notifications/ops.yml",
                created_at=now,
                updated_at=now,
            )
        )
    one = f"{BASE}/{fa}/notifications/ops"
    status, got = await mgmt.call("GET", one, mgmt.member)
    assert status == 200 and got["managed_by"] == "definitions"
    assert got["definition_path"] == "notifications/ops.yml"
    for method, sent in (("PATCH", {"enabled": False}), ("DELETE", None)):
        status, problem = await mgmt.call(method, one, json=sent)
        assert status == 409 and "notifications/ops.yml" in problem["detail"], problem


# --- messages, attempts and resend ----------------------------------------------------------------


async def test_messages_are_listed_newest_first_in_pages_and_filtered(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    ne = (await create(mgmt, fa))["id"]
    other_ne = (await create(mgmt, fa, name="other"))["id"]
    run_a, run_b = await a_run(mgmt, fa), await a_run(mgmt, fa)
    made = []
    for i, (run_id, status) in enumerate(
        [(run_a, "delivered"), (run_a, "failed"), (run_b, "delivered"), (run_b, "pending"), (run_a, "failed")]
    ):
        made.append(
            await message(mgmt, ne, run_id, at=T0 + dt.timedelta(minutes=i), status=status, event_id=i)
        )
    await message(mgmt, other_ne, run_a, at=T0, event_id=99)  # another endpoint's: never listed here
    path = f"{BASE}/{fa}/notifications/ops/messages"

    status, first = await mgmt.call("GET", path + "?limit=2", mgmt.member)
    assert status == 200, first
    documented(first, "ListNotificationMessagesResponse")
    assert [m["id"] for m in first["messages"]] == made[::-1][:2]
    newest = first["messages"][0]
    assert newest["endpoint_id"] == ne and newest["run_id"] == run_a and newest["status"] == "failed"
    assert newest["event_type"] == "run.succeeded" and newest["attempts"] == 1
    assert newest["last_error"] == "HTTP 500" and newest["last_response_status"] == 500
    assert newest["created_at"] == "2026-03-01T12:04:00.000Z" and "payload" not in newest
    seen = [m["id"] for m in first["messages"]]
    cursor = first["page_info"]["next_cursor"]
    while cursor:
        status, page = await mgmt.call("GET", path, params={"limit": "2", "cursor": cursor})
        assert status == 200
        seen += [m["id"] for m in page["messages"]]
        cursor = page["page_info"]["next_cursor"]
    assert seen == made[::-1]

    status, failed = await mgmt.call("GET", path, params={"status": "failed"})
    assert [m["id"] for m in failed["messages"]] == [made[4], made[1]]
    status, both = await mgmt.call("GET", path, params=[("status", "failed"), ("status", "pending")])
    assert [m["id"] for m in both["messages"]] == [made[4], made[3], made[1]]
    status, of_b = await mgmt.call("GET", f"{path}?run_id={run_b}")
    assert [m["id"] for m in of_b["messages"]] == [made[3], made[2]]
    status, problem = await mgmt.call("GET", path, params={"status": "lost"})
    assert status == 422 and problem["errors"][0]["field"] == "status"
    status, problem = await mgmt.call("GET", path, params={"status": "failed", "cursor": cursor or ""})
    assert status == 400
    status, problem = await mgmt.call(
        "GET", path, params={"status": "failed", "cursor": first["page_info"]["next_cursor"]}
    )
    assert status == 400 and problem["detail"].startswith("cursor:")  # issued for another filter


async def test_one_message_shows_its_payload_and_attempts_oldest_first(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    ne = (await create(mgmt, fa))["id"]
    run_id = await a_run(mgmt, fa)
    msg = await message(mgmt, ne, run_id, at=T0, status="delivered", attempts=2)
    await attempt(mgmt, msg, ne, 1, "failed", T0)
    await attempt(mgmt, msg, ne, 2, "succeeded", T0 + dt.timedelta(seconds=5))

    status, got = await mgmt.call("GET", f"{BASE}/{fa}/notifications/{ne}/messages/{msg}", mgmt.member)
    assert status == 200, got
    documented(got, "NotificationMessageDetail")
    assert got["id"] == msg and got["attempts"] == 2
    assert got["payload"] == {"type": "run.succeeded", "data": {"run_id": run_id, "state": "SUCCEEDED"}}
    assert [(a["attempt"], a["outcome"]) for a in got["attempt_log"]] == [(1, "failed"), (2, "succeeded")]
    first = got["attempt_log"][0]
    assert first == {
        "attempt": 1,
        "trigger": "scheduled",
        "started_at": "2026-03-01T12:00:00.000Z",
        "duration_ms": 12,
        "outcome": "failed",
        "response_status": 500,
        "response_excerpt": "boom",
        "error": "HTTP 500",
        "next_attempt_at": "2026-03-01T12:00:05.000Z",
    }
    other = (await create(mgmt, fa, name="other"))["id"]
    assert (await mgmt.call("GET", f"{BASE}/{fa}/notifications/{other}/messages/{msg}"))[0] == 404
    assert (await mgmt.call("GET", f"{BASE}/{fa}/notifications/{ne}/messages/msg_nope"))[0] == 404
    assert (await mgmt.call("GET", f"{BASE}/{fa}/notifications/{ne}/messages/{msg}", mgmt.other_admin))[
        0
    ] == 404

    # deleting the endpoint deletes its messages and their attempts
    assert (await mgmt.call("DELETE", f"{BASE}/{fa}/notifications/{ne}"))[0] == 204
    assert await stored_message(mgmt, msg) is None
    async with mgmt.sessions() as s:
        left = await s.scalar(select(func.count()).where(NotificationAttempt.message_id == msg))
    assert left == 0


async def test_resend_queues_one_manual_attempt_now_and_refuses_a_queued_message(mgmt: Mgmt) -> None:
    fa = await shop(mgmt)
    ne = (await create(mgmt, fa))["id"]
    run_id = await a_run(mgmt, fa)
    failed = await message(mgmt, ne, run_id, at=T0, status="failed", attempts=8, event_id=1)
    delivered = await message(mgmt, ne, run_id, at=T0, status="delivered", event_id=2)
    pending = await message(mgmt, ne, run_id, at=T0, status="pending", event_id=3)
    path = f"{BASE}/{fa}/notifications/ops/messages"

    assert (await mgmt.call("POST", f"{path}/{failed}/resend", mgmt.member))[0] == 403
    assert (await mgmt.call("POST", f"{path}/{failed}/resend", mgmt.worker))[0] == 403
    assert (await mgmt.call("POST", f"{path}/{failed}/resend", mgmt.other_admin))[0] == 404
    before = SystemClock().now()
    status, queued = await mgmt.call("POST", f"{path}/{failed}/resend")
    assert status == 202, queued
    documented(queued, "NotificationMessage")
    assert queued["id"] == failed and queued["status"] == "pending" and queued["attempts"] == 8
    row = await stored_message(mgmt, failed)
    assert row is not None and row.status == "pending" and row.manual is True and row.claim_token is None
    assert row.next_attempt_at is not None and before <= row.next_attempt_at <= SystemClock().now()

    status, problem = await mgmt.call("POST", f"{path}/{failed}/resend")  # asked twice: once is queued
    assert status == 409 and "already queued" in problem["detail"]
    status, problem = await mgmt.call("POST", f"{path}/{pending}/resend")
    assert status == 409 and "already queued" in problem["detail"]
    held = await stored_message(mgmt, pending)
    assert held is not None and held.claim_token == "clm_held" and not held.manual  # the sender keeps it

    status, _ = await mgmt.call("POST", f"{path}/{delivered}/resend")
    assert status == 202
    assert (await mgmt.call("POST", f"{path}/msg_nope/resend"))[0] == 404

    status, _ = await mgmt.call("PATCH", f"{BASE}/{fa}/notifications/ops", json={"enabled": False})
    assert status == 200
    again = await message(mgmt, ne, run_id, at=T0, status="failed", event_id=4)
    status, problem = await mgmt.call("POST", f"{path}/{again}/resend")
    assert status == 409 and "disabled" in problem["detail"]
