"""The webhook page's delivery rows in a real browser (docs/console.md, "Webhook page"): a delivery that
started nothing says so, with each automation's reason (a filter miss and a disabled automation), and
never looks like a delivery whose run has not started; a started run's state pill follows the run live,
without a reload, until it finishes.

One ``serve --repo`` with one service-hosted worker whose command harness waits for a release file, so the
run is seen unfinished first; every wait is Playwright's ``expect`` or :func:`serve_support.wait_for`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from console_support import sign_in
from playwright.sync_api import Page, expect
from serve_support import Served, run_cli, serving, wait_for

pytestmark = pytest.mark.slow

KEY = "ZGVjaXNpb25zX2tleV8zMl9ieXRlc19sb25nX19fX18="
ENV = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}
SECRET = "alerts-token-for-the-decision-tests"
TRIGGER = "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
TRIAGE = "---\n" + TRIGGER + "      payload:\n        severity: [high, critical]\n---\nTriage the alert.\n"
PAUSED = "---\nenabled: false\n" + TRIGGER + "---\nLog the alert.\n"
UNFINISHED = re.compile(r"^(QUEUED|PENDING|CLAIMED|INPROGRESS)$")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    """``serve --repo`` (webhook ``alerts``, automations ``triage`` and disabled ``paused``) with one worker
    whose runs wait for the release file it yields."""
    work = tmp_path_factory.mktemp("decisions")
    data, root, gate = work / "data", work / "factory", work / "gate"
    gate.mkdir()
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: decisions\n")
    (root / "webhooks" / "alerts.yaml").write_text("secretName: hooks\n")
    for name, text in (("triage", TRIAGE), ("paused", PAUSED)):
        (root / "automations" / name).mkdir(parents=True)
        (root / "automations" / name / "automation.md").write_text(text)
    created = run_cli("--data-dir", data, "secrets", "create", "hooks", "--from-stdin", stdin=SECRET, env=ENV)
    assert created.returncode == 0, created.stderr
    release = gate / "release"
    wait = shlex.quote(str(release))
    command = f"cat >/dev/null; while [ ! -e {wait} ]; do sleep 0.05; done; echo released"
    args = ("--repo", root, "--harness", "command", "--command", command, "--sandbox-ro", gate)
    with serving(data, *args, workers=1, env=ENV) as server:
        try:
            yield server, release
        finally:
            release.touch()  # never leave the worker waiting at shutdown


def webhook(served: Served) -> tuple[str, str]:
    """The factory's UID and the ``alerts`` webhook's, once the directory is applied with both automations."""

    def find() -> tuple[str, str] | None:
        factory = next(
            (f for f in served.get("/api/v1/factory")["factories"] if f["name"] == "decisions"), None
        )
        if factory is None:
            return None
        detail = served.get(f"/api/v1/factory/{factory['uid']}")
        ready = detail["webhooks"] and len(detail["automations"]) == 2
        return (factory["uid"], detail["webhooks"][0]["uid"]) if ready else None

    return wait_for(find, 30, "the factory applied", alive=[served.proc], logs=[served.log])


def deliver(served: Served, hook: str, severity: str) -> None:
    headers = {"Authorization": f"Bearer {SECRET}", "X-Factory-Delivery-Id": f"alert-{severity}"}
    url = f"{served.url}/webhooks/w/{hook}"
    assert httpx.post(url, json={"severity": severity}, headers=headers, timeout=10).status_code == 202


def test_started_nothing_shows_the_reasons_and_a_started_run_is_followed_live(
    page: Page, setup: tuple[Served, Path]
) -> None:
    served, release = setup
    factory, hook = webhook(served)
    deliver(served, hook, "low")
    deliver(served, hook, "high")
    sign_in(page, served, served.key)
    page.goto(f"{served.url}/console/factories/{factory}/webhooks/{hook}")
    rows = page.locator("table.deliveries tbody tr")

    nothing = rows.filter(has=page.locator("code", has_text="alert-low"))
    expect(nothing.locator("td.outcome [data-outcome=no_runs]")).to_have_text("Started nothing")
    expect(nothing.locator("td.outcome [data-run-state]")).to_have_count(0)
    triage = nothing.locator("ul.decisions li", has_text="triage")
    expect(triage).to_contain_text('value "low" is not one of ["high", "critical"]')
    expect(triage.locator("code")).to_have_text("severity")
    paused = nothing.locator("ul.decisions li", has_text="paused")
    expect(paused).to_contain_text("the automation is disabled: it starts no runs until it is enabled")
    expect(paused.locator(".pill")).to_have_text("Disabled")

    started = rows.filter(has=page.locator("code", has_text="alert-high"))
    expect(started.locator("[data-outcome=no_runs]")).to_have_count(0)
    expect(started.locator("ul.decisions li")).to_have_count(1)  # only the disabled one did not match
    state = started.locator("td.outcome [data-run-state]")
    expect(state).to_have_text(UNFINISHED)  # the run exists and has not finished: not "started nothing"
    release.touch()
    expect(state).to_have_text("SUCCEEDED", timeout=30_000)  # live: no reload
    expect(state).to_have_class(re.compile(r"\bstate-SUCCEEDED\b"))
    run_link = started.locator("td.outcome a")
    expect(run_link).to_have_attribute("href", re.compile(r"^/console/runs/"))
