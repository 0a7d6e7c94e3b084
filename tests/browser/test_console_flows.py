"""The console's flows in a real browser (Chromium through Playwright) against one real ``factoryctl serve``:
a broken definition and its repair on the factory page, a webhook created, toggled and rotated from the
console (checked at its ingress URL), a delivery followed to the automation's filter test and to its run,
which finishes live, payload markup kept inert, a form without its CSRF token refused, a member's
read-only webhook page.

One ``serve`` for the module (``--repo`` a factory directory, one service-hosted worker with a command
harness that waits for a release file); a fresh browser context per test. Every wait is on a condition
with a deadline: Playwright's auto-waiting ``expect`` or :func:`serve_support.wait_for`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_support import reload_shown_once, sign_in
from playwright.sync_api import Browser, Dialog, Locator, Page, expect
from serve_support import Served, run_cli, serving, wait_for

pytestmark = pytest.mark.slow

KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
ENV = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}
HOOK_SECRET = "alerts-token-for-the-browser-tests"  # the value of the team secret ``hooks``
LIVE = re.compile(r"^(QUEUED|PENDING|CLAIMED|INPROGRESS)$")

FACTORY = "name: flows\ndescription: Console flows in a real browser.\n"
ALERTS = "description: Alerts from monitoring.\nsecretName: hooks\n"
SPARE = "description: A webhook the tests break and repair.\nsecretName: hooks\n"
BROKEN_SPARE = SPARE + "authMode: sometimes\n"  # line 3: not an auth mode
AUTOMATION = """---
title: Alert triage
triggers:
  - provider: webhook
    event: received
    filter:
      webhooks: [alerts]
      payload:
        severity: [high, critical]
