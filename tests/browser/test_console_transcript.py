"""The run page's live transcript in Chromium (issue 26, docs/console.md "Run page"): events a worker sends
while the page is open appear as a message and a folded tool call with its result and the usage, and the
agent's hostile text stays text (no element, no script, no dialog)."""

from __future__ import annotations

import pytest
from console_support import sign_in
from playwright.sync_api import Dialog, Page, expect
from serve_support import Served

pytestmark = pytest.mark.slow
HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def test_live_transcript_is_folded_and_inert(page: Page, served: Served) -> None:
    config = {"worker_host": "transcript-host", "harness": {"type": "claude"}}
    status, body = served.post("/api/v1/agent/run", {"prompt": "look around", "config": config})
    assert status == 200, body
    run_id = body["run_id"]
    dialogs: list[str] = []

    def noted(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", noted)
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/runs/{run_id}")
    expect(page.locator("#live")).to_be_visible()
    expect(page.locator("#transcript-card")).to_be_hidden()

    offer = {"worker_host": "transcript-host", "worker_id": "b1", "harnesses": ["claude"]}
    status, claim = served.post("/api/v1/workers/claim", offer)
    assert status == 200, claim
    lease = {"worker_id": "b1", "lease_token": claim["lease_token"]}
    status, _ = served.post(f"/api/v1/workers/runs/{run_id}/heartbeat", {**lease, "state": "INPROGRESS"})
    assert status == 200
    events = [
        {"kind": "message", "data": {"role": "assistant", "text": f"Looking. {HOSTILE}"}},
        {"kind": "tool_call", "data": {"id": "c1", "name": "Bash", "input": {"command": HOSTILE}}},
        {"kind": "tool_result", "data": {"id": "c1", "ok": True, "output": f"out {HOSTILE}"}},
        {"kind": "usage", "data": {"input_tokens": 900, "output_tokens": 100, "cost_usd": 0.5}},
    ]
    status, answer = served.post(f"/api/v1/workers/runs/{run_id}/events", {**lease, "events": events})
    assert status == 200 and answer["accepted"] == 4, answer

    transcript = page.locator("#transcript")
    expect(transcript.locator(".msg .text")).to_have_text(f"Looking. {HOSTILE}")
    fold = transcript.locator('details.tool[data-tool-id="c1"]')
    expect(fold.locator("summary")).to_contain_text("Bash")
    expect(fold.locator("summary .pill")).to_have_text("ok")
    expect(fold.locator("pre.output")).to_have_text(f"out {HOSTILE}")
    expect(fold.locator("pre.input")).not_to_be_visible()  # folded until opened
    fold.locator("summary").click()
    expect(fold.locator("pre.input")).to_contain_text(HOSTILE.replace('"', '\\"'))
    expect(page.locator("#run-usage")).to_have_text("1,000 tokens · $0.5000")
    assert transcript.locator("img, script").count() == 0
    status, _ = served.post(f"/api/v1/workers/runs/{run_id}/state", {**lease, "state": "SUCCEEDED"})
    assert status == 200
    expect(page.locator("#run-state")).to_have_text("SUCCEEDED")
    assert dialogs == []
