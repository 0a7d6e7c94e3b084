"""``factoryctl notifications`` as a real subprocess against the real server (docs/cli.md, "notifications";
docs/management.md, "Notification endpoints"): stdout, stderr and the exit code a person or a script gets.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import secrets

import builders
from cli_runner import cli, ok
from live_servers import LiveServer, unique

from factoryctl.client import FactoryClient
from store import ids
from store.clock import SystemClock
from store.models import NotificationAttempt, NotificationMessage

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def shop(api: FactoryClient) -> tuple[str, str, str]:
    """A factory (its name and ID) and a whsec_ signing secret's name."""
    factory = api.factories.create(unique("shop"))
    secret = unique("hook")
    api.secrets.create(secret, "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
    return factory.name, factory.uid, secret


def messages(live: LiveServer, factory_uid: str, endpoint_uid: str, statuses: list[str]) -> list[str]:
    """A run and one message per status, a minute apart; the first has one failed attempt."""

    async def go() -> list[str]:
        made = []
        async with live.sessions() as s, s.begin():
            team = await builders.team(s)
            run = await builders.run(s, SystemClock(), team.id, factory_uid=factory_uid)
            for i, status in enumerate(statuses):
                made.append(ids.new_id(ids.MESSAGE))
                s.add(
                    NotificationMessage(
                        id=made[-1],
                        team_id=team.id,
                        endpoint_uid=endpoint_uid,
                        run_id=run.run_id,
                        event_id=i,
                        event_type="run.succeeded",
                        payload='{"type":"run.succeeded"}',
                        status=status,
                        attempts=1,
                        next_attempt_at=T0 if status == "pending" else None,
                        manual=False,
                        last_attempt_at=T0,
                        last_response_status=500 if status == "failed" else 204,
                        created_at=T0 + dt.timedelta(minutes=i),
                    )
                )
            await s.flush()
            s.add(
                NotificationAttempt(
                    message_id=made[0],
                    endpoint_uid=endpoint_uid,
                    attempt=1,
                    trigger="scheduled",
                    started_at=T0,
                    duration_ms=42,
                    outcome="failed",
                    response_status=500,
                    error="HTTP 500",
                    next_attempt_at=None,
                )
            )
        return made

    return live.run(go())


def test_create_list_get_toggle_delete_by_factory_name(live: LiveServer, api: FactoryClient) -> None:
    name, fa, secret = shop(api)
    created = cli(
        live,
        "notifications",
        "create",
        "--factory",
        name,  # a name is looked up; an ID is used as is
        "--name",
        "ops",
        "--url",
        "https://hooks.example.com/x",
        "--secret-name",
        secret,
        "--event",
        "run.failed",
        "--event",
        "ERROR",
        "--filter-json",
        '{"factories": ["*"]}',
        "--format",
        "json",
    )
    endpoint = json.loads(ok(created))
    assert endpoint["events"] == ["FAILED", "ERROR"] and endpoint["filter"] == {"factories": ["*"]}

    header, row = ok(cli(live, "notifications", "list", "--factory", fa)).splitlines()
    assert columns(header) == ["NAME", "ID", "ENABLED", "EVENTS", "FAILING", "MANAGED BY", "URL"]
    assert columns(row) == ["ops", endpoint["id"], "yes", "FAILED,ERROR", "no", "api", endpoint["url"]]
    listed = json.loads(ok(cli(live, "notifications", "list", "--factory", name, "--format", "json")))
    assert [e["id"] for e in listed["endpoints"]] == [endpoint["id"]] and "page_info" in listed

    shown = ok(cli(live, "notifications", "get", "ops", "--factory", fa))
    assert re.search(rf"^id:\s+{endpoint['id']}$", shown, re.MULTILINE), shown
    assert re.search(rf"^secret name:\s+{re.escape(secret)}$", shown, re.MULTILINE), shown
    assert "whsec_" not in shown
    assert ok(cli(live, "notifications", "disable", "ops", "--factory", fa)) == (
        f"{endpoint['id']} (ops) disabled\n"
    )
    assert ok(cli(live, "notifications", "enable", endpoint["id"], "--factory", name)).endswith("enabled\n")
    assert ok(cli(live, "notifications", "delete", "ops", "--factory", fa)) == (
        "deleted notification endpoint ops\n"
    )
    gone = cli(live, "notifications", "get", "ops", "--factory", fa, "--format", "json")
    assert gone.returncode == 1 and json.loads(gone.stdout)["error_code"] == "resource_not_found"


def test_messages_attempts_and_resend(live: LiveServer, api: FactoryClient) -> None:
    _, fa, secret = shop(api)
    ne = api.notifications.create(
        fa, "ops", url="https://hooks.example.com/x", secret_name=secret, events=["run.*"]
    ).id
    made = messages(live, fa, ne, ["failed", "delivered", "pending"])

    lines = ok(cli(live, "notifications", "messages", "ops", "--factory", fa)).splitlines()
    assert columns(lines[0]) == [
        "MESSAGE ID",
        "STATUS",
        "EVENT",
        "RUN",
        "ATTEMPTS",
        "LAST RESULT",
        "NEXT ATTEMPT",
        "CREATED",
    ]
    assert [columns(line)[:2] for line in lines[1:]] == [
        [made[2], "pending"],
        [made[1], "delivered"],
        [made[0], "failed"],
    ]
    assert columns(lines[1])[6] == "2026-03-01T12:00:00.000Z" and columns(lines[2])[6] == "-"
    failed = cli(
        live, "notifications", "messages", ne, "--factory", fa, "--status", "failed", "--format", "json"
    )
    assert [m["id"] for m in json.loads(ok(failed))["messages"]] == [made[0]]
    assert cli(live, "notifications", "messages", ne, "--factory", fa, "--status", "lost").returncode == 2

    shown = ok(cli(live, "notifications", "attempts", made[0], "--factory", fa)).splitlines()  # searched
    assert shown[0].split() == ["message", "id:", made[0]] and shown[1].split() == ["endpoint:", ne]
    header = next(i for i, line in enumerate(shown) if line.startswith("ATTEMPT"))
    assert columns(shown[header]) == [
        "ATTEMPT",
        "TRIGGER",
        "STARTED",
        "DURATION",
        "OUTCOME",
        "STATUS",
        "ERROR",
        "NEXT ATTEMPT",
    ]
    assert columns(shown[header + 1]) == [
        "1",
        "scheduled",
        "2026-03-01T12:00:00.000Z",
        "42 ms",
        "failed",
        "500",
        "HTTP 500",
        "-",
    ]
    detail = cli(
        live, "notifications", "attempts", made[0], "--factory", fa, "--endpoint", "ops", "--format", "json"
    )
    assert json.loads(ok(detail))["attempt_log"][0]["outcome"] == "failed"

    assert ok(cli(live, "notifications", "resend", made[0], "--factory", fa)) == (
        f"{made[0]} queued: one more attempt now, with the same webhook-id\n"
    )
    again = cli(live, "notifications", "resend", made[0], "--factory", fa)
    assert again.returncode == 1 and "already queued" in again.stderr and "(conflict)" in again.stderr
    member = cli(live, "notifications", "resend", made[1], "--factory", fa, key=live.member_key)
    assert member.returncode == 1 and "(not_authorized)" in member.stderr
    unknown = cli(live, "notifications", "resend", "msg_nope", "--factory", fa, "--format", "json")
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["error_code"] == "resource_not_found"


def test_refusals_and_usage_errors(live: LiveServer, api: FactoryClient) -> None:
    _, fa, secret = shop(api)
    base = ["notifications", "create", "--factory", fa, "--name", "ops", "--secret-name", secret]
    private = cli(live, *base, "--url", "https://192.168.0.10/hook", "--event", "FAILED")
    assert private.returncode == 1 and "(invalid_request)" in private.stderr
    assert "  - url: the URL points at a private network" in private.stderr
    bad_event = cli(live, *base, "--url", "https://hooks.example.com/", "--event", "DONE")
    assert bad_event.returncode == 1 and "  - events[0]: unknown event 'DONE'" in bad_event.stderr
    bad_json = cli(
        live, *base, "--url", "https://hooks.example.com/", "--event", "FAILED", "--filter-json", "["
    )
    assert bad_json.returncode == 2 and bad_json.stdout == ""

    async def definitions_factory() -> str:
        async with live.sessions() as s, s.begin():
            team = await builders.team(s)
            row = await builders.factory(s, SystemClock(), team.id, unique("repo"), managed_by="definitions")
        return row.uid

    repo = live.run(definitions_factory())
    refused = cli(
        live,
        "notifications",
        "create",
        "--factory",
        repo,
        "--name",
        "alerts",
        "--url",
        "https://hooks.example.com/",
        "--secret-name",
        secret,
        "--event",
        "FAILED",
    )
    assert refused.returncode == 1 and "notifications/alerts.yaml" in refused.stderr