---
An alert fired: say which service is affected.
"""


def write_factory(root: Path) -> None:
    (root / "webhooks").mkdir(parents=True)
    (root / "automations" / "triage").mkdir(parents=True)
    (root / "factory.yaml").write_text(FACTORY)
    (root / "webhooks" / "alerts.yaml").write_text(ALERTS)
    (root / "webhooks" / "spare.yaml").write_text(SPARE)
    (root / "automations" / "triage" / "automation.md").write_text(AUTOMATION)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-flows")


@pytest.fixture(scope="module")
def release(workdir: Path) -> Path:
    """Runs of the service-hosted worker print a line, then wait until this file exists."""
    gate = workdir / "gate"  # shown read-only in the worker's sandbox (serve --sandbox-ro)
    gate.mkdir(exist_ok=True)
    return gate / "release"


@pytest.fixture(scope="module")
def served(workdir: Path, release: Path) -> Iterator[Served]:
    """``serve --repo FACTORY --harness command --workers 1`` with the team secret ``hooks``."""
    data, root = workdir / "data", workdir / "factory"
    write_factory(root)
    created = run_cli(
        "--data-dir", data, "secrets", "create", "hooks", "--from-stdin", stdin=HOOK_SECRET, env=ENV
    )
    assert created.returncode == 0, created.stderr
    wait = shlex.quote(str(release))
    command = (
        f"cat >/dev/null; echo started-live; while [ ! -e {wait} ]; do sleep 0.05; done; echo released-live"
    )
    args = ("--repo", root, "--harness", "command", "--command", command, "--sandbox-ro", release.parent)
    with serving(data, *args, workers=1, env=ENV) as server:
        try:
            yield server
        finally:
            release.touch()  # never leave the worker waiting at shutdown


@pytest.fixture(scope="module")
def repo(workdir: Path, served: Served) -> Path:
    return workdir / "factory"


# --- helpers ---------------------------------------------------------------------------------------


def factory_uid(served: Served, name: str) -> str:
    """The uid of factory ``name``, once it exists (the directory source applies it after start)."""

    def find() -> str | None:
        return next((f["uid"] for f in served.get("/api/v1/factory")["factories"] if f["name"] == name), None)

    return wait_for(find, 30, f"factory {name} applied", alive=[served.proc], logs=[served.log])


def api_factory(served: Served, name: str) -> str:
    status, body = served.post("/api/v1/factory", {"name": name})
    assert status == 201, body
    return str(body["uid"])


def api_webhook(served: Served, uid: str, name: str) -> tuple[str, str, str]:
    """A token webhook created through the API: its uid, ingress URL and secret."""
    status, body = served.post(f"/api/v1/factory/{uid}/webhooks", {"name": name, "auth_mode": "token"})
    assert status == 201, body
    return str(body["uid"]), str(body["ingress_url"]), str(body["secret"])


def deliver(url: str, secret: str, payload: Any, delivery_id: str | None = None) -> int:
    """POST ``payload`` to an ingress URL as a token sender; the status code."""
    headers = {"Authorization": f"Bearer {secret}"}
    if delivery_id is not None:
        headers["X-Factory-Delivery-Id"] = delivery_id
    return httpx.post(url, json=payload, headers=headers, timeout=10).status_code


def reload_until(page: Page, served: Served, check: Callable[[], bool], what: str) -> None:
    """Reload ``page`` until ``check()`` holds (30 s deadline)."""

    def again() -> bool:
        page.reload()
        return check()

    wait_for(again, 30, what, alive=[served.proc], logs=[served.log])


def accept_confirm(page: Page) -> None:
    """Accept the next ``window.confirm`` (the console's ``data-confirm`` forms)."""

    def accept(dialog: Dialog) -> None:
        assert dialog.type == "confirm", dialog.message
        dialog.accept()

    page.once("dialog", accept)


def condition(page: Page, kind: str, column: int) -> Locator:
    """A cell of the factory page's conditions table: 1 status, 2 reason, 3 message."""
    first = page.locator("td:first-child", has_text=re.compile(f"^{kind}$"))
    return page.locator("table.grid tbody tr", has=first).locator("td").nth(column)


def admin_forms(page: Page) -> dict[str, int]:
    """How many of each admin form the webhook page shows."""
    return {
        action: page.locator(f"form[method=post][action$='/{action}']").count()
        for action in ("enabled", "rotate-secret", "delete", "replay")
    }


# --- flows -----------------------------------------------------------------------------------------


def test_a_broken_definition_shows_not_ready_with_file_and_line_then_recovers(
    page: Page, served: Served, repo: Path
) -> None:
    uid = factory_uid(served, "flows")
    spare = repo / "webhooks" / "spare.yaml"
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/factories/{uid}")
    heading = page.locator("h1")
    expect(heading.locator(".pill[data-condition]")).to_have_text(["Ready"])
    expect(condition(page, "Ready", 1)).to_have_text("True")
    try:
        spare.write_text(BROKEN_SPARE)
        reload_until(
            page,
            served,
            lambda: page.locator("section.failure").count() == 1,
            "the factory page to show the failed apply",
        )
        expect(heading.locator(".pill[data-condition]")).to_have_text(["Not ready", "Stalled"])
        expect(condition(page, "Ready", 1)).to_have_text("False")
        expect(condition(page, "Stalled", 1)).to_have_text("True")
        expect(condition(page, "Ready", 3)).to_contain_text("spare.yaml:3")
        # file:line (the directory source names files by their full path), then the error
        failure = page.locator("section.failure")
        expect(failure.locator("li code").first).to_have_text(re.compile(r"(^|/)webhooks/spare\.yaml:3\s*$"))
        expect(failure).to_contain_text("sometimes")
        # the last good state keeps serving: the webhook is still listed
        expect(page.locator("table.grid a", has_text="spare")).to_have_count(1)
    finally:
        spare.write_text(SPARE)
    reload_until(
        page,
        served,
        lambda: page.locator("section.failure").count() == 0,
        "the factory page to show the repaired apply",
    )
    expect(heading.locator(".pill[data-condition]")).to_have_text(["Ready"])
    expect(condition(page, "Ready", 1)).to_have_text("True")
    expect(condition(page, "Stalled", 1)).to_have_text("False")


def test_create_toggle_and_rotate_a_webhook_from_the_console(page: Page, served: Served) -> None:
    uid = api_factory(served, "flows-api")
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/factories/{uid}")
    page.fill("#wh-name", "deploys")
    page.select_option("#wh-mode", "token")
    page.click("form[action$='/webhooks'] button[type=submit]")
    expect(page.locator(".secret-once")).to_contain_text("Webhook created")
    first = page.locator("#new-secret").inner_text().strip()
    ingress = page.locator("#ingress-url").inner_text().strip()
    assert first and ingress.startswith(served.url + "/webhooks/w/")
    wid = ingress.rsplit("/", 1)[1]
    hook_page = f"{served.url}/console/factories/{uid}/webhooks/{wid}"
    assert deliver(ingress, first, {"n": 1}) == 202
    reload_shown_once(page)  # shown once: the reload is a GET of the webhook's page, not a second create
    assert page.url == hook_page
    expect(page.locator("h1")).to_contain_text("deploys")
    assert page.locator("#new-secret").count() == 0 and first not in page.content()
    assert [w["name"] for w in served.get(f"/api/v1/factory/{uid}")["webhooks"]] == ["deploys"]

    page.click("form[action$='/enabled'] button[type=submit]")
    expect(page.locator("p.success")).to_contain_text("senders now get 404")
    expect(page.locator("h1 .pill")).to_have_text("Disabled")
    assert deliver(ingress, first, {"n": 2}) == 404

    page.click("form[action$='/enabled'] button[type=submit]")
    expect(page.locator("p.success")).to_contain_text("senders are accepted again")
    expect(page.locator("h1 .pill")).to_have_text("Enabled")
    assert deliver(ingress, first, {"n": 3}) == 202

    accept_confirm(page)
    page.click("form[action$='/rotate-secret'] button[type=submit]")
    expect(page.locator(".secret-once")).to_contain_text("New secret")
    rotated = page.locator("#new-secret").inner_text().strip()
    assert rotated and rotated != first
    assert deliver(ingress, first, {"n": 4}) == 401
    assert deliver(ingress, rotated, {"n": 5}) == 202

    reload_shown_once(page)  # the value was shown once: a reload is a plain GET, not a second rotation
    assert page.url == hook_page
    expect(page.locator("h1")).to_contain_text("deploys")
    assert page.locator("#new-secret").count() == 0 and rotated not in page.content()
    assert deliver(ingress, rotated, {"n": 6}) == 202  # the reload did not rotate it again


def test_a_delivery_its_filter_test_and_its_run_finishing_live(
    page: Page, served: Served, release: Path
) -> None:
    assert not release.exists()  # the run this delivery starts waits for it
    uid = factory_uid(served, "flows")
    hooks = {w["name"]: w for w in served.get(f"/api/v1/factory/{uid}")["webhooks"]}
    alerts = hooks["alerts"]
    payload = {"service": "billing", "severity": "high"}
    assert deliver(alerts["ingress_url"], HOOK_SECRET, payload, "alert-live-1") == 202

    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/factories/{uid}/webhooks/{alerts['uid']}")
    row = page.locator("table.deliveries tbody tr", has_text="alert-live-1")
    expect(row.locator("td .pill").first).to_have_text("Accepted")  # the status; run states follow
    pre = row.locator("details pre")
    expect(pre).to_be_hidden()
    row.locator("details summary").click()
    expect(pre).to_be_visible()
    assert pre.inner_text() == json.dumps(payload, indent=2, sort_keys=True)

    page.goto(f"{served.url}/console/factories/{uid}")
    page.click("a:text-is('triage')")
    expect(page.locator("h1")).to_have_text("triage")
    expect(page.locator("table.conditions")).to_contain_text("severity")
    page.select_option("#delivery", f"{alerts['uid']} alert-live-1")
    page.click("#test-filter button[type=submit]")
    verdict = page.locator("#test-filter .verdict")
    expect(verdict).to_contain_text("Would trigger")
    expect(verdict).to_contain_text("alert-live-1")
    checks = page.locator("#test-filter ul.checks li")
    expect(checks).to_have_count(2)
    expect(checks.nth(0)).to_have_class("pass")
    expect(checks.nth(0)).to_contain_text("Webhook")
    expect(checks.nth(1)).to_have_class("pass")
    expect(checks.nth(1)).to_contain_text("Payload")

    page.goto(f"{served.url}/console/factories/{uid}/webhooks/{alerts['uid']}")
    run_link = page.locator("table.deliveries tbody tr", has_text="alert-live-1").locator(
        "a[href^='/console/runs/']"
    )
    expect(run_link).to_have_count(1)
    run_link.click()
    page.wait_for_url("**/console/runs/*")
    state = page.locator("#run-state")
    expect(state).to_have_text(LIVE)
    expect(page.locator("#live")).to_be_visible()
    log = page.locator("#log")
    expect(log).not_to_contain_text("released-live")
    page.evaluate("window.__stayed = true")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))

    release.touch()
    expect(state).to_have_text("SUCCEEDED", timeout=30_000)
    expect(log).to_contain_text("released-live")
    expect(log).to_contain_text("started-live")
    expect(page.locator("#timeline")).to_contain_text("SUCCEEDED")
    expect(page.locator("#live")).to_be_hidden()
    assert page.evaluate("window.__stayed") is True
    assert navigations == []


