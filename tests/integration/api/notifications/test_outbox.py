"""The outbox on SQLite and PostgreSQL (docs/notifications.md): run state changes reach a real receiver on
127.0.0.1, signed so that the official ``standardwebhooks`` library verifies them; retries, Retry-After,
timeouts, failing endpoints, leases, SKIP LOCKED claims, resends, and destinations refused at send time."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest
import standardwebhooks
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.notifications import fanout, sender
from api.notifications.sender import Sender
from api.notifications.transport import DestinationRefused, GuardedResolver
from api.runs import records
from store import WriteRefused
from store import secrets as secret_store
from store.models import NotificationAttempt, NotificationEndpoint, NotificationMessage

from .conftest import SETTINGS, MakeSender, Receiver, Team, readable, settle


async def started(make_sender: MakeSender) -> Sender:
    """A sender that has taken its first turn: that fan-out starts its cursor at the newest event, so
    history is never sent and what a test does next is."""
    s = await make_sender()
    await s.step()
    return s


async def cancel(team: Team, run_id: str) -> None:
    async with team.sessions() as s, s.begin():
        await records.cancel_run(s, team.clock, team.team_id, run_id)


async def cancel_a_run(team: Team) -> str:
    """A new run of the team's factory, cancelled: two state changes (QUEUED, then CANCELLED)."""
    run_id = await team.run()
    await cancel(team, run_id)
    return run_id


async def fan_out_now(team: Team) -> int:
    """One fan-out turn once every event written is readable; how many messages it made."""
    await readable(team.sessions)
    async with team.sessions() as session, session.begin():
        return await fanout.fan_out(session, team.clock)


async def messages(team: Team) -> list[NotificationMessage]:
    async with team.sessions() as s:
        rows = await s.scalars(select(NotificationMessage).order_by(NotificationMessage.created_at))
        return list(rows)


async def attempts(team: Team, message_id: str) -> list[NotificationAttempt]:
    async with team.sessions() as s:
        stmt = select(NotificationAttempt).where(NotificationAttempt.message_id == message_id)
        return list(await s.scalars(stmt.order_by(NotificationAttempt.id)))


async def only_attempt(team: Team) -> tuple[NotificationMessage, NotificationAttempt]:
    """The one message there is, and its one attempt."""
    [message] = await messages(team)
    [attempt] = await attempts(team, message.id)
    return message, attempt


async def endpoint_row(team: Team, uid: str) -> NotificationEndpoint:
    async with team.sessions() as s:
        return (await s.scalars(select(NotificationEndpoint).where(NotificationEndpoint.uid == uid))).one()


