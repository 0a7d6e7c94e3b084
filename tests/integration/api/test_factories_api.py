"""The factory API over HTTP: list, get (with webhooks, automations, last apply), create, dispatch."""

from __future__ import annotations

import datetime as dt
from typing import Any

import builders
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.clock import ManualClock
from store.models import ApplyRecord

FACTORY = "/api/v1/factory"
NOW = dt.datetime(2026, 2, 1, 12, 0, tzinfo=dt.UTC)


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    body: dict[str, Any] = await resp.json()
    assert body["error_code"] == code
    return body


async def make_factory(client: Any, key: str, **body: Any) -> dict[str, Any]:
    resp = await client.post(FACTORY, json=body, headers=h(key))
    assert resp.status == 201, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def definitions_factory(sessions: async_sessionmaker[AsyncSession]) -> str:
    """A definitions-managed factory with webhooks (one deleted), an automation and two applies."""
    clock = ManualClock(NOW)
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        factory = await builders.factory(
            s,
            clock,
            team.id,
            "ops",
            managed_by="definitions",
            description="Ops factory",
            worker_host="host-a",
            agents={"foreman": {"model_id": "m-fore", "name": "foreman"}},
            applied_revision="abc123",
            conditions=[{"type": "Ready", "status": "True", "reason": "Applied", "message": "ok"}],
        )
        for name, mode, deleted in (
            ("alerts", "token", None),
            ("deploys", "url_token", None),
            ("old", "token", NOW),
        ):
            await builders.webhook(
                s,
                clock,
                team.id,
                factory.uid,
                name,
                uid=f"wh_{name}",
                auth_mode=mode,
                secret_name=f"{name}-secret",
                managed_by="definitions",
                deleted_at=deleted,
            )
        await builders.automation(
            s,
            clock,
            team.id,
            factory.uid,
            "triage",
            [builders.webhook_trigger(["wh_alerts"])],
            uid="au_triage",
            prompt="Triage it.",
            definition_path="automations/triage/automation.md",
        )
        for revision, started in (("old000", NOW - dt.timedelta(hours=1)), ("abc123", NOW)):
            s.add(
                ApplyRecord(
                    team_id=team.id,
                    factory_uid=factory.uid,
                    factory_name="ops",
                    revision=revision,
                    outcome="succeeded",
                    started_at=started,
                    duration_ms=42,
                    summary={"add": 3},
                    errors=[],
                )
            )
    return factory.uid


async def test_create_factory_is_api_managed_and_names_are_unique(
    client: Any, admin_key: str, member_key: str, other_team_key: str
) -> None:
    created = await make_factory(client, admin_key, name="builds", worker_host="host-b", description="CI")
    assert created["managed_by"] == "api"
    assert created["uid"].startswith("fa_")
    assert (created["name"], created["worker_host"], created["description"]) == ("builds", "host-b", "CI")
    assert created["conditions"] == [] and created["last_applied_revision"] is None
    assert created["created_at"].endswith("Z")
    body = await problem(
        await client.post(FACTORY, json={"name": "builds"}, headers=h(admin_key)), 409, "conflict"
    )
    assert "builds" in body["detail"]
    await problem(
        await client.post(FACTORY, json={"name": "x"}, headers=h(member_key)), 403, "not_authorized"
    )
    for bad in ({}, {"name": ""}, {"name": 3}, {"name": "x", "worker_host": 1}, {"name": "x" * 201}):
        await problem(await client.post(FACTORY, json=bad, headers=h(admin_key)), 422, "invalid_request")
    await problem(await client.post(FACTORY, data=b"{", headers=h(admin_key)), 400, "invalid_request")
    # the same name in another team is a different factory; that team cannot see ours
    listed = await (await client.get(FACTORY, headers=h(other_team_key))).json()
    assert listed["factories"] == []


async def test_list_factories_with_search_and_cursor(client: Any, admin_key: str, member_key: str) -> None:
    for name in ("alpha", "beta", "gamma", "delta"):
        await make_factory(client, admin_key, name=name, description=f"the {name} team")
    page = await (await client.get(f"{FACTORY}?limit=3", headers=h(member_key))).json()
    assert [f["name"] for f in page["factories"]] == ["alpha", "beta", "delta"]
    cursor = page["page_info"]["next_cursor"]
    assert page["page_info"]["has_next_page"] is True
    rest = await (await client.get(f"{FACTORY}?limit=3&cursor={cursor}", headers=h(member_key))).json()
    assert [f["name"] for f in rest["factories"]] == ["gamma"]
    assert rest["page_info"] == {"has_next_page": False, "next_cursor": None}
    found = await (await client.get(f"{FACTORY}?search=ALP", headers=h(member_key))).json()
    assert [f["name"] for f in found["factories"]] == ["alpha"]
    by_description = await (await client.get(f"{FACTORY}?search=delta%20team", headers=h(member_key))).json()
    assert [f["name"] for f in by_description["factories"]] == ["delta"]
    for query in ("limit=0", "limit=501", "cursor=junk", f"cursor={cursor}&search=a"):
        await problem(await client.get(f"{FACTORY}?{query}", headers=h(member_key)), 400, "invalid_request")


