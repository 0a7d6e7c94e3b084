"""Poison messages on SQLite and PostgreSQL (docs/notifications.md, "Retries"): whatever goes wrong in an
attempt — a URL written before the rule that makes the resolver raise, an exception inside the
transport, an answer PostgreSQL cannot store, a signing secret the key cannot decrypt — ends as a recorded
failed attempt that counts toward the schedule (attempt limit, ``failing``, ``consecutive_failures``);
no message is left claimed to be re-claimed at every lease for ever."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import builders
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.fernet import Fernet
from sqlalchemy import select

from api.notifications import fanout
from api.notifications.sender import Result, Sender, claim, record
from api.notifications.transport import GuardedTransport, Outcome
from store.crypto import SecretBox
from store.models import NotificationAttempt, NotificationEndpoint, NotificationMessage

from .conftest import SETTINGS, MakeSender, Team, readable, settle, whsec


async def state(team: Team) -> tuple[NotificationMessage, list[NotificationAttempt], NotificationEndpoint]:
    """The one message, its attempts (oldest first) and its endpoint."""
    async with team.sessions() as s:
        message = (await s.scalars(select(NotificationMessage))).one()
        tries = await s.scalars(
            select(NotificationAttempt)
            .where(NotificationAttempt.message_id == message.id)
            .order_by(NotificationAttempt.id)
        )
        endpoint = (
            await s.scalars(
                select(NotificationEndpoint).where(NotificationEndpoint.uid == message.endpoint_uid)
            )
        ).one()
        return message, list(tries), endpoint


async def cancel_a_run(team: Team) -> None:
    from api.runs import records

    run_id = await team.run()
    async with team.sessions() as s, s.begin():
        await records.cancel_run(s, team.clock, team.team_id, run_id)


async def run_the_schedule_out(team: Team, sender: Sender) -> None:
    """Every attempt the schedule gives the message, each when it is due."""
    for step in (0.0, *SETTINGS.retry_schedule):
        team.clock.advance(step)
        await settle(sender)


def assert_failed_for_good(
    message: NotificationMessage, tries: list[NotificationAttempt], endpoint: NotificationEndpoint
) -> None:
    assert len(tries) == SETTINGS.attempts and message.attempts == SETTINGS.attempts
    assert message.status == "failed" and message.claim_token is None and message.next_attempt_at is None
    assert endpoint.failing and endpoint.consecutive_failures == SETTINGS.attempts


async def test_a_url_written_before_the_rule_that_makes_the_resolver_raise_fails_on_the_schedule(
    team: Team, make_sender: MakeSender
) -> None:
    sender = await make_sender()
    await sender.step()  # the fan-out cursor starts at the newest event
    await team.endpoint("https://a..localhost/hook", events=["CANCELLED"])  # no rule on this path
    await cancel_a_run(team)
    await settle(sender)
    message, [first], _ = await state(team)
    assert message.status == "pending" and message.claim_token is None and message.attempts == 1
    assert first.outcome == "refused" and (first.error or "").startswith("destination not allowed")
    await run_the_schedule_out(team, sender)
    assert_failed_for_good(*await state(team))


async def test_an_attempt_that_raises_is_a_failed_attempt_and_leaves_nothing_claimed(
    team: Team, make_sender: MakeSender
) -> None:
    """A real exception from inside an attempt: the transport's connection pool is already closed (as it
    is when the app stops under a running sender), so every ``post`` raises RuntimeError."""
    working = await make_sender()
    await working.step()
    closed = GuardedTransport(SETTINGS)
    await closed.__aenter__()
    await closed.__aexit__(None, None, None)
    sender = Sender(working.sessions, team.clock, team.box, closed, SETTINGS)
    await team.endpoint("https://hooks.example.com/hook", events=["CANCELLED"])
    await cancel_a_run(team)
    await settle(sender)
    message, [first], endpoint = await state(team)
    assert first.outcome == "failed" and first.error == "internal error during the attempt (RuntimeError)"
    assert message.status == "pending" and message.claim_token is None and message.attempts == 1
    assert message.next_attempt_at == team.clock.now() + dt.timedelta(seconds=SETTINGS.retry_schedule[0])
    assert endpoint.consecutive_failures == 1 and message.last_error == first.error
    await run_the_schedule_out(team, sender)
    assert_failed_for_good(*await state(team))


@pytest.fixture
async def nul_receiver() -> AsyncIterator[str]:
    """A receiver on 127.0.0.1 that answers 500 with NUL bytes in its body (PostgreSQL text cannot hold
    them)."""

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=500, body=b"bad\x00body\x00", content_type="text/plain")

    app = web.Application()
    app.router.add_post("/hook", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/hook"))
    await server.close()


async def test_an_answer_the_database_cannot_store_is_still_recorded(
    team: Team, make_sender: MakeSender, nul_receiver: str
) -> None:
    sender = await make_sender()
    await sender.step()
    await team.endpoint(nul_receiver, events=["CANCELLED"])
    await cancel_a_run(team)
    await settle(sender)
    message, [first], _ = await state(team)
    assert first.outcome == "failed" and first.response_status == 500
    assert first.response_excerpt == "bad\ufffdbody\ufffd"
    assert message.status == "pending" and message.claim_token is None and message.attempts == 1


async def test_a_signing_secret_the_key_cannot_decrypt_fails_the_attempt(
    team: Team, make_sender: MakeSender
) -> None:
    """Written under another key (a key rotated without keeping the old one): the claim is not rolled
    back over and over; each attempt fails on the schedule without sending."""
    sender = await make_sender()
    await sender.step()
    other = SecretBox([Fernet.generate_key()])
    async with team.sessions() as s, s.begin():
        await builders.secret(s, other, team.clock, team.team_id, "OLD_KEY_SECRET", whsec())
    await team.endpoint("https://hooks.example.com/hook", events=["CANCELLED"], secret_name="OLD_KEY_SECRET")
    await cancel_a_run(team)
    await settle(sender)
    message, [first], _ = await state(team)
    assert first.outcome == "failed" and "cannot be decrypted" in (first.error or "")
    assert message.status == "pending" and message.claim_token is None
    await run_the_schedule_out(team, sender)
    assert_failed_for_good(*await state(team))


async def test_text_no_database_can_store_is_made_storable(team: Team, make_sender: MakeSender) -> None:
    """An error or an answer with NUL or a lone surrogate (left by ``surrogateescape`` decoding) would make
    the whole batch's write fail, and its messages be claimed again and again."""
    sender = await make_sender()
    await sender.step()
    await team.endpoint("https://hooks.example.com/hook", events=["CANCELLED"])
    await cancel_a_run(team)
    await readable(team.sessions)
    async with team.sessions() as s, s.begin():
        await fanout.fan_out(s, team.clock)
    async with team.sessions() as s, s.begin():
        [claimed] = await claim(s, team.clock, SETTINGS, 10)
    outcome = Outcome("failed", 3, 502, excerpt="a\x00b\udcff", error="BadStatusLine: \udcfe\x00")
    async with team.sessions() as s, s.begin():
        await record(s, team.clock, SETTINGS, [Result(claimed, outcome, team.clock.now())])
    message, [first], _ = await state(team)
    assert (first.response_excerpt, first.error) == ("a\ufffdb?", "BadStatusLine: ?\ufffd")
    assert message.last_error == first.error and message.claim_token is None and message.attempts == 1