def test_payload_markup_stays_inert_in_the_deliveries_view(page: Page, served: Served) -> None:
    uid = api_factory(served, "flows-xss")
    wid, ingress, secret = api_webhook(served, uid, "inbox")
    payloads = {
        "xss-img": {"x": "<img src=x onerror=alert(1)>"},
        "xss-script": {"y": "</script><script>alert(2)</script>", "z": ["<b>bold</b>"]},
    }
    for delivery_id, payload in payloads.items():
        assert deliver(ingress, secret, payload, delivery_id) == 202
    dialogs: list[str] = []

    def seen(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/factories/{uid}/webhooks/{wid}")
    for delivery_id, payload in payloads.items():
        row = page.locator("table.deliveries tbody tr", has_text=delivery_id)
        row.locator("details summary").click()
        pre = row.locator("details pre")
        expect(pre).to_be_visible()
        assert pre.inner_text() == json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)
        assert pre.locator("*").count() == 0  # text only, no element parsed out of the payload
    assert page.locator("img").count() == 0
    assert page.locator("b", has_text="bold").count() == 0
    assert page.locator("script:not([src])").count() == 0
    assert dialogs == []


def test_a_form_posted_without_its_csrf_token_is_refused(page: Page, served: Served) -> None:
    uid = api_factory(served, "flows-csrf")
    wid, ingress, secret = api_webhook(served, uid, "guarded")
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/factories/{uid}/webhooks/{wid}")
    form = "form[action$='/enabled']"
    expect(page.locator(f"{form} input[name=csrf_token]")).to_have_count(1)
    page.evaluate("(form) => document.querySelector(form + ' input[name=csrf_token]').remove()", form)
    assert page.locator(f"{form} input[name=csrf_token]").count() == 0
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/enabled")) as posted:
        page.click(f"{form} button[type=submit]")
    assert posted.value.status == 403
    expect(page.locator("body")).to_contain_text("CSRF token is missing")
    # nothing changed: the webhook is still enabled and still accepts deliveries
    assert served.get(f"/api/v1/factory/{uid}/webhooks/{wid}")["enabled"] is True
    assert deliver(ingress, secret, {"after": "refusal"}) == 202
    page.goto(f"{served.url}/console/factories/{uid}/webhooks/{wid}")
    expect(page.locator("h1 .pill")).to_have_text("Enabled")


