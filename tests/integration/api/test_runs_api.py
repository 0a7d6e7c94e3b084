"""The Run API over HTTP against a real app and database (SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import apikeys
from store.clock import ManualClock
from store.models import ApiKey, Run, RunFollowup, RunLog

RUN = "/api/v1/agent/run"
RUNS = "/api/v1/agent/runs"


def h(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


async def problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    body: dict[str, Any] = await resp.json()
    assert body["status"] == status
    assert body["error_code"] == code
    assert "Traceback" not in body["detail"]
    return body


def error_fields(body: dict[str, Any]) -> set[str]:
    return {e["field"] for e in body.get("errors", [])}


async def create(client: Any, key: str, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    resp = await client.post(RUN, json=body, headers=h(key, **headers))
    assert resp.status == 200, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def get(client: Any, key: str, run_id: str) -> dict[str, Any]:
    resp = await client.get(f"{RUNS}/{run_id}", headers=h(key))
    assert resp.status == 200, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def set_state(sessions: async_sessionmaker[AsyncSession], run_id: str, state: str) -> None:
    async with sessions() as s, s.begin():
        await s.execute(update(Run).where(Run.run_id == run_id).values(state=state))


# --- create and get --------------------------------------------------------------------------------


async def test_create_then_get_returns_the_full_run(client: Any, member_key: str) -> None:
    created = await create(
        client,
        member_key,
        {
            "prompt": "Fix the flaky test\nin module x",
            "config": {"name": "nightly", "model_id": "m-1", "worker_host": "warp"},
            "metadata": {"ticket": "OPS-1", "a.b_c-d": ""},
            "attachments": [
                {
                    "file_name": "notes.txt",
                    "mime_type": "text/plain",
                    "data": base64.b64encode(b"hi").decode(),
                }
            ],
            "conversation_id": "conv-1",
        },
    )
    assert created["state"] == "QUEUED"
    assert created["task_id"] == created["run_id"]
    assert created["at_capacity"] is False
    run = await get(client, member_key, created["run_id"])
    assert run["title"] == "Fix the flaky test"
    assert run["prompt"] == "Fix the flaky test\nin module x"
    assert run["state"] == "QUEUED"
    assert run["source"] == "API"
    assert run["creator"]["type"] == "service_account"
    assert run["creator"]["uid"].startswith("key_")
    assert run["creator"]["display_name"] == "member key"
    assert run["agent_config"] == {"name": "nightly", "model_id": "m-1", "worker_host": "warp"}
    assert run["worker_host"] is None  # "warp" means service-hosted
    assert run["metadata"] == {"ticket": "OPS-1", "a.b_c-d": ""}
    assert run["attachments"] == ["notes.txt"]
    assert run["execution_location"] == "REMOTE"
    assert run["conversation_id"] == "conv-1"
    assert run["status_message"] is None
    assert run["created_at"].endswith("Z") and run["updated_at"].endswith("Z")
    assert dt.datetime.fromisoformat(run["created_at"]).tzinfo is not None


async def test_alias_route_and_cli_source_header(client: Any, member_key: str) -> None:
    resp = await client.post(RUNS, json={"prompt": "p"}, headers=h(member_key, **{"X-Factory-Source": "CLI"}))
    assert resp.status == 200
    run = await get(client, member_key, (await resp.json())["run_id"])
    assert run["source"] == "CLI"


async def test_title_defaults_to_first_line_capped_at_80(client: Any, member_key: str) -> None:
    created = await create(client, member_key, {"prompt": "\n\n  " + "word " * 40})
    run = await get(client, member_key, created["run_id"])
    assert len(run["title"]) <= 80
    assert run["title"].startswith("word word")
    explicit = await create(client, member_key, {"prompt": "p", "title": "My title"})
    assert (await get(client, member_key, explicit["run_id"]))["title"] == "My title"


async def test_self_hosted_worker_host_is_kept(client: Any, member_key: str) -> None:
    created = await create(client, member_key, {"prompt": "p", "config": {"worker_host": "host-a"}})
    assert (await get(client, member_key, created["run_id"]))["worker_host"] == "host-a"


async def test_skill_without_a_skills_source_is_refused_at_creation(client: Any, member_key: str) -> None:
    """A skill that cannot be resolved is a 422 when the run is created, never a failed run later."""
    resp = await client.post(RUNS, json={"skill": "acme/skills:triage"}, headers=h(member_key))
    assert resp.status == 422
    body = await resp.json()
    assert body["error_code"] == "invalid_request"
    assert "skills source" in body["detail"] or any("skill" in e["field"] for e in body.get("errors", []))


async def test_unknown_fields_are_ignored_and_identity_does_not_dispatch(
    client: Any, member_key: str
) -> None:
    created = await create(
        client,
        member_key,
        {"prompt": "p", "whatever": 1, "agent_identity_uid": "ai_foreman", "interactive": True},
    )
    run = await get(client, member_key, created["run_id"])
    assert run["source"] == "API"
    assert run["factory_uid"] is None


async def test_parent_run_must_exist_in_the_team(client: Any, member_key: str, other_team_key: str) -> None:
    parent = await create(client, member_key, {"prompt": "parent"})
    child = await create(client, member_key, {"prompt": "child", "parent_run_id": parent["run_id"]})
    assert (await get(client, member_key, child["run_id"]))["parent_run_id"] == parent["run_id"]
    resp = await client.post(
        RUN, json={"prompt": "x", "parent_run_id": parent["run_id"]}, headers=h(other_team_key)
    )
    assert error_fields(await problem(resp, 422, "invalid_request")) == {"parent_run_id"}


# --- bad input on create ---------------------------------------------------------------------------


async def test_malformed_bodies_are_400(client: Any, member_key: str) -> None:
    for data in (b"{not json", b"", b"[1, 2]", b"\xff\xfe"):
        resp = await client.post(
            RUN, data=data, headers=h(member_key, **{"Content-Type": "application/json"})
        )
        await problem(resp, 400, "invalid_request")


async def test_missing_prompt_and_wrong_types_are_422_per_field(client: Any, member_key: str) -> None:
    resp = await client.post(RUN, json={"title": "t"}, headers=h(member_key))
    assert error_fields(await problem(resp, 422, "invalid_request")) == {"prompt"}
    resp = await client.post(
        RUN,
        json={
            "prompt": 5,
            "title": [],
            "config": "x",
            "metadata": [],
            "attachments": {},
            "interactive": "yes",
        },
        headers=h(member_key),
    )
    body = await problem(resp, 422, "invalid_request")
    assert error_fields(body) == {"prompt", "title", "config", "metadata", "attachments", "interactive"}


async def test_config_errors_are_422(client: Any, member_key: str) -> None:
    resp = await client.post(
        RUN,
        json={
            "prompt": "p",
            "config": {"model": "x", "mcp_servers": {"s": {"url": "https://x", "warp_id": "y"}}},
        },
        headers=h(member_key),
    )
    assert error_fields(await problem(resp, 422, "invalid_request")) == {
        "config.model",
        "config.mcp_servers.s",
    }


async def test_invalid_metadata_is_422(client: Any, member_key: str) -> None:
    cases = [
        ({"bad key": "v"}, "metadata.bad key"),
        ({"k" * 65: "v"}, "metadata." + "k" * 65),
        ({"k": "é" * 129}, "metadata.k"),  # 258 bytes
        ({"k": 1}, "metadata.k"),
        ({f"k{i}": "v" for i in range(21)}, "metadata"),
    ]
    for metadata, field in cases:
        resp = await client.post(RUN, json={"prompt": "p", "metadata": metadata}, headers=h(member_key))
        assert field in error_fields(await problem(resp, 422, "invalid_request"))


async def test_attachment_rules(client: Any, member_key: str) -> None:
    ok = base64.b64encode(b"x").decode()
    big = base64.b64encode(b"x" * 4097).decode()  # the test settings allow 4096 bytes
    resp = await client.post(
        RUN, json={"prompt": "p", "attachments": [{"file_name": "a", "data": big}]}, headers=h(member_key)
    )
    assert "4096" in (await problem(resp, 413, "invalid_request"))["detail"]
    cases = [
        ([{"file_name": "a", "data": "***"}], "attachments[0].data"),
        ([{"file_name": "../etc/passwd", "data": ok}], "attachments[0].file_name"),
        ([{"file_name": "a", "data": ok}, {"file_name": "a", "data": ok}], "attachments[1].file_name"),
        ([{"file_name": "a", "data": ok}] * 6, "attachments"),
        (["a"], "attachments[0]"),
    ]
    for attachments, field in cases:
        resp = await client.post(RUN, json={"prompt": "p", "attachments": attachments}, headers=h(member_key))
        assert field in error_fields(await problem(resp, 422, "invalid_request"))


# --- authentication and roles ----------------------------------------------------------------------


async def test_keys_and_roles(
    client: Any, member_key: str, worker_key: str, admin_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await problem(await client.get(RUNS), 401, "authentication_required")
    await problem(await client.get(RUNS, headers=h("fk_not-a-key")), 401, "authentication_required")
    await problem(
        await client.get(RUNS, headers={"Authorization": "Basic abc"}), 401, "authentication_required"
    )
    await problem(await client.post(RUN, json={"prompt": "p"}, headers=h(worker_key)), 403, "not_authorized")
    await problem(await client.get(RUNS, headers=h(worker_key)), 403, "not_authorized")
    assert (await client.get(RUNS, headers=h(admin_key))).status == 200
    async with sessions() as s, s.begin():
        row = (
            await s.execute(select(ApiKey).where(ApiKey.key_hash == apikeys.hash_key(member_key)))
        ).scalar_one()
        row.revoked_at = dt.datetime.now(dt.UTC)
    await problem(await client.get(RUNS, headers=h(member_key)), 401, "authentication_required")


async def test_unknown_and_other_team_runs_are_404(client: Any, member_key: str, other_team_key: str) -> None:
    run_id = (await create(client, member_key, {"prompt": "mine"}))["run_id"]
    for key, rid in ((member_key, "run_doesnotexist"), (other_team_key, run_id)):
        await problem(await client.get(f"{RUNS}/{rid}", headers=h(key)), 404, "resource_not_found")
        await problem(await client.post(f"{RUNS}/{rid}/cancel", headers=h(key)), 404, "resource_not_found")
        resp = await client.post(f"{RUNS}/{rid}/followups", json={"message": "m"}, headers=h(key))
        await problem(resp, 404, "resource_not_found")
        await problem(await client.get(f"{RUNS}/{rid}/logs", headers=h(key)), 404, "resource_not_found")
    listed = await (await client.get(RUNS, headers=h(other_team_key))).json()
    assert listed["runs"] == []
    assert (await get(client, member_key, run_id))["state"] == "QUEUED"


# --- listing ---------------------------------------------------------------------------------------


async def test_pages_cover_every_run_once_under_concurrent_inserts(
    client: Any, member_key: str, seed_run: Any
) -> None:
    clock = ManualClock()
    seeded = []
    for i in range(7):
        clock.advance(1 if i != 3 else 0)  # two runs share an updated_at: the run_id breaks the tie
        seeded.append(await seed_run(clock=clock, prompt=f"run {i}"))
    seen: list[str] = []
    cursor = None
    while True:
        url = f"{RUNS}?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = await (await client.get(url, headers=h(member_key))).json()
        seen += [r["run_id"] for r in page["runs"]]
        if len(seen) == 2:  # a run created mid-listing sorts before the cursor: it is not repeated
            await create(client, member_key, {"prompt": "late"})
        cursor = page["page_info"]["next_cursor"]
        assert page["page_info"]["has_next_page"] is (cursor is not None)
        if cursor is None:
            break
    assert seen == list(reversed(seeded))  # newest-updated first, no duplicates, nothing skipped


async def test_sorts(client: Any, member_key: str, seed_run: Any) -> None:
    clock = ManualClock()
    ids = []
    for title in ("banana", "apple", "cherry"):
        clock.advance(1)
        ids.append(await seed_run(clock=clock, title=title))

    async def order(query: str) -> list[str]:
        body = await (await client.get(f"{RUNS}?{query}", headers=h(member_key))).json()
        return [r["title"] for r in body["runs"]]

    assert await order("sort_by=created_at&sort_order=asc") == ["banana", "apple", "cherry"]
    assert await order("sort_by=title&sort_order=asc") == ["apple", "banana", "cherry"]
    assert await order("sort_by=title") == ["cherry", "banana", "apple"]
    page = await (
        await client.get(f"{RUNS}?sort_by=title&sort_order=asc&limit=1", headers=h(member_key))
    ).json()
    cursor = page["page_info"]["next_cursor"]
    rest = await client.get(
        f"{RUNS}?sort_by=title&sort_order=asc&limit=5&cursor={cursor}", headers=h(member_key)
    )
    assert [r["title"] for r in (await rest.json())["runs"]] == ["banana", "cherry"]


async def test_filters(client: Any, member_key: str, seed_run: Any) -> None:
    clock = ManualClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    a = await seed_run(
        clock=clock,
        prompt="Deploy 100% of web",
        agent_config={"name": "deploy", "model_id": "m1"},
        state="FAILED",
        factory_uid="fa_1",
        automation_id="au_1",
        creator_uid="key_a",
    )
    clock.advance(3600)
    b = await seed_run(
        clock=clock,
        prompt="triage the queue",
        agent_config={"name": "triage"},
        source="CLI",
        state="SUCCEEDED",
    )
    clock.advance(3600)
    c = await seed_run(clock=clock, prompt="other", title="Nightly DEPLOY check")

    async def ids(query: str) -> set[str]:
        resp = await client.get(f"{RUNS}?{query}", headers=h(member_key))
        assert resp.status == 200, await resp.text()
        return {r["run_id"] for r in (await resp.json())["runs"]}

    assert await ids("state=FAILED") == {a}
    assert await ids("state=FAILED&state=SUCCEEDED") == {a, b}
    assert await ids("state=failed,queued") == {a, c}
    assert await ids("name=deploy") == {a}
    assert await ids("config_name=triage") == {b}
    assert await ids("model_id=m1") == {a}
    assert await ids("creator=key_a") == {a}
    assert await ids("source=CLI") == {b}
    assert await ids("factory_uid=fa_1") == {a}
    assert await ids("automation_id=au_1") == {a}
    assert await ids("q=deploy") == {a, c}
    assert await ids("q=100%25") == {a}
    assert await ids("q=%25") == {a}
    assert await ids("created_after=2026-01-01T00:30:00Z") == {b, c}
    assert await ids("created_before=2026-01-01T01:30:00%2B00:00") == {a, b}
    assert await ids("created_after=2026-01-01T01:30:00+00:00") == {c}  # an unescaped '+' still parses
    assert await ids("updated_after=2026-01-01T01:00:00.000Z") == {c}
    assert await ids("state=QUEUED&q=deploy") == {c}


async def test_list_bad_input_is_400(client: Any, member_key: str, seed_run: Any) -> None:
    for _ in range(3):
        await seed_run()
    page = await (await client.get(f"{RUNS}?limit=1&state=QUEUED", headers=h(member_key))).json()
    cursor = page["page_info"]["next_cursor"]
    assert cursor
    bad = [
        "limit=0",
        "limit=501",
        "limit=abc",
        "limit=",
        "cursor=garbage",
        "cursor=",
        f"cursor={cursor}",
        f"cursor={cursor}&state=QUEUED&sort_by=created_at",
        f"cursor={cursor}&state=FAILED",
        "state=DONE",
        "sort_by=prompt",
        "sort_order=up",
        "source=EMAIL",
        "created_after=yesterday",
        "created_before=2026-01-01",
        "updated_after=2026-13-01T00:00:00Z",
        "name=a&config_name=b",
    ]
    for query in bad:
        body = await problem(
            await client.get(f"{RUNS}?{query}", headers=h(member_key)), 400, "invalid_request"
        )
        assert body["instance"] == RUNS
    ok = await client.get(f"{RUNS}?limit=1&state=QUEUED&cursor={cursor}", headers=h(member_key))
    assert ok.status == 200


# --- cancel ----------------------------------------------------------------------------------------


async def test_cancel_queued_and_blocked_runs_at_once(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    before = (await get(client, member_key, run_id))["updated_at"]
    resp = await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))
    assert resp.status == 200
    assert await resp.json() == run_id
    run = await get(client, member_key, run_id)
    assert run["state"] == "CANCELLED"
    assert run["updated_at"] >= before
    assert run["finished_at"] is not None
    body = await problem(
        await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key)), 400, "invalid_request"
    )
    assert "CANCELLED" in body["detail"]
    blocked = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    await set_state(sessions, blocked, "BLOCKED")
    assert (await client.post(f"{RUNS}/{blocked}/cancel", headers=h(member_key))).status == 200
    assert (await get(client, member_key, blocked))["state"] == "CANCELLED"


async def test_cancel_running_run_requests_cancellation(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    for state in ("CLAIMED", "INPROGRESS"):
        run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
        await set_state(sessions, run_id, state)
        resp = await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))
        assert resp.status == 200 and await resp.json() == run_id
        run = await get(client, member_key, run_id)
        assert run["state"] == state
        assert run["cancel_requested"] is True


async def test_cancel_finished_run_is_400(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    for state in ("SUCCEEDED", "FAILED", "ERROR"):
        run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
        await set_state(sessions, run_id, state)
        await problem(
            await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key)), 400, "invalid_request"
        )


# --- follow-ups ------------------------------------------------------------------------------------


async def test_followup_to_a_live_run_is_delivered(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    await set_state(sessions, run_id, "INPROGRESS")
    resp = await client.post(
        f"{RUNS}/{run_id}/followups", json={"message": "also fix y", "mode": "steer"}, headers=h(member_key)
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["outcome"] == "delivered"
    async with sessions() as s:
        row = await s.get(RunFollowup, body["followup_id"])
        assert (
            row is not None
            and row.message == "also fix y"
            and row.mode == "steer"
            and row.delivered_at is None
        )
    assert (await get(client, member_key, run_id))["state"] == "INPROGRESS"


async def test_followup_to_a_finished_run_requeues_it(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    await set_state(sessions, run_id, "SUCCEEDED")
    resp = await client.post(
        f"{RUNS}/{run_id}/followups", json={"message": "one more thing"}, headers=h(member_key)
    )
    assert (await resp.json())["outcome"] == "requeued"
    run = await get(client, member_key, run_id)
    assert run["state"] == "QUEUED"
    assert run["attempt"] == 0  # attempt counts claims; this run was never claimed
    assert run["finished_at"] is None


async def test_followup_to_a_blocked_run_requeues_it_with_the_input(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    await set_state(sessions, run_id, "BLOCKED")
    resp = await client.post(
        f"{RUNS}/{run_id}/followups", json={"message": "use staging"}, headers=h(member_key)
    )
    assert (await resp.json())["outcome"] == "requeued"
    run = await get(client, member_key, run_id)
    assert (run["state"], run["attempt"]) == ("QUEUED", 0)


async def test_followup_to_a_run_being_cancelled_is_409(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    await set_state(sessions, run_id, "INPROGRESS")
    assert (await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))).status == 200
    resp = await client.post(f"{RUNS}/{run_id}/followups", json={"message": "m"}, headers=h(member_key))
    assert "being cancelled" in (await problem(resp, 409, "conflict"))["detail"]


async def test_followup_to_a_queued_run_waits_for_the_claim(client: Any, member_key: str) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    resp = await client.post(f"{RUNS}/{run_id}/followups", json={"message": "m"}, headers=h(member_key))
    assert (await resp.json())["outcome"] == "queued"
    assert (await get(client, member_key, run_id))["state"] == "QUEUED"


async def test_followup_errors(client: Any, member_key: str) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    for body in ({}, {"message": ""}, {"message": 3}, {"message": "m", "mode": 1}):
        resp = await client.post(f"{RUNS}/{run_id}/followups", json=body, headers=h(member_key))
        await problem(resp, 422, "invalid_request")
    resp = await client.post(f"{RUNS}/{run_id}/followups", data=b"nope", headers=h(member_key))
    await problem(resp, 400, "invalid_request")
    await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))
    resp = await client.post(f"{RUNS}/{run_id}/followups", json={"message": "m"}, headers=h(member_key))
    await problem(resp, 409, "conflict")


# --- logs ------------------------------------------------------------------------------------------


async def test_logs_are_read_in_order_with_after(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = (await create(client, member_key, {"prompt": "p"}))["run_id"]
    now = dt.datetime.now(dt.UTC)
    async with sessions() as s, s.begin():
        for i in range(5):
            s.add(
                RunLog(
                    run_id=run_id, stream="stderr" if i == 2 else "stdout", text=f"line {i}", created_at=now
                )
            )
    first = await (await client.get(f"{RUNS}/{run_id}/logs?limit=3", headers=h(member_key))).json()
    assert [x["text"] for x in first["logs"]] == ["line 0", "line 1", "line 2"]
    assert first["logs"][2]["stream"] == "stderr"
    assert first["has_more"] is True
    rest = await (
        await client.get(f"{RUNS}/{run_id}/logs?after={first['next_after']}", headers=h(member_key))
    ).json()
    assert [x["text"] for x in rest["logs"]] == ["line 3", "line 4"]
    assert rest["has_more"] is False
    idle = await (
        await client.get(f"{RUNS}/{run_id}/logs?after={rest['next_after']}", headers=h(member_key))
    ).json()
    assert idle["logs"] == [] and idle["next_after"] == rest["next_after"]
    for query in ("after=-1", "after=x", "limit=0", "limit=1001"):
        await problem(
            await client.get(f"{RUNS}/{run_id}/logs?{query}", headers=h(member_key)), 400, "invalid_request"
        )
