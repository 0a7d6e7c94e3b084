"""Why each delivery did what it did, over HTTP (docs/management.md, "Delivery log"; docs/ingress.md,
"Decisions"): deliveries arrive through the real ingress endpoint and are read back through the API; every
reason is compared with what Test filter says about the same delivery and automation.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import builders
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from sqlalchemy import update

from api.ingress.decisions import DISABLED
from api.runs.routes import load_openapi
from store.clock import SystemClock
from store.models import Run

if TYPE_CHECKING:
    from conftest import Mgmt

BASE = "/api/v1/factory"
DOC_URI = "urn:factoryctl:openapi"


def assert_documented(body: object, schema: str) -> None:
    """``body`` validates against ``#/components/schemas/<schema>`` of schemas/openapi.yaml."""
    registry: Registry[Any] = Registry().with_resource(
        DOC_URI, Resource.from_contents(load_openapi(), default_specification=DRAFT202012)
    )
    validator = Draft202012Validator({"$ref": f"{DOC_URI}#/components/schemas/{schema}"}, registry=registry)
    assert not list(validator.iter_errors(body)), list(validator.iter_errors(body))


async def deliver(mgmt: Mgmt, hook: dict[str, Any], payload: object, delivery_id: str) -> None:
    """POST to the webhook's ingress URL as a sender does."""
    resp = await mgmt.client.post(
        f"/webhooks/w/{hook['uid']}",
        data=json.dumps(payload),
        headers={"Authorization": f"Bearer {hook['secret']}", "X-Factory-Delivery-Id": delivery_id},
    )
    assert resp.status == 202, await resp.text()


async def get(mgmt: Mgmt, fa: str, wid: str, delivery_id: str) -> dict[str, Any]:
    status, body = await mgmt.call(
        "GET", f"{BASE}/{fa}/webhooks/{wid}/deliveries/{quote(delivery_id, safe='')}", mgmt.member
    )
    assert status == 200, body
    assert_documented(body, "Delivery")
    return dict(body)


async def filter_test(mgmt: Mgmt, fa: str, aid: str, delivery_id: str) -> dict[str, Any]:
    status, body = await mgmt.call(
        "POST", f"{BASE}/{fa}/automations/{aid}/test-filter", json={"delivery_id": delivery_id}
    )
    assert status == 200, body
    return dict(body)


async def test_each_automation_selecting_the_webhook_gets_a_decision_worded_as_test_filter(
    mgmt: Mgmt,
) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    other = await mgmt.webhook(fa, name="elsewhere")
    wid = hook["uid"]
    opened = await mgmt.automation(fa, [([wid], {"action": "opened"})], name="on-open")
    labelled = await mgmt.automation(fa, [([wid], {"issue": {"labels": ["bug"]}})], name="bugs")
    typed = await mgmt.automation(fa, [([wid], {"count": "1"})], name="typed")
    two = await mgmt.automation(fa, [([wid], {"repo": "a"}), ([wid], {"repo": "b"})], name="two-triggers")
    off = await mgmt.automation(fa, [([wid], None)], name="paused", enabled=False)
    await mgmt.automation(fa, [([other["uid"]], None)], name="not-this-webhook")
    await deliver(mgmt, hook, {"action": "opened", "issue": {"labels": ["docs"]}, "count": 1}, "evt-1")

    body = await get(mgmt, fa, wid, "evt-1")
    decisions = {d["automation_uid"]: d for d in body["decisions"]}
    assert sorted(decisions) == sorted([opened, labelled, typed, two, off])  # only those selecting it
    [run_id] = body["run_ids"]
    assert decisions[opened] == {
        "automation_uid": opened,
        "automation_name": "on-open",
        "enabled": True,
        "matched": True,
        "run_id": run_id,
        "run_state": "QUEUED",
        "reason": None,
        "failed_path": None,
    }
    assert decisions[off] == {
        "automation_uid": off,
        "automation_name": "paused",
        "enabled": False,
        "matched": False,
        "run_id": None,
        "run_state": None,
        "reason": DISABLED,
        "failed_path": None,
    }
    for aid, path, reason in (
        (labelled, "issue.labels", 'no element of ["docs"] is one of ["bug"]'),
        (typed, "count", 'value 1 is not equal to "1" (types are strict: a number never equals a string)'),
        (two, "repo", "trigger #1: field is missing"),
    ):
        d = decisions[aid]
        assert (d["matched"], d["run_id"], d["reason"], d["failed_path"]) == (False, None, reason, path)
        check = (await filter_test(mgmt, fa, aid, "evt-1"))["payload_check"]
        assert (check["detail"], check["failed_path"]) == (reason, path)  # Test filter's very words
    verdict = await filter_test(mgmt, fa, off, "evt-1")
    assert DISABLED in verdict["webhook_check"]["detail"]

    # The run's state is read when the delivery is: it follows the run.
    async with mgmt.sessions() as s, s.begin():
        await s.execute(update(Run).where(Run.run_id == run_id).values(state="SUCCEEDED"))
    again = await get(mgmt, fa, wid, "evt-1")
    assert [d["run_state"] for d in again["decisions"] if d["matched"]] == ["SUCCEEDED"]


