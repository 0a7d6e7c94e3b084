"""A finished run's stream stops being requested, in Chromium (docs/events.md, "Ordering and delivery": a
finished run with nothing left answers 204).

The HTML standard has an ``EventSource`` reconnect, every ``retry:`` interval and for ever, after a stream
that ends with a 200; only a 204 (or an answer that is not an event stream) stops it. Two sources are watched
at once, over one 10 s window after the run ended (the window is the assertion: "no request within 10 s"):

- the console's run page, live when opened, which closes its ``EventSource`` on the terminal event;
- an ``EventSource`` opened on the finished run's stream after its last event: what a browser sends when it
  reconnects after the stream's end (and what a page rendered just as the run finished asks for).

Every request is counted through Playwright's ``request`` event.
"""

from __future__ import annotations

import re

import httpx
import pytest
from console_support import sign_in
from playwright.sync_api import Page, Request, Response, expect
from serve_support import Served

pytestmark = pytest.mark.slow
WINDOW_MS = 10_000


def last_event_id(served: Served, run_id: str) -> int:
    """The id of a finished run's last event, read through the API's stream (which replays and ends)."""
    resp = httpx.get(
        f"{served.url}/api/v1/agent/runs/{run_id}/events",
        headers={"Authorization": f"Bearer {served.key}"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return max(int(m) for m in re.findall(r"^id: (\d+)$", resp.text, re.MULTILINE))


def test_no_request_to_a_finished_runs_stream_within_10_s(page: Page, served: Served) -> None:
    status, body = served.post("/api/v1/agent/run", {"prompt": "wait", "config": {"worker_host": "nowhere"}})
    assert status == 200, body
    run_id = body["run_id"]
    stream = f"{served.url}/console/runs/{run_id}/events"
    requests: list[str] = []
    answers: list[int] = []

    def noted(request: Request) -> None:
        if request.url.startswith(stream):
            requests.append(request.url)

    def answered(response: Response) -> None:
        if response.url.startswith(stream):
            answers.append(response.status)

    page.on("request", noted)
    page.on("response", answered)
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/runs/{run_id}")
    expect(page.locator("#live")).to_be_visible()
    expect(page.locator("#run-state")).to_have_text("QUEUED")

    status, body = served.post(f"/api/v1/agent/runs/{run_id}/cancel")
    assert status == 200, body
    # The page learns it through its stream (no reload): the stream was open, and has ended.
    expect(page.locator("#run-state")).to_have_text("CANCELLED", timeout=10_000)
    expect(page.locator("#live")).to_be_hidden()
    last_id = last_event_id(served, run_id)
    page.evaluate("(url) => { window.__reopened = new EventSource(url); }", f"{stream}?after={last_id}")

    page.wait_for_timeout(WINDOW_MS)
    assert len(requests) == 2, requests  # the page's stream once, the reopened one once: none came back
    assert requests[1].endswith(f"?after={last_id}") and answers[-1] == 204
    assert page.evaluate("window.__reopened.readyState") == 2  # CLOSED: it will not reconnect
