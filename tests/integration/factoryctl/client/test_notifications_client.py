"""``notifications`` of the typed client, sync and async, against the real server on SQLite and PostgreSQL
(docs/management.md, "Notification endpoints"; docs/client.md)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import secrets
from collections.abc import Iterator

import builders
import pytest
from live_servers import LiveServer, unique

from factoryctl.client import (
    AsyncFactoryClient,
    ConflictError,
    FactoryClient,
    NotFoundError,
    NotificationEndpoint,
    NotificationMessage,
    NotificationMessageDetail,
    PermissionDeniedError,
    UnprocessableEntityError,
)
from store import ids
from store.clock import SystemClock
from store.models import NotificationAttempt
from store.models import NotificationMessage as MessageRow

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def admin(live: LiveServer) -> Iterator[FactoryClient]:
    with FactoryClient(live.url, live.admin_key) as client:
        yield client


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def messages(live: LiveServer, factory_uid: str, endpoint_uid: str, statuses: list[str]) -> list[str]:
    """One run and a message per status (oldest first, a minute apart), the first with two attempts."""

    async def go() -> list[str]:
        made = []
        async with live.sessions() as s, s.begin():
            team = await builders.team(s)
            run = await builders.run(s, SystemClock(), team.id, factory_uid=factory_uid)
            for i, status in enumerate(statuses):
                at = T0 + dt.timedelta(minutes=i)
                msg_id = ids.new_id(ids.MESSAGE)
                s.add(
                    MessageRow(
                        id=msg_id,
                        team_id=team.id,
                        endpoint_uid=endpoint_uid,
                        run_id=run.run_id,
                        event_id=i,
                        event_type="run.failed",
                        payload=json.dumps({"type": "run.failed", "data": {"run_id": run.run_id}}),
                        status=status,
                        attempts=0 if status == "pending" else 1,
                        next_attempt_at=at if status == "pending" else None,
                        manual=False,
                        last_attempt_at=None if status == "pending" else at,
                        last_response_status=None if status == "pending" else 503,
                        delivered_at=at if status == "delivered" else None,
                        created_at=at,
                    )
                )
                made.append(msg_id)
            await s.flush()
            for n, outcome in ((1, "timeout"), (2, "succeeded")):
                s.add(
                    NotificationAttempt(
                        message_id=made[0],
                        endpoint_uid=endpoint_uid,
                        attempt=n,
                        trigger="scheduled",
                        started_at=T0 + dt.timedelta(seconds=n),
                        duration_ms=15000 if outcome == "timeout" else 8,
                        outcome=outcome,
                        error="no answer within 15s" if outcome == "timeout" else None,
                    )
                )
        return made

    return live.run(go())


def test_endpoints_messages_and_resend_sync(live: LiveServer, admin: FactoryClient) -> None:
    factory = admin.factories.create(unique("shop"))
    secret = unique("hook")
    admin.secrets.create(secret, whsec())
    created = admin.notifications.create(
        factory.uid,
        "ops",
        url="https://hooks.example.com/factory",
        secret_name=secret,
        events=["run.failed", "ERROR"],
        filter={"sources": ["SCHEDULED_AGENT"]},
        description="pager",
    )
    assert isinstance(created, NotificationEndpoint) and created.id.startswith("ne_")
    assert created.events == ["FAILED", "ERROR"] and created.filter == {"sources": ["SCHEDULED_AGENT"]}
    assert created.secret_name == secret and created.enabled and created.managed_by == "api"
    assert isinstance(created.created_at, dt.datetime) and created.created_at.tzinfo is not None
    assert [e.id for e in admin.notifications.list(factory.uid)] == [created.id]
    assert admin.notifications.get(factory.uid, "ops").id == created.id

    off = admin.notifications.disable(factory.uid, "ops")
    assert off.enabled is False
    changed = admin.notifications.update(factory.uid, created.id, events=["run.*"], filter={}, description="")
    assert changed.events == ["run.*"] and changed.filter == {} and changed.description is None
    assert admin.notifications.enable(factory.uid, "ops").enabled is True

    made = messages(live, factory.uid, created.id, ["delivered", "failed", "pending", "failed", "delivered"])
    listed = list(admin.notifications.messages(factory.uid, "ops", limit=2))  # three pages
    assert [m.id for m in listed] == made[::-1] and all(isinstance(m, NotificationMessage) for m in listed)
    assert [m.id for m in admin.notifications.messages(factory.uid, "ops", status="failed")] == [
        made[3],
        made[1],
    ]
    page = admin.notifications.messages_page(factory.uid, created.id, status=["pending"], limit=5)
    assert [m.id for m in page] == [made[2]] and not page.has_next_page

    detail = admin.notifications.message(factory.uid, "ops", made[0])
    assert isinstance(detail, NotificationMessageDetail) and detail.status == "delivered"
    assert detail.payload["type"] == "run.failed" and detail.attempts == 1
    assert [(a.attempt, a.outcome) for a in detail.attempt_log] == [(1, "timeout"), (2, "succeeded")]
    assert detail.attempt_log[0].error == "no answer within 15s"

    queued = admin.notifications.resend(factory.uid, "ops", made[1])
    assert queued.id == made[1] and queued.status == "pending"
    with pytest.raises(ConflictError) as conflict:
        admin.notifications.resend(factory.uid, "ops", made[1])
    assert "already queued" in conflict.value.detail

    with pytest.raises(UnprocessableEntityError) as invalid:
        admin.notifications.create(
            factory.uid, "inner", url="https://10.1.2.3/", secret_name=secret, events=["FAILED"]
        )
    assert invalid.value.errors[0].field == "url"
    with FactoryClient(live.url, live.member_key) as member:
        assert member.notifications.get(factory.uid, "ops").id == created.id
        with pytest.raises(PermissionDeniedError):
            member.notifications.resend(factory.uid, "ops", made[3])
        with pytest.raises(PermissionDeniedError):
            member.notifications.delete(factory.uid, "ops")
    admin.notifications.delete(factory.uid, "ops")
    with pytest.raises(NotFoundError):
        admin.notifications.get(factory.uid, "ops")


async def test_endpoints_messages_and_resend_async(live: LiveServer) -> None:
    async with AsyncFactoryClient(live.url, live.admin_key) as client:
        factory = await client.factories.create(unique("shop"))
        secret = unique("hook")
        await client.secrets.create(secret, whsec())
        created = await client.notifications.create(
            factory.uid, "alerts", url="http://127.0.0.1:9/hook", secret_name=secret, events=["run.*"]
        )
        assert [e.name for e in await client.notifications.list(factory.uid)] == ["alerts"]
        made = await asyncio.to_thread(messages, live, factory.uid, created.id, ["failed", "delivered"])
        seen = [m.id async for m in client.notifications.messages(factory.uid, "alerts", limit=1)]
        assert seen == made[::-1]
        detail = await client.notifications.message(factory.uid, created.id, made[0])
        assert len(detail.attempt_log) == 2
        queued = await client.notifications.resend(factory.uid, "alerts", made[0])
        assert queued.status == "pending"
        await client.notifications.delete(factory.uid, created.id)
        with pytest.raises(NotFoundError):
            await client.notifications.message(factory.uid, created.id, made[0])