async def test_no_automation_and_no_match_are_listed_as_started_nothing(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    wid = hook["uid"]
    await deliver(mgmt, hook, {"n": 0}, "before-any-automation")
    assert (await get(mgmt, fa, wid, "before-any-automation"))["decisions"] == []

    aid = await mgmt.automation(fa, [([wid], {"action": "opened"})])
    await deliver(mgmt, hook, {"action": "opened"}, "started")
    await deliver(mgmt, hook, {"action": "closed"}, "filtered")
    rejected = await mgmt.client.post(
        f"/webhooks/w/{wid}", data=b"{}", headers={"Authorization": "Bearer no"}
    )
    assert rejected.status == 401
    [filtered] = (await get(mgmt, fa, wid, "filtered"))["decisions"]
    assert filtered["automation_uid"] == aid and filtered["failed_path"] == "action"
    assert filtered["reason"] == 'value "closed" is not equal to "opened"'

    path = f"{BASE}/{fa}/webhooks/{wid}/deliveries"
    _, nothing = await mgmt.call("GET", path, mgmt.member, params={"outcome": "no_runs"})
    assert [d["delivery_id"] for d in nothing["deliveries"]] == ["filtered", "before-any-automation"]
    assert all(d["run_ids"] == [] and d["decisions"] is not None for d in nothing["deliveries"])
    _, some = await mgmt.call("GET", path, mgmt.member, params={"outcome": "runs"})
    assert [d["delivery_id"] for d in some["deliveries"]] == ["started"]
    assert some["deliveries"][0]["decisions"][0]["run_id"] == some["deliveries"][0]["run_ids"][0]
    _, everything = await mgmt.call("GET", path, mgmt.member)
    statuses = {d["status"]: d["decisions"] for d in everything["deliveries"]}
    assert statuses["Rejected (auth)"] is None  # only entries that could start runs have decisions
    for entry in everything["deliveries"]:
        assert_documented(entry, "Delivery")
    status, body = await mgmt.call("GET", path, mgmt.member, params={"outcome": "nothing"})
    assert (
        status == 422
        and body["errors"][0]["field"] == "outcome"
        and "no_runs" in body["errors"][0]["message"]
    )


async def test_a_replay_records_its_own_decisions(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    wid = hook["uid"]
    first = await mgmt.automation(fa, [([wid], None)], name="first")
    second = await mgmt.automation(fa, [([wid], {"action": "opened"})], name="second")
    await deliver(mgmt, hook, {"action": "opened"}, "evt/9")
    replay = f"{BASE}/{fa}/webhooks/{wid}/deliveries/evt%2F9/replay"
    status, done = await mgmt.call("POST", replay, json={"automation_id": first})
    assert status == 201, done
    body = await get(mgmt, fa, wid, done["delivery_id"])
    decisions = {d["automation_uid"]: d for d in body["decisions"]}
    assert decisions[first]["matched"] and decisions[first]["run_id"] == done["runs"][0]["run_id"]
    assert decisions[second]["matched"] is False and decisions[second]["run_id"] is None
    assert (
        decisions[second]["reason"]
        == f"not part of this replay: it was replayed into automation {first} only"
    )
    original = await get(mgmt, fa, wid, "evt/9")
    assert [d["matched"] for d in original["decisions"]] == [True, True]


async def test_entries_from_before_decisions_show_null(mgmt: Mgmt) -> None:
    """An Accepted entry logged before migration 0019 has no decisions: null, not an empty list."""
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    async with mgmt.sessions() as s, s.begin():
        await builders.delivery(
            s,
            mgmt.team_id,
            hook["uid"],
            "old",
            received_at=SystemClock().now(),
            payload=json.dumps({}).encode(),
        )
    assert (await get(mgmt, fa, hook["uid"], "old"))["decisions"] is None
