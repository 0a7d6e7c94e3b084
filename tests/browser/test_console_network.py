"""The run page shows a run's sandbox and network policy, and the destinations its worker's egress proxy
refused — live while the page is open, and on the page after a reload (issue 27, docs/security.md
"Network policy"). A refusal's text comes from the run's programs: it stays text."""

from __future__ import annotations

import pytest
from console_support import sign_in
from playwright.sync_api import Dialog, Page, expect
from serve_support import Served

pytestmark = pytest.mark.slow
HOSTILE = '<img src=x onerror="alert(1)">'


def test_the_run_page_shows_the_policy_the_sandbox_and_refusals(page: Page, served: Served) -> None:
    environment = {
        "name": "net-web",
        "repos": [{"url": "https://github.com/acme/app.git", "path": "app"}],
        "network": {"mode": "allowlist", "allow": ["*.npmjs.org:443"]},
    }
    status, body = served.post("/api/v1/environments", environment)
    assert status == 201, body
    config = {"worker_host": "net-host", "environment_id": "net-web"}
    status, body = served.post("/api/v1/agent/run", {"prompt": "install things", "config": config})
    assert status == 200, body
    run_id = body["run_id"]
    dialogs: list[str] = []

    def noted(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", noted)
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/runs/{run_id}")
    network = page.locator("#run-network")
    expect(network.locator(".network-mode")).to_have_text("allowlist")
    expect(network.locator(".network-host")).to_have_text(["github.com:443", "*.npmjs.org:443"])
    expect(network).to_contain_text("and the agent's model endpoint")
    expect(network).to_contain_text("policy of environment net-web")
    expect(page.locator("#run-sandbox")).to_have_text("not reported yet")
    expect(page.locator("#refused-card")).to_be_hidden()

    status, claim = served.post("/api/v1/workers/claim", {"worker_host": "net-host", "worker_id": "n1"})
    assert status == 200, claim
    assert claim["run"]["network"] == {"mode": "allowlist", "allow": ["github.com:443", "*.npmjs.org:443"]}
    lease = {"worker_id": "n1", "lease_token": claim["lease_token"]}
    sandbox = {"kind": "bwrap", "network": "allowlist"}
    beat = {**lease, "state": "INPROGRESS", "sandbox": sandbox}
    status, _ = served.post(f"/api/v1/workers/runs/{run_id}/heartbeat", beat)
    assert status == 200
    refusals = [
        {"host": "example.invalid", "port": 443, "reason": "not on the network allowlist"},
        {"host": "169.254.169.254", "port": 80, "reason": f"link-local {HOSTILE}"},
    ]
    events = [{"kind": "egress_refused", "data": data} for data in refusals]
    status, answer = served.post(f"/api/v1/workers/runs/{run_id}/events", {**lease, "events": events})
    assert status == 200 and answer["accepted"] == 2, answer

    refused = page.locator("#refused li")
    expect(page.locator("#refused-card")).to_be_visible()
    expect(refused.locator("code")).to_have_text(["example.invalid:443", "169.254.169.254:80"])
    expect(refused.nth(1).locator("div")).to_have_text(f"link-local {HOSTILE}")

    page.reload()
    expect(page.locator("#run-sandbox")).to_contain_text("bubblewrap")
    expect(page.locator("#run-sandbox")).to_contain_text("network allowlist when the run started")
    expect(refused.locator("code")).to_have_text(["example.invalid:443", "169.254.169.254:80"])
    expect(refused.nth(1).locator("div")).to_have_text(f"link-local {HOSTILE}")
    assert page.locator("#refused img").count() == 0 and dialogs == []
    status, _ = served.post(f"/api/v1/workers/runs/{run_id}/state", {**lease, "state": "SUCCEEDED"})
    assert status == 200
