"""Replaying a stored delivery over HTTP (docs/management.md, "Replaying a delivery").

Deliveries arrive through the real ingress endpoint (so the original runs are ingress's own); the runs a
replay starts are compared with them, and the delivery log is read back through the API.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import builders
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from sqlalchemy import select, update

from api.runs.routes import load_openapi
from store.models import AutomationWebhook, Run, RunAttachment

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


async def set_filter(mgmt: Mgmt, automation_uid: str, payload_filter: dict[str, Any] | None) -> None:
    """Change an automation's payload filter in its routing rows, as the next apply would."""
    async with mgmt.sessions() as s, s.begin():
        await s.execute(
            update(AutomationWebhook)
            .where(AutomationWebhook.automation_uid == automation_uid)
            .values(payload_filter=payload_filter)
        )


async def runs_of(mgmt: Mgmt, webhook_uid: str) -> list[Run]:
    async with mgmt.sessions() as s:
        stmt = select(Run).where(Run.webhook_uid == webhook_uid).order_by(Run.created_at, Run.run_id)
        return list((await s.execute(stmt)).scalars())


def replay_path(fa: str, wid: str, delivery_id: str) -> str:
    return f"{BASE}/{fa}/webhooks/{wid}/deliveries/{quote(delivery_id, safe='')}/replay"


