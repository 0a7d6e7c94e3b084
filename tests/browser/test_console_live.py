"""Live pages in Chromium (docs/console.md, "Live pages"): a new run appears on the runs list and its state
pill follows it, and the run page's Started, Finished and Duration fill in as the run starts and ends, all
without a reload (a marker set in each page survives).

One ``serve`` with one service-hosted worker whose command harness waits for a release file, so the run is
seen unfinished first; every wait is Playwright's ``expect``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_support import sign_in
from playwright.sync_api import Page, expect
from serve_support import Served, serving

pytestmark = pytest.mark.slow
DURATION = re.compile(r"^\d+(\.\d)? s$|^\d+ min")


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    """``serve`` with one worker whose runs wait for the release file it yields."""
    work = tmp_path_factory.mktemp("live")
    gate = work / "gate"
    gate.mkdir()
    release = gate / "release"
    wait = shlex.quote(str(release))
    command = f"cat >/dev/null; while [ ! -e {wait} ]; do sleep 0.05; done; echo released"
    args = ("--harness", "command", "--command", command, "--sandbox-ro", gate)
    with serving(work / "data", *args, workers=1) as server:
        try:
            yield server, release
        finally:
            release.touch()  # never leave the worker waiting at shutdown


def test_runs_list_and_run_page_follow_a_run_live(page: Page, gated: tuple[Served, Path]) -> None:
    served, release = gated
    sign_in(page, served, served.key)
    page.goto(served.url + "/console/runs")
    expect(page.locator("#runs-live")).to_be_visible()  # the feed is open
    page.evaluate("window.__notReloaded = true")

    status, body = served.post("/api/v1/agent/run", {"prompt": "wait for the gate", "title": "gated run"})
    assert status == 200, body
    run_id = body["run_id"]
    cell = page.locator(f"#runs-list td[data-run-id='{run_id}']")
    expect(cell).to_have_count(1)  # the new run appeared
    row = page.locator("#runs-list tr", has=page.locator(f"td[data-run-id='{run_id}']"))
    expect(row.locator("[data-role=state]")).to_have_text("INPROGRESS")

    run_page = page.context.new_page()
    run_page.goto(f"{served.url}/console/runs/{run_id}")
    expect(run_page.locator("#run-state")).to_have_text("INPROGRESS")
    expect(run_page.locator("#run-finished")).to_have_text("—")
    expect(run_page.locator("#run-duration")).to_have_text("—")
    run_page.evaluate("window.__notReloaded = true")

    release.touch()
    expect(run_page.locator("#run-state")).to_have_text("SUCCEEDED")
    finished = run_page.locator("#run-finished time[data-relative]")
    expect(finished).to_have_text("just now")
    expect(finished).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    expect(run_page.locator("#run-duration")).to_have_text(DURATION)
    assert run_page.evaluate("window.__notReloaded") is True

    expect(row.locator("[data-role=state]")).to_have_text("SUCCEEDED")
    expect(row.locator("[data-role=duration]")).to_have_text(DURATION)
    expect(row.locator("[data-role=updated] time")).to_have_text("just now")
    assert page.evaluate("window.__notReloaded") is True