def test_a_member_sees_the_webhook_page_without_admin_actions(
    page: Page, served: Served, chromium: Browser
) -> None:
    uid = api_factory(served, "flows-member")
    wid, ingress, secret = api_webhook(served, uid, "shared")
    assert deliver(ingress, secret, {"hello": "member"}, "member-1") == 202
    hook_page = f"{served.url}/console/factories/{uid}/webhooks/{wid}"

    # the same page as an admin has every admin form (so their absence below means something)
    admin_context = chromium.new_context()
    try:
        admin = admin_context.new_page()
        sign_in(admin, served, served.key)
        admin.goto(hook_page)
        expect(admin.locator("table.deliveries")).to_contain_text("member-1")
        assert admin_forms(admin) == {"enabled": 1, "rotate-secret": 1, "delete": 1, "replay": 1}
    finally:
        admin_context.close()

    created = run_cli("--data-dir", served.data_dir, "keys", "create", "--name", "m", "--role", "member")
    assert created.returncode == 0, created.stderr
    sign_in(page, served, created.stdout.strip().splitlines()[-1])
    page.goto(hook_page)
    expect(page.locator(".who .badge")).to_have_text("member")
    expect(page.locator("table.deliveries")).to_contain_text("member-1")
    assert admin_forms(page) == {"enabled": 0, "rotate-secret": 0, "delete": 0, "replay": 0}
    actions = [f.get_attribute("action") for f in page.locator("form[method=post]").all()]
    assert actions == ["/console/logout"]
    page.goto(f"{served.url}/console/factories/{uid}")
    assert page.locator("#wh-name").count() == 0  # no create-webhook form either
    # and the server refuses a member's admin POST, whatever the page showed
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    refused = page.request.post(f"{hook_page}/enabled", form={"csrf_token": token or "", "enabled": "false"})
    assert refused.status == 403
    assert served.get(f"/api/v1/factory/{uid}/webhooks/{wid}")["enabled"] is True