async def test_replay_after_fixing_a_filter_starts_the_run_the_original_did_not(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    wid = hook["uid"]
    fixed = await mgmt.automation(fa, [([wid], {"action": "opened"})], name="triage")
    always = await mgmt.automation(fa, [([wid], None)], name="audit")
    await deliver(mgmt, hook, {"action": "reopened"}, "evt/1")
    [original] = await runs_of(mgmt, wid)
    assert original.automation_id == always  # the filter did not match "reopened"

    await set_filter(mgmt, fixed, {"action": ["opened", "reopened"]})
    status, body = await mgmt.call("POST", replay_path(fa, wid, "evt/1"))
    assert status == 201, body
    assert_documented(body, "DeliveryReplay")
    assert body["replay_of"] == "evt/1" and body["status"] == "Replayed" and body["webhook_uid"] == wid
    assert body["delivery_id"].startswith("evt/1/replay/") and len(body["delivery_id"]) == 5 + 8 + 26
    assert body["automation_id"] is None and body["received_at"].endswith("Z")
    assert sorted(r["automation_id"] for r in body["runs"]) == sorted([fixed, always])
    new_id = body["delivery_id"]

    # The runs are built as ingress builds them, under the replay's identity, with the payload attached.
    runs = {r.run_id: r for r in await runs_of(mgmt, wid)}
    for item in body["runs"]:
        run = runs[item["run_id"]]
        assert (run.state, run.source, run.delivery_id) == ("QUEUED", "CUSTOM_WEBHOOK", new_id)
        assert (run.factory_uid, run.automation_id, run.creator_uid) == (fa, item["automation_id"], wid)
        assert run.creator_display_name == original.creator_display_name
        assert json.dumps(new_id) in run.prompt and "event-payload.json" in run.prompt
    async with mgmt.sessions() as s:
        attachments = (
            await s.execute(select(RunAttachment).where(RunAttachment.run_id.in_(list(runs))))
        ).scalars()
        by_run = {a.run_id: (a.file_name, a.mime_type, a.data) for a in attachments}
    assert by_run[item["run_id"]] == by_run[original.run_id]  # same file, type and bytes as ingress's
    assert json.loads(by_run[item["run_id"]][2]) == {"action": "reopened"}

    # The log records the replay: who, when, which runs; the original entry is unchanged.
    log = f"{BASE}/{fa}/webhooks/{wid}/deliveries"
    status, page = await mgmt.call("GET", log, mgmt.member, params={"status": "Replayed"})
    assert status == 200, page
    [entry] = page["deliveries"]
    assert_documented(entry, "Delivery")
    assert entry["delivery_id"] == new_id and entry["received_at"] == body["received_at"]
    assert sorted(entry["run_ids"]) == sorted(r["run_id"] for r in body["runs"])
    assert "'evt/1'" in entry["detail"] and "'admin'" in entry["detail"] and "2 run(s)" in entry["detail"]
    assert entry["detail"] == body["detail"]
    status, single = await mgmt.call("GET", f"{log}/{quote(new_id, safe='')}")
    assert status == 200 and single["status"] == "Replayed" and single["payload"] == {"action": "reopened"}
    _, first = await mgmt.call("GET", f"{log}/evt%2F1")
    assert first["status"] == "Accepted" and first["run_ids"] == [original.run_id]
    test_filter = f"{BASE}/{fa}/automations/{fixed}/test-filter"
    status, verdict = await mgmt.call("POST", test_filter, json={"delivery_id": new_id})
    assert status == 409 and "test the original" in verdict["detail"]


async def test_replaying_twice_starts_two_runs_and_automation_id_narrows(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    wid = hook["uid"]
    triage = await mgmt.automation(fa, [([wid], None)], name="triage")
    audit = await mgmt.automation(fa, [([wid], None)], name="audit")
    await deliver(mgmt, hook, {"n": 1}, "d1")
    assert len(await runs_of(mgmt, wid)) == 2

    first = await mgmt.call("POST", replay_path(fa, wid, "d1"), json={"automation_id": triage})
    second = await mgmt.call("POST", replay_path(fa, wid, "d1"), json={"automation_id": triage})
    assert first[0] == second[0] == 201
    assert [r["automation_id"] for r in first[1]["runs"]] == [triage]
    assert [r["automation_id"] for r in second[1]["runs"]] == [triage]
    assert first[1]["delivery_id"] != second[1]["delivery_id"]  # not de-duplicated
    assert f"into automation {triage}" in first[1]["detail"]
    runs = await runs_of(mgmt, wid)
    assert len(runs) == 4 and sum(r.automation_id == audit for r in runs) == 1

    # The filter still applies: a replay into an automation that does not match starts nothing, and is
    # still recorded, as is a replay when every automation is disabled.
    await set_filter(mgmt, audit, {"n": 2})
    status, body = await mgmt.call("POST", replay_path(fa, wid, "d1"), json={"automation_id": audit})
    assert status == 201 and body["runs"] == [] and "nothing started" in body["detail"]
    assert_documented(body, "DeliveryReplay")
    _, page = await mgmt.call("GET", f"{BASE}/{fa}/webhooks/{wid}/deliveries", params={"status": "Replayed"})
    assert [d["delivery_id"] for d in page["deliveries"]] == [
        body["delivery_id"],
        second[1]["delivery_id"],
        first[1]["delivery_id"],
    ]


async def test_disabled_webhook_replays_and_disabled_automation_does_not_run(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    wid = hook["uid"]
    await deliver(mgmt, hook, {"n": 1}, "d1")
    off = await mgmt.automation(fa, [([wid], None)], name="off", enabled=False)
    on = await mgmt.automation(fa, [([wid], None)], name="on")
    assert (await mgmt.call("PATCH", f"{BASE}/{fa}/webhooks/{wid}", json={"enabled": False}))[0] == 200

    status, body = await mgmt.call("POST", replay_path(fa, wid, "d1"))
    assert status == 201 and [r["automation_id"] for r in body["runs"]] == [on]
    status, body = await mgmt.call("POST", replay_path(fa, wid, "d1"), json={"automation_id": off})
    assert status == 409 and "disabled" in body["detail"]


async def test_refusals(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    wid = hook["uid"]
    aid = await mgmt.automation(fa, [([wid], None)])
    other_hook = (await mgmt.webhook(fa, name="other"))["uid"]
    elsewhere = await mgmt.automation(fa, [([other_hook], None)], name="elsewhere")
    other_factory = await mgmt.factory("other-shop")
    foreign = await mgmt.automation(other_factory, [([wid], None)], name="foreign")
    await deliver(mgmt, hook, {"n": 1}, "ok")
    now = dt.datetime.now(dt.UTC)
    async with mgmt.sessions() as s, s.begin():
        for n, (delivery_id, status) in enumerate(
            [("dup", "Duplicate"), ("bad", "Rejected (auth)"), ("big", "Rejected (too large)")]
        ):
            await builders.delivery(
                s, mgmt.team_id, wid, delivery_id, received_at=now, status=status, size=10 + n
            )
    _, replayed = await mgmt.call("POST", replay_path(fa, wid, "ok"))
    before = len(await runs_of(mgmt, wid))

    for delivery_id, status_text in (
        ("dup", "'Duplicate'"),
        ("bad", "'Rejected (auth)'"),
        ("big", "'Rejected (too large)'"),
        (replayed["delivery_id"], "Replayed"),
    ):
        status, body = await mgmt.call("POST", replay_path(fa, wid, delivery_id))
        assert status == 409 and status_text in body["detail"], body
    status, body = await mgmt.call("POST", replay_path(fa, wid, "missing"))
    assert status == 404 and "'missing'" in body["detail"]
    for automation_id in (elsewhere, foreign, "au_nope"):
        status, body = await mgmt.call(
            "POST", replay_path(fa, wid, "ok"), json={"automation_id": automation_id}
        )
        assert status == 422 and body["errors"][0]["field"] == "automation_id", body
        assert automation_id in body["detail"]
    status, body = await mgmt.call("POST", replay_path(fa, wid, "ok"), json={"automation": aid})
    assert status == 422 and body["errors"][0]["field"] == "automation"
    assert (await mgmt.call("POST", replay_path(fa, wid, "ok"), mgmt.worker))[0] == 403
    assert (await mgmt.call("POST", replay_path(fa, wid, "ok"), mgmt.member))[0] == 403
    assert (await mgmt.call("POST", replay_path(fa, wid, "ok"), mgmt.other_admin))[0] == 404
    assert (await mgmt.call("POST", replay_path(other_factory, wid, "ok")))[0] == 404
    assert (await mgmt.call("POST", replay_path(fa, "wh_nope", "ok")))[0] == 404

    assert (await mgmt.call("DELETE", f"{BASE}/{fa}/webhooks/{wid}"))[0] == 204
    status, body = await mgmt.call("POST", replay_path(fa, wid, "ok"))
    assert status == 409 and "deleted" in body["detail"]
    assert (await mgmt.call("POST", replay_path(fa, wid, "ok"), mgmt.other_admin))[0] == 404
    assert len(await runs_of(mgmt, wid)) == before  # no refusal started anything