async def test_a_state_change_is_delivered_signed_and_verifies_with_standardwebhooks(
    team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    s = await started(make_sender)
    await team.endpoint(receiver.url, events=["CANCELLED"])
    run_id = await team.run(title="nightly")
    await cancel(team, run_id)
    await settle(s)
    [got] = await receiver.wait_for(1)
    payload = standardwebhooks.Webhook(team.secret).verify(got.body, got.headers)
    assert payload["type"] == "run.cancelled"
    data = payload["data"]
    assert data["run_id"] == run_id and data["state"] == "CANCELLED" and data["previous_state"] == "QUEUED"
    assert data["title"] == "nightly" and data["factory"] == {"uid": team.factory_uid, "name": "acme"}
    [message] = await messages(team)
    assert got.headers["webhook-id"] == message.id and message.status == "delivered"
    assert json.loads(message.payload) == payload
    [a] = await attempts(team, message.id)
    assert (a.outcome, a.response_status, a.trigger, a.attempt) == ("succeeded", 204, "scheduled", 1)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(team.secret).verify(got.body + b" ", got.headers)


async def test_events_and_filters_choose_what_is_sent(
    team: Team, receiver: Receiver, make_sender: MakeSender, sessions: async_sessionmaker[AsyncSession]
) -> None:
    s = await started(make_sender)
    await team.endpoint(receiver.url, name="ended", events=["SUCCEEDED", "CANCELLED"])
    await team.endpoint(receiver.url, name="all-created", events=["QUEUED"], filter={"factories": ["*"]})
    await team.endpoint(
        receiver.url, name="scheduled", events=["run.*"], filter={"sources": ["SCHEDULED_AGENT"]}
    )
    await team.endpoint(receiver.url, name="off", events=["run.*"], enabled=False)
    own = await team.run()
    elsewhere = await team.run(factory_uid=None)
    await cancel(team, own)
    await settle(s)
    got = {(m.run_id, m.event_type, m.endpoint_uid) for m in await messages(team)}
    async with sessions() as session:
        names = dict(
            (await session.execute(select(NotificationEndpoint.uid, NotificationEndpoint.name))).all()
        )
    assert {(r, t, names[e]) for r, t, e in got} == {
        (own, "run.queued", "all-created"),
        (elsewhere, "run.queued", "all-created"),
        (own, "run.cancelled", "ended"),
    }
    await receiver.wait_for(3)


async def test_failures_retry_on_the_schedule_with_the_same_webhook_id_until_delivered(
    team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    s = await started(make_sender)
    uid = await team.endpoint(receiver.url, events=["CANCELLED"])
    receiver.answers = [500, 502]
    await cancel_a_run(team)
    await settle(s)
    [message] = await messages(team)
    assert message.status == "pending" and message.attempts == 1
    assert message.next_attempt_at == team.clock.now() + dt.timedelta(seconds=SETTINGS.retry_schedule[0])
    team.clock.advance(SETTINGS.retry_schedule[0])
    await settle(s)
    team.clock.advance(SETTINGS.retry_schedule[1])
    await settle(s)
    got = await receiver.wait_for(3)
    assert len({g.headers["webhook-id"] for g in got}) == 1
    assert [a.outcome for a in await attempts(team, message.id)] == ["failed", "failed", "succeeded"]
    assert [a.response_status for a in await attempts(team, message.id)] == [500, 502, 204]
    [message] = await messages(team)
    assert message.status == "delivered" and message.attempts == 3
    row = await endpoint_row(team, uid)
    assert row.consecutive_failures == 0 and not row.failing and row.last_success_at is not None


async def test_retry_after_moves_the_next_attempt_later_never_earlier(
    team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    s = await started(make_sender)
    await team.endpoint(receiver.url, events=["CANCELLED"])
    receiver.answers = [(429, {"Retry-After": "120"})]
    await cancel_a_run(team)
    await settle(s)
    message, a = await only_attempt(team)
    assert a.response_status == 429 and message.status == "pending"
    assert message.next_attempt_at == team.clock.now() + dt.timedelta(
        seconds=2.0
    )  # capped at the longest step


async def test_a_receiver_that_hangs_times_out_fails_for_good_and_marks_the_endpoint_failing(
    team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    s = await started(make_sender)
    uid = await team.endpoint(receiver.url, events=["CANCELLED"])
    receiver.default = "hang"
    await cancel_a_run(team)
    for step in (0.0, *SETTINGS.retry_schedule):
        team.clock.advance(step)
        await settle(s)
    [message] = await messages(team)
    tries = await attempts(team, message.id)
    assert [a.outcome for a in tries] == ["timeout"] * SETTINGS.attempts
    assert (
        message.status == "failed" and message.next_attempt_at is None and tries[-1].next_attempt_at is None
    )
    row = await endpoint_row(team, uid)
    assert row.failing and row.consecutive_failures == SETTINGS.attempts and row.failing_since is not None


async def test_a_dead_senders_claim_lapses_and_the_message_is_sent_again_with_its_id(
    team: Team, receiver: Receiver, make_sender: MakeSender, sessions: async_sessionmaker[AsyncSession]
) -> None:
    s = await started(make_sender)
    await team.endpoint(receiver.url, events=["CANCELLED"])
    await cancel_a_run(team)
    assert await fan_out_now(team) == 1
    async with sessions() as session, session.begin():
        [claimed] = await sender.claim(session, team.clock, SETTINGS, 10)  # ... and the sender dies
    async with sessions() as session, session.begin():
        assert await sender.claim(session, team.clock, SETTINGS, 10) == []  # held by the lease
    team.clock.advance(SETTINGS.lease_seconds + 0.001)
    await settle(s)
    [got] = await receiver.wait_for(1)
    assert got.headers["webhook-id"] == claimed.id
    # the dead sender's late result is fenced out: it cannot undo the delivery
    late = sender.Result(claimed, sender.Outcome("failed", 5, 500), team.clock.now())
    async with sessions() as session, session.begin():
        await sender.record(session, team.clock, SETTINGS, [late])
    [message] = await messages(team)
    assert message.status == "delivered"


async def test_concurrent_claims_never_take_the_same_message(
    team: Team, receiver: Receiver, sessions: async_sessionmaker[AsyncSession], make_sender: MakeSender
) -> None:
    await started(make_sender)
    await team.endpoint(receiver.url, events=["QUEUED"])
    for _ in range(40):
        await team.run()
    assert await fan_out_now(team) == 40

    async def take() -> list[str]:
        got: list[str] = []
        for _ in range(8):
            async with sessions() as session, session.begin():
                got += [c.id for c in await sender.claim(session, team.clock, SETTINGS, 3)]
        return got

    a, b = await asyncio.gather(take(), take())
    assert not set(a) & set(b) and len(a) + len(b) == 40


async def test_fan_out_twice_concurrently_makes_each_message_once(
    team: Team, receiver: Receiver, sessions: async_sessionmaker[AsyncSession], make_sender: MakeSender
) -> None:
    await started(make_sender)
    await team.endpoint(receiver.url, events=["QUEUED"])
    for _ in range(25):
        await team.run()
    await readable(sessions)

    async def turn() -> int:
        async with sessions() as session, session.begin():
            return await fanout.fan_out(session, team.clock)

    made = await asyncio.gather(turn(), turn(), turn())
    assert sum(made) == 25 and len(await messages(team)) == 25


async def test_a_resend_by_hand_is_one_attempt_with_the_same_id(
    team: Team, receiver: Receiver, make_sender: MakeSender, sessions: async_sessionmaker[AsyncSession]
) -> None:
    s = await started(make_sender)
    await team.endpoint(receiver.url, events=["CANCELLED"])
    await cancel_a_run(team)
    await settle(s)
    [message] = await messages(team)
    async with sessions() as session, session.begin():
        await session.execute(
            update(NotificationMessage)
            .where(NotificationMessage.id == message.id)
            .values(status="pending", manual=True, next_attempt_at=team.clock.now(), claim_token=None)
        )
    receiver.answers = [500]
    await settle(s)
    got = await receiver.wait_for(2)
    assert got[0].headers["webhook-id"] == got[1].headers["webhook-id"] == message.id
    tries = await attempts(team, message.id)
    assert [(a.trigger, a.outcome) for a in tries] == [("scheduled", "succeeded"), ("manual", "failed")]
    [message] = await messages(team)
    assert message.status == "failed" and not message.manual  # a resend is not put back on the schedule


@pytest.mark.parametrize(
    "url",
    [
        "https://2852039166/latest",  # 169.254.169.254 written as one number
        "https://[::ffff:169.254.169.254]/latest",  # 169.254.169.254 inside an IPv6 address
        "http://example.com/hook",  # plain http to a host that is not loopback
    ],
)
async def test_private_destinations_are_refused_when_sent(
    team: Team, receiver: Receiver, make_sender: MakeSender, url: str
) -> None:
    s = await started(make_sender)
    await team.endpoint(url, events=["CANCELLED"])
    await cancel_a_run(team)
    await settle(s)
    message, a = await only_attempt(team)
    assert a.outcome == "refused" and a.response_status is None and a.error
    assert message.status == "pending"  # retried on the schedule: the rule is checked again each time


async def test_a_missing_secret_fails_the_attempt_without_sending(
    team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    s = await started(make_sender)
    await team.endpoint(receiver.url, events=["CANCELLED"], secret_name="GONE")
    await cancel_a_run(team)
    await settle(s)
    _, a = await only_attempt(team)
    assert a.outcome == "failed" and "GONE" in (a.error or "") and receiver.got == []


def test_settings_have_a_first_retry_within_ten_seconds() -> None:
    from api.notifications.policy import NotificationSettings, next_delay

    worst = NotificationSettings(random=lambda: 1.0)
    delay: Any = next_delay(worst, 1)
    assert delay <= 10 and next_delay(worst, worst.attempts) is None


@pytest.mark.parametrize("host", ["0", "2852039166", "0x7f000001"])
async def test_the_resolver_refuses_names_that_resolve_to_private_addresses(host: str) -> None:
    resolver = GuardedResolver()
    try:
        if host == "0x7f000001":  # 127.0.0.1: loopback is allowed
            assert [r["host"] for r in await resolver.resolve(host, 443)] == ["127.0.0.1"]
        else:
            with pytest.raises(DestinationRefused):
                await resolver.resolve(host, 443)
    finally:
        await resolver.close()


async def test_the_resolver_resolves_localhost() -> None:
    resolver = GuardedResolver()
    try:
        assert {r["host"] for r in await resolver.resolve("localhost", 80)} <= {"127.0.0.1", "::1"}
    finally:
        await resolver.close()


async def test_a_run_scoped_secret_never_signs_and_a_signing_secret_never_becomes_run_scoped(
    team: Team, receiver: Receiver, make_sender: MakeSender, sessions: async_sessionmaker[AsyncSession]
) -> None:
    s = await started(make_sender)
    async with sessions() as session, session.begin():
        await secret_store.create(
            session, team.box, team.clock, team.team_id, "RUN_VALUE", team.secret, scope=secret_store.RUN
        )
    await team.endpoint(receiver.url, events=["CANCELLED"], secret_name="RUN_VALUE")
    await cancel_a_run(team)
    await settle(s)
    _, a = await only_attempt(team)
    assert a.outcome == "failed" and "webhook-scoped" in (a.error or "") and receiver.got == []
    await team.endpoint(receiver.url, name="signed", events=["CANCELLED"])
    with pytest.raises(WriteRefused, match="signs notification endpoint acme/signed"):
        async with sessions() as session, session.begin():
            await secret_store.set_scope(
                session, team.clock, team.team_id, team.secret_name, secret_store.RUN
            )


async def test_a_result_for_a_message_deleted_meanwhile_is_dropped_not_fatal(
    team: Team, receiver: Receiver, make_sender: MakeSender, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await started(make_sender)
    uid = await team.endpoint(receiver.url, events=["CANCELLED"])
    other = await team.endpoint(receiver.url, name="other", events=["CANCELLED"])
    await cancel_a_run(team)
    await fan_out_now(team)
    async with sessions() as session, session.begin():
        claimed = await sender.claim(session, team.clock, SETTINGS, 10)
    async with sessions() as session, session.begin():  # an apply deletes one endpoint meanwhile
        await session.execute(delete(NotificationEndpoint).where(NotificationEndpoint.uid == uid))
    results = [sender.Result(c, sender.Outcome("succeeded", 3, 204), team.clock.now()) for c in claimed]
    async with sessions() as session, session.begin():
        await sender.record(session, team.clock, SETTINGS, results)
    [message] = await messages(team)
    assert message.endpoint_uid == other and message.status == "delivered"


async def test_the_sender_loop_stops_without_leaving_a_task(
    team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    s = await make_sender()
    await team.endpoint(receiver.url, events=["CANCELLED"])
    receiver.default = "hang"  # an attempt in flight when the loop is cancelled
    await s.step()  # the first turn starts the fan-out's cursor: the change below comes after it
    before = asyncio.all_tasks()
    loop = asyncio.create_task(s.run())
    await cancel_a_run(team)
    await receiver.wait_for(1)
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
    leftover = {t for t in asyncio.all_tasks() - before if "web_protocol" not in repr(t)}  # the receiver's
    assert not leftover, leftover