async def test_get_factory_has_webhooks_automations_and_last_apply(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    uid = await definitions_factory(sessions)
    resp = await client.get(f"{FACTORY}/{uid}", headers=h(member_key))
    assert resp.status == 200
    body = await resp.json()
    assert body["managed_by"] == "definitions"
    assert body["conditions"][0]["type"] == "Ready"
    hooks = {w["name"]: w for w in body["webhooks"]}
    assert set(hooks) == {"alerts", "deploys"}  # the deleted one is gone
    assert hooks["alerts"]["ingress_url"] == "http://factory.test/webhooks/w/wh_alerts"
    assert hooks["deploys"]["ingress_url"] == "http://factory.test/webhooks/w/wh_deploys/{token}"
    assert hooks["alerts"]["factory_uid"] == uid and hooks["alerts"]["secret_name"] == "alerts-secret"
    assert body["automations"] == [
        {
            "uid": "au_triage",
            "name": "triage",
            "enabled": True,
            "agent": "foreman",
            "triggers": [
                {
                    "provider": "webhook",
                    "event": "received",
                    "filter": {
                        "webhook_ids": ["wh_alerts"],
                        "webhooks": [],
                        "resolved_webhook_ids": ["wh_alerts"],
                    },
                }
            ],
            "definition_path": "automations/triage/automation.md",
        }
    ]
    assert body["last_apply"]["revision"] == "abc123"
    assert body["last_apply"]["duration_ms"] == 42


async def test_unknown_and_other_team_factories_are_404(
    client: Any, member_key: str, other_team_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    uid = await definitions_factory(sessions)
    for key, fid in ((member_key, "fa_nope"), (other_team_key, uid)):
        await problem(await client.get(f"{FACTORY}/{fid}", headers=h(key)), 404, "resource_not_found")
        resp = await client.post(f"{FACTORY}/{fid}/runs", json={"prompt": "p"}, headers=h(key))
        await problem(resp, 404, "resource_not_found")


async def test_dispatch_runs_the_foreman_on_the_factory_worker_host(
    client: Any, member_key: str, worker_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    uid = await definitions_factory(sessions)
    resp = await client.post(
        f"{FACTORY}/{uid}/runs",
        json={"prompt": "Ship the release", "ticket_ref": "OPS-7", "ticket_url": "https://t.example/OPS-7"},
        headers=h(member_key),
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["factory_uid"] == uid
    assert body["foreman_agent"] == "foreman"
    assert body["state"] == "QUEUED"
    assert body["ticket_ref"] == "OPS-7"
    run = await (await client.get(f"/api/v1/agent/runs/{body['run_id']}", headers=h(member_key))).json()
    assert run["source"] == "FACTORY"
    assert run["factory_uid"] == uid
    assert run["worker_host"] == "host-a"
    assert run["agent_config"] == {"model_id": "m-fore", "name": "foreman", "worker_host": "host-a"}
    assert run["metadata"] == {"ticket_ref": "OPS-7", "ticket_url": "https://t.example/OPS-7"}
    assert run["prompt"].startswith("Ship the release") and "OPS-7" in run["prompt"]
    assert run["title"] == "OPS-7: Ship the release"
    # status, follow-up and cancel apply to dispatched runs like any other
    listed = await (await client.get(f"/api/v1/agent/runs?factory_uid={uid}", headers=h(member_key))).json()
    assert [r["run_id"] for r in listed["runs"]] == [body["run_id"]]
    cancel = await client.post(f"/api/v1/agent/runs/{body['run_id']}/cancel", headers=h(member_key))
    assert cancel.status == 200
    await problem(
        await client.post(f"{FACTORY}/{uid}/runs", json={"prompt": "p"}, headers=h(worker_key)),
        403,
        "not_authorized",
    )
    for bad in (
        {},
        {"prompt": ""},
        {"prompt": "p", "ticket_ref": 5},
        {"prompt": "p", "ticket_url": "u" * 300},
    ):
        await problem(
            await client.post(f"{FACTORY}/{uid}/runs", json=bad, headers=h(member_key)),
            422,
            "invalid_request",
        )


async def test_dispatch_to_an_api_factory_without_worker_host_is_service_hosted(
    client: Any, admin_key: str, member_key: str
) -> None:
    factory = await make_factory(client, admin_key, name="plain")
    resp = await client.post(
        f"{FACTORY}/{factory['uid']}/runs", json={"prompt": "Do it"}, headers=h(member_key)
    )
    body = await resp.json()
    assert body["ticket_ref"] is None
    run = await (await client.get(f"/api/v1/agent/runs/{body['run_id']}", headers=h(member_key))).json()
    assert run["worker_host"] is None
    assert run["prompt"] == "Do it"
    assert run["title"] == "Do it"
