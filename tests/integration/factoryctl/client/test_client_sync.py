"""The blocking client against the real server: every resource, typed models, errors, pages, raw answers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_servers import LiveServer, unique

from factoryctl.client import (
    Attachment,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    Delivery,
    FactoryClient,
    FactoryDetail,
    NotFoundError,
    PermissionDeniedError,
    Run,
    UnprocessableEntityError,
    WebhookWithSecret,
)
from factoryctl.client.files import validate_remote


@pytest.fixture
def admin(live: LiveServer) -> Iterator[FactoryClient]:
    with FactoryClient(live.url, live.admin_key) as client:
        yield client


def counting_client(live: LiveServer, key: str, **kw: object) -> tuple[FactoryClient, list[str]]:
    """A client whose transport records every request it sends (to prove what was retried)."""
    seen: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda r: seen.append(f"{r.method} {r.url.path}")]})
    return FactoryClient(live.url, key, http_client=http, **kw), seen  # type: ignore[arg-type]


def test_runs_create_get_followup_cancel(admin: FactoryClient) -> None:
    created = admin.runs.create(
        "Summarise issue 42",
        title="triage 42",
        config={"name": "triage", "model_id": "m-1"},
        metadata={"ticket": "T-42"},
        attachments=[Attachment("context.json", b'{"issue": 42}', "application/json")],
    )
    assert created.state == "QUEUED" and created.task_id == created.run_id

    run = admin.runs.get(created.run_id)
    assert isinstance(run, Run)
    assert (run.title, run.prompt, run.source) == ("triage 42", "Summarise issue 42", "API")
    assert run.agent_config["model_id"] == "m-1" and run.metadata == {"ticket": "T-42"}
    assert run.attachments == ["context.json"]
    assert isinstance(run.created_at, dt.datetime) and run.created_at.tzinfo is not None
    assert run.creator is not None and run.creator.type == "service_account"
    assert "run_id" in run.raw and not run.is_terminal

    followup = admin.runs.followup(run.run_id, "also check the logs")
    assert followup.followup_id and followup.outcome

    assert admin.runs.cancel(run.run_id) == run.run_id
    assert admin.runs.get(run.run_id).state == "CANCELLED"
    with pytest.raises(BadRequestError) as err:
        admin.runs.cancel(run.run_id)  # terminal: 400 invalid_request
    assert err.value.error_code == "invalid_request" and err.value.status_code == 400
    with pytest.raises(ConflictError):
        admin.runs.followup(run.run_id, "too late")


def test_runs_list_one_page_and_iterate_all(admin: FactoryClient) -> None:
    batch, elsewhere = unique("batch"), unique("elsewhere")
    made = {admin.runs.create(f"job {i}", config={"name": batch}).run_id for i in range(5)}
    admin.runs.create("other", config={"name": elsewhere})

    page = admin.runs.list(name=batch, limit=2)
    assert len(page) == 2 and page.has_next_page and page.next_cursor
    assert all(isinstance(r, Run) for r in page)

    every = [r.run_id for r in admin.runs.iter(name=batch, limit=2)]
    assert sorted(every) == sorted(made)  # three pages, each run once
    assert len(list(admin.runs.iter(state=["QUEUED"], name=elsewhere))) == 1
    assert list(admin.runs.iter(state="SUCCEEDED", name=batch)) == []


def test_problem_details_become_typed_exceptions(live: LiveServer, admin: FactoryClient) -> None:
    with pytest.raises(NotFoundError) as missing:
        admin.runs.get("run_doesnotexist")
    problem = missing.value.problem
    assert problem.status == 404 and problem.error_code == "resource_not_found"
    assert problem.instance == "/api/v1/agent/runs/run_doesnotexist" and not problem.retryable
    assert missing.value.body["error_code"] == "resource_not_found"  # type: ignore[index]

    with FactoryClient(live.url, "fk_wrong") as bad, pytest.raises(AuthenticationError) as auth:
        bad.runs.list()
    assert auth.value.headers.get("WWW-Authenticate", "").startswith("Bearer")

    with FactoryClient(live.url, live.member_key) as member, pytest.raises(PermissionDeniedError):
        member.factories.create(unique("not-allowed"))

    factory = admin.factories.create(unique("shop"))
    with pytest.raises(UnprocessableEntityError) as invalid:
        admin.webhooks.create(factory.uid, "Not A Valid Name", auth_mode="carrier-pigeon")
    assert {e.field for e in invalid.value.errors} == {"name", "auth_mode"}


def test_conflicts_and_creates_are_not_retried(live: LiveServer) -> None:
    client, seen = counting_client(live, live.admin_key, max_retries=2)
    with client:
        name = unique("dup")
        client.factories.create(name)
        seen.clear()
        with pytest.raises(ConflictError) as err:
            client.factories.create(name)
    assert not err.value.retryable
    assert seen == ["POST /api/v1/factory"]  # one attempt: a real conflict is final


def test_factories_create_list_get_dispatch(admin: FactoryClient) -> None:
    prefix = unique("chain")
    host = unique("host")
    shop = admin.factories.create(f"{prefix}-shop", worker_host=host, description="the shop")
    admin.factories.create(f"{prefix}-warehouse")
    assert shop.managed_by == "api" and shop.worker_host == host

    names = [f.name for f in admin.factories.iter(search=prefix, limit=1)]
    assert names == [f"{prefix}-shop", f"{prefix}-warehouse"]
    assert [f.name for f in admin.factories.list(search=f"{prefix}-ware")] == [f"{prefix}-warehouse"]

    hook = admin.webhooks.create(shop.uid, unique("orders"))
    detail = admin.factories.get(shop.uid)
    assert isinstance(detail, FactoryDetail)
    assert [w.uid for w in detail.webhooks] == [hook.uid] and detail.automations == []

    dispatched = admin.factories.dispatch(shop.uid, "Restock", ticket_ref="T-1")
    assert dispatched.foreman_agent == "foreman" and dispatched.ticket_ref == "T-1"
    run = admin.runs.get(dispatched.run_id)
    assert run.source == "FACTORY" and run.factory_uid == shop.uid and run.worker_host == host


def test_webhook_lifecycle(live: LiveServer, admin: FactoryClient) -> None:
    factory = admin.factories.create(unique("shop"))
    hook = admin.webhooks.create(factory.uid, unique("orders"), delivery_id_header="X-Order-Id")
    assert isinstance(hook, WebhookWithSecret) and hook.secret
    assert hook.auth_mode == "token" and hook.ingress_url == f"{live.url}/webhooks/w/{hook.uid}"
    assert live.deliver(hook, {"n": 1}, secret=hook.secret).status_code == 202

    assert [w.uid for w in admin.webhooks.iter(factory.uid)] == [hook.uid]
    assert admin.webhooks.get(factory.uid, hook.uid).delivery_id_header == "X-Order-Id"

    assert admin.webhooks.disable(factory.uid, hook.uid).enabled is False
    assert live.deliver(hook, {"n": 2}, secret=hook.secret).status_code == 404
    assert admin.webhooks.enable(factory.uid, hook.uid).enabled is True

    rotated = admin.webhooks.rotate_secret(factory.uid, hook.uid)
    assert rotated.secret and rotated.secret != hook.secret and rotated.applies_on_next_apply is False
    assert live.deliver(hook, {"n": 3}, secret=hook.secret).status_code == 401
    assert live.deliver(hook, {"n": 3}, secret=rotated.secret).status_code == 202

    assert admin.webhooks.rename(factory.uid, hook.uid, "purchases").name == "purchases"
    admin.webhooks.delete(factory.uid, hook.uid)
    with pytest.raises(NotFoundError):
        admin.webhooks.get(factory.uid, hook.uid)
    assert live.deliver(hook, {"n": 4}, secret=rotated.secret).status_code == 404


def test_signature_webhook_gets_its_provider_secret_later(admin: FactoryClient) -> None:
    factory = admin.factories.create(unique("shop"))
    hook = admin.webhooks.create(factory.uid, unique("gh"), auth_mode="signature", signature_scheme="github")
    assert hook.secret is None and hook.secret_configured is False
    supplied = admin.webhooks.set_secret(factory.uid, hook.uid, "provider-signing-secret")
    assert supplied.secret_configured is True
    url_hook = admin.webhooks.create(factory.uid, unique("tok"), auth_mode="url_token")
    assert url_hook.secret and url_hook.ingress_url_with_token == url_hook.ingress_url.replace(  # type: ignore[union-attr]
        "{token}", url_hook.secret
    )


def test_deliveries_pages_payload_and_filter(live: LiveServer, admin: FactoryClient) -> None:
    factory = admin.factories.create(unique("shop"))
    hook = admin.webhooks.create(factory.uid, unique("orders"))
    assert hook.secret
    for n in range(3):
        assert live.deliver(hook, {"n": n}, secret=hook.secret, delivery_id=f"order/{n}").status_code == 202
    assert live.deliver(hook, {"n": 0}, secret="wrong").status_code == 401

    page = admin.deliveries.list(factory.uid, hook.uid, limit=2)
    assert len(page) == 2 and page.has_next_page
    every = list(admin.deliveries.iter(factory.uid, hook.uid, limit=2))
    assert [d.status for d in every] == ["Rejected (auth)", "Accepted", "Accepted", "Accepted"]
    accepted = list(admin.deliveries.iter(factory.uid, hook.uid, status="Accepted"))
    assert [d.delivery_id for d in accepted] == ["order/2", "order/1", "order/0"]  # newest first

    one = admin.deliveries.get(factory.uid, hook.uid, "order/1")  # a '/' survives the path
    assert isinstance(one, Delivery) and one.payload == {"n": 1} and one.size == len(b'{"n": 1}')
    with pytest.raises(NotFoundError):
        admin.deliveries.get(factory.uid, hook.uid, "never-sent")


def test_automation_test_filter(live: LiveServer, admin: FactoryClient) -> None:
    factory = admin.factories.create(unique("shop"))
    hook = admin.webhooks.create(factory.uid, unique("orders"))
    assert hook.secret
    automation = live.add_automation(factory.uid, hook.uid, {"action": ["opened"]})
    live.deliver(hook, {"action": "opened"}, secret=hook.secret, delivery_id="d-open")
    live.deliver(hook, {"action": "closed"}, secret=hook.secret, delivery_id="d-close")

    yes = admin.automations.test_filter(factory.uid, automation, "d-open")
    assert yes.result == "Would trigger" and yes.would_trigger and yes.webhook_check.passed
    no = admin.automations.test_filter(factory.uid, automation, "d-close")
    assert no.result == "Would not trigger" and not no.would_trigger
    assert no.payload_check.failed_path == "action" and no.webhook_check.passed
    assert no.delivery is not None and no.delivery.delivery_id == "d-close"


def test_secrets(admin: FactoryClient) -> None:
    deploy, api = unique("deploy-token"), unique("api-token")
    generated = admin.secrets.create(deploy)
    assert generated.value and generated.version == 1
    given = admin.secrets.create(api, "s3cret-value", scope="run")
    assert given.value is None and (generated.scope, given.scope) == ("webhook", "run")
    assert admin.secrets.set(api, "s3cret-value-2").version == 2
    listed = {s.name: s for s in admin.secrets.list()}
    assert {deploy, api} <= set(listed) and all(s.value is None for s in listed.values())
    assert listed[api].scope == "run"

    factory = admin.factories.create(unique("shop"))
    admin.webhooks.create(factory.uid, unique("orders"), secret_name=deploy)
    with pytest.raises(ConflictError) as used:
        admin.secrets.delete(deploy)
    assert factory.name in used.value.detail  # names the webhooks that use it
    admin.secrets.delete(api)
    names = {s.name for s in admin.secrets.list()}
    assert deploy in names and api not in names


def test_raw_responses_expose_status_and_headers(admin: FactoryClient) -> None:
    name = unique("shop")
    raw = admin.with_raw_response.factories.create(name)
    assert raw.status_code == 201 and raw.retries_taken == 0
    assert raw.headers["content-type"].startswith("application/json")
    factory = raw.parse()
    assert factory.name == name
    deleted = admin.with_raw_response.webhooks.delete(
        factory.uid, admin.webhooks.create(factory.uid, unique("x")).uid
    )
    assert deleted.status_code == 204 and deleted.parse() is None


def test_worker_protocol(live: LiveServer) -> None:
    host = unique("host")  # admin keys may act for any host; a worker key only for its own
    with FactoryClient(live.url, live.admin_key) as admin, FactoryClient(live.url, live.worker_key) as worker:
        with pytest.raises(PermissionDeniedError):
            worker.workers.claim(host)
        assert admin.workers.claim(host, wait_seconds=0) is None  # idle
        run_id = admin.runs.create("work", config={"worker_host": host}).run_id
        worker = admin
        claim = worker.workers.claim(host, wait_seconds=5, worker_id="w1")
        assert claim is not None and claim.run.run_id == run_id and claim.run.prompt == "work"
        token = claim.lease_token
        beat = worker.workers.heartbeat(run_id, state="INPROGRESS", worker_id="w1", lease_token=token)
        assert beat.state == "INPROGRESS" and not beat.cancel_requested
        assert (
            worker.workers.append_logs(
                run_id, [("stdout", "line 1"), ("stderr", "line 2")], worker_id="w1", lease_token=token
            )
            == 2
        )
        done = worker.workers.report_state(
            run_id, "SUCCEEDED", status_message="ok", worker_id="w1", lease_token=token
        )
        assert done.state == "SUCCEEDED"
        logs = admin.runs.logs(run_id)
        assert [(x.stream, x.text) for x in logs.logs] == [("stdout", "line 1"), ("stderr", "line 2")]
        assert [x.text for x in admin.runs.iter_logs(run_id, limit=1)] == ["line 1", "line 2"]
        assert admin.runs.get(run_id).is_terminal


def test_validate_remote(live: LiveServer, tmp_path: Path) -> None:
    good = tmp_path / "good"
    (good / "webhooks").mkdir(parents=True)
    (good / "factory.yaml").write_text("name: good\n")
    bad = tmp_path / "bad"
    (bad / "webhooks").mkdir(parents=True)
    (bad / "factory.yaml").write_text("name: bad\n")
    (bad / "webhooks" / "orders.yaml").write_text("authMode: token\nsecretName: missing-secret\n")
    report = validate_remote(live.url, live.member_key, [str(good), str(bad), str(tmp_path / "empty")])

    assert report["valid"] is False
    by_path = {f["path"]: f for f in report["factories"]}
    assert by_path[str(good)]["errors"] == [] and by_path[str(good)]["name"] == "good"
    [missing] = by_path[str(bad)]["errors"]
    assert missing["rule"] == "FC040" and missing["path"] == f"{bad}/webhooks/orders.yaml"
    assert missing["line"] == 2
    assert by_path[str(tmp_path / "empty")]["errors"][0]["rule"] == "FC001"
    assert report["summary"]["errors"] == 2

    with FactoryClient(live.url, live.member_key) as client:
        typed = client.files.validate({"factory.yaml": b"name: inline\n"})
    assert typed.valid and typed.factory["name"] == "inline" and typed.schema_version == "v1alpha1"
    assert typed.validation_scope["state_dependent"] == "checked"  # a key: the online tier ran
