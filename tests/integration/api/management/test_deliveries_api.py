"""Delivery log (list, get) and "Test filter" over HTTP."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

import builders

if TYPE_CHECKING:
    from conftest import Mgmt

BASE = "/api/v1/factory"


async def log(mgmt: Mgmt, webhook_uid: str, entries: list[tuple[str, str, object]]) -> None:
    """Write delivery log entries as ingress does: ``(delivery_id, status, payload)``, oldest first."""
    now = dt.datetime.now(dt.UTC)
    async with mgmt.sessions() as s, s.begin():
        for i, (delivery_id, status, payload) in enumerate(entries):
            accepted = status == "Accepted"
            await builders.delivery(
                s,
                mgmt.team_id,
                webhook_uid,
                delivery_id,
                received_at=now + dt.timedelta(milliseconds=i),
                status=status,
                payload=json.dumps(payload).encode() if accepted else None,
                size=None if accepted else 10,  # a rejected body is not kept, only its size
                detail=None if accepted else "credential does not match",
            )


async def setup_hook(mgmt: Mgmt) -> tuple[str, str]:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa, name="orders")
    return fa, hook["uid"]


async def test_list_is_newest_first_with_cursor_pages_and_status_filter(mgmt: Mgmt) -> None:
    fa, wid = await setup_hook(mgmt)
    statuses = ["Accepted", "Rejected (auth)", "Duplicate", "Accepted", "Rejected (invalid JSON)"]
    await log(mgmt, wid, [(f"d{i}", st, {"i": i}) for i, st in enumerate(statuses)])
    path = f"{BASE}/{fa}/webhooks/{wid}/deliveries"
    ids: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        status, page = await mgmt.call("GET", path, mgmt.member, params=params)
        assert status == 200 and len(page["deliveries"]) <= 2
        ids += [d["delivery_id"] for d in page["deliveries"]]
        cursor = page["page_info"]["next_cursor"]
        if not cursor:
            assert page["page_info"]["has_next_page"] is False
            break
    assert ids == ["d4", "d3", "d2", "d1", "d0"]
    _, page = await mgmt.call("GET", path)
    first = page["deliveries"][0]
    assert set(first) >= {"delivery_id", "webhook_uid", "status", "size", "received_at", "run_ids"}
    assert first["webhook_uid"] == wid and first["received_at"].endswith("Z") and "payload" not in first

    _, only = await mgmt.call("GET", path, params=[("status", "Accepted")])
    assert [d["delivery_id"] for d in only["deliveries"]] == ["d3", "d0"]
    _, rejected = await mgmt.call(
        "GET", path, params=[("status", "Rejected (auth)"), ("status", "Rejected (invalid JSON)")]
    )
    assert [d["delivery_id"] for d in rejected["deliveries"]] == ["d4", "d1"]
    _, page1 = await mgmt.call("GET", path, params={"limit": "1"})
    status, body = await mgmt.call(
        "GET", path, params={"cursor": page1["page_info"]["next_cursor"], "status": "Accepted"}
    )
    assert status == 400 and "cursor" in body["detail"]  # a cursor only continues the listing it came from


async def test_bad_list_parameters(mgmt: Mgmt) -> None:
    fa, wid = await setup_hook(mgmt)
    for params, code in (
        ({"status": "accepted"}, 422),
        ({"limit": "0"}, 422),
        ({"limit": "201"}, 422),
        ({"cursor": "%%%"}, 400),
    ):
        status, body = await mgmt.call("GET", f"{BASE}/{fa}/webhooks/{wid}/deliveries", params=params)
        assert status == code and body["status"] == code, params


async def test_get_returns_the_payload_of_accepted_entries_only(mgmt: Mgmt) -> None:
    fa, wid = await setup_hook(mgmt)
    await log(
        mgmt,
        wid,
        [
            ("evt/1", "Accepted", {"action": "opened"}),
            ("evt/1", "Duplicate", None),
            ("bad", "Rejected (auth)", None),
        ],
    )
    path = f"{BASE}/{fa}/webhooks/{wid}/deliveries"
    status, body = await mgmt.call("GET", f"{path}/evt%2F1", mgmt.member)
    assert status == 200 and body["status"] == "Accepted" and body["payload"] == {"action": "opened"}
    status, body = await mgmt.call("GET", f"{path}/bad")
    assert status == 200 and body["status"] == "Rejected (auth)" and "payload" not in body
    assert body["detail"] == "credential does not match" and body["run_ids"] == []
    assert (await mgmt.call("GET", f"{path}/missing"))[0] == 404
    assert (await mgmt.call("GET", f"{path}/bad", mgmt.worker))[0] == 403
    assert (await mgmt.call("GET", f"{path}/bad", mgmt.other_admin))[0] == 404
    assert (await mgmt.call("GET", path, mgmt.other_admin))[0] == 404
    await mgmt.call("DELETE", f"{BASE}/{fa}/webhooks/{wid}")
    assert (await mgmt.call("GET", path))[0] == 404


# --- test filter ----------------------------------------------------------------------------------


async def test_filter_would_trigger_and_would_not_trigger(mgmt: Mgmt) -> None:
    fa, wid = await setup_hook(mgmt)
    aid = await mgmt.automation(fa, [([wid], {"action": ["opened", "reopened"], "repo": {"private": False}})])
    await log(
        mgmt,
        wid,
        [
            ("yes", "Accepted", {"action": "opened", "repo": {"private": False}}),
            ("no", "Accepted", {"action": "closed", "repo": {"private": False}}),
            ("rejected", "Rejected (auth)", None),
        ],
    )
    path = f"{BASE}/{fa}/automations/{aid}/test-filter"
    status, body = await mgmt.call("POST", path, mgmt.member, json={"delivery_id": "yes"})
    assert status == 200, body
    assert body["result"] == "Would trigger"
    assert body["webhook_check"]["passed"] is True and "orders" in body["webhook_check"]["detail"]
    assert body["payload_check"] == {"passed": True, "detail": "all 2 conditions match", "failed_path": None}
    assert body["delivery"]["webhook_uid"] == wid

    status, body = await mgmt.call("POST", path, json={"delivery_id": "no"})
    assert body["result"] == "Would not trigger" and body["webhook_check"]["passed"] is True
    assert body["payload_check"]["passed"] is False and body["payload_check"]["failed_path"] == "action"
    assert "closed" in body["payload_check"]["detail"]

    status, body = await mgmt.call("POST", path, json={"delivery_id": "rejected"})
    assert status == 409 and "Rejected (auth)" in body["detail"]
    assert (await mgmt.call("POST", path, json={"delivery_id": "missing"}))[0] == 404
    status, body = await mgmt.call("POST", path, json={})
    assert status == 422 and body["errors"][0]["field"] == "delivery_id"
    assert (await mgmt.call("POST", path, mgmt.worker, json={"delivery_id": "yes"}))[0] == 403
    assert (await mgmt.call("POST", path, mgmt.other_admin, json={"delivery_id": "yes"}))[0] == 404
    assert (
        await mgmt.call("POST", f"{BASE}/{fa}/automations/au_nope/test-filter", json={"delivery_id": "yes"})
    )[0] == 404


async def test_filter_webhook_check_and_notes(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    a = (await mgmt.webhook(fa, name="a"))["uid"]
    b = (await mgmt.webhook(fa, name="b"))["uid"]
    only_a = await mgmt.automation(fa, [([a], None)], name="only-a", enabled=False)
    no_triggers = await mgmt.automation(fa, [], name="manual")
    await log(mgmt, b, [("same", "Accepted", {"x": 1})])
    await log(mgmt, a, [("same", "Accepted", {"x": 2})])

    # "same" exists on both webhooks: the one the automation selects is chosen, or the one named.
    status, body = await mgmt.call(
        "POST", f"{BASE}/{fa}/automations/{only_a}/test-filter", json={"delivery_id": "same"}
    )
    assert status == 200 and body["delivery"]["webhook_uid"] == a
    assert body["result"] == "Would trigger"
    assert body["payload_check"]["detail"] == "no payload filter: every delivery matches"
    assert "disabled" in body["webhook_check"]["detail"]
    status, body = await mgmt.call(
        "POST",
        f"{BASE}/{fa}/automations/{only_a}/test-filter",
        json={"delivery_id": "same", "webhook_uid": b},
    )
    assert body["result"] == "Would not trigger" and body["webhook_check"]["passed"] is False
    assert "not selected" in body["webhook_check"]["detail"]
    status, body = await mgmt.call(
        "POST",
        f"{BASE}/{fa}/automations/{only_a}/test-filter",
        json={"delivery_id": "same", "webhook_uid": "wh_x"},
    )
    assert status == 404
    status, body = await mgmt.call(
        "POST", f"{BASE}/{fa}/automations/{no_triggers}/test-filter", json={"delivery_id": "same"}
    )
    assert body["result"] == "Would not trigger" and body["webhook_check"]["passed"] is False

    # A deleted webhook's stored deliveries can still be tested; the detail says it is deleted.
    await mgmt.call("DELETE", f"{BASE}/{fa}/webhooks/{a}")
    status, body = await mgmt.call(
        "POST",
        f"{BASE}/{fa}/automations/{only_a}/test-filter",
        json={"delivery_id": "same", "webhook_uid": a},
    )
    assert status == 200 and "deleted" in body["webhook_check"]["detail"]

    # An automation of another factory is not found through this one.
    other = await mgmt.factory("other")
    assert (
        await mgmt.call(
            "POST", f"{BASE}/{other}/automations/{only_a}/test-filter", json={"delivery_id": "same"}
        )
    )[0] == 404


async def test_filter_with_several_triggers_reports_the_passing_one(mgmt: Mgmt) -> None:
    fa, wid = await setup_hook(mgmt)
    aid = await mgmt.automation(fa, [([wid], {"kind": "a"}), ([wid], {"kind": "b"})])
    await log(mgmt, wid, [("b", "Accepted", {"kind": "b"}), ("c", "Accepted", {"kind": "c"})])
    path = f"{BASE}/{fa}/automations/{aid}/test-filter"
    _, body = await mgmt.call("POST", path, json={"delivery_id": "b"})
    assert body["result"] == "Would trigger" and body["payload_check"]["detail"].startswith("trigger #2")
    _, body = await mgmt.call("POST", path, json={"delivery_id": "c"})
    assert body["result"] == "Would not trigger" and body["payload_check"]["detail"].startswith("trigger #1")
    assert body["payload_check"]["failed_path"] == "kind"


# --- through ingress ------------------------------------------------------------------------------


async def test_ingress_deliveries_show_in_the_log_with_their_runs(mgmt: Mgmt) -> None:
    fa = await mgmt.factory()
    hook = await mgmt.webhook(fa)
    aid = await mgmt.automation(fa, [([hook["uid"]], {"action": "opened"})])
    path = hook["ingress_url"].removeprefix("http://factory.test")
    bearer = {"Authorization": f"Bearer {hook['secret']}", "X-Factory-Delivery-Id": "evt-1"}

    async def send(body: bytes, headers: dict[str, str]) -> Any:
        resp = await mgmt.client.post(path, data=body, headers=headers)
        return resp.status

    assert await send(b'{"action": "opened"}', bearer) == 202
    assert await send(b'{"action": "opened"}', bearer) == 202  # duplicate identity
    assert await send(b'{"action": "closed"}', {"Authorization": f"Bearer {hook['secret']}"}) == 202
    assert await send(b'{"action": "opened"}', {"Authorization": "Bearer wrong"}) == 401
    assert await send(b"{not json", {"Authorization": f"Bearer {hook['secret']}"}) == 400

    _, page = await mgmt.call("GET", f"{BASE}/{fa}/webhooks/{hook['uid']}/deliveries", mgmt.member)
    statuses = [d["status"] for d in page["deliveries"]]
    assert statuses == ["Rejected (invalid JSON)", "Rejected (auth)", "Accepted", "Duplicate", "Accepted"]
    accepted = page["deliveries"][-1]
    assert accepted["delivery_id"] == "evt-1" and len(accepted["run_ids"]) == 1
    assert page["deliveries"][2]["run_ids"] == [] and page["deliveries"][3]["run_ids"] == []
    _, one = await mgmt.call("GET", f"{BASE}/{fa}/webhooks/{hook['uid']}/deliveries/evt-1")
    assert one["payload"] == {"action": "opened"} and one["run_ids"] == accepted["run_ids"]

    _, result = await mgmt.call(
        "POST", f"{BASE}/{fa}/automations/{aid}/test-filter", json={"delivery_id": "evt-1"}
    )
    assert result["result"] == "Would trigger"
    closed = page["deliveries"][2]["delivery_id"]
    _, result = await mgmt.call(
        "POST", f"{BASE}/{fa}/automations/{aid}/test-filter", json={"delivery_id": closed}
    )
    assert result["result"] == "Would not trigger" and result["payload_check"]["failed_path"] == "action"
