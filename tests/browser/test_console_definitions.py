"""A factory's definition sections in a real browser (docs/console.md, "Pages"): ``factoryctl serve --repo``
applies a small v1alpha1 tree; its factory page lists the agents, runner and triggers, and an agent prompt
holding a script tag, opened from its collapsed ``<details>``, shows the tag as text: no element, no dialog,
no CSP violation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from console_support import sign_in
from playwright.sync_api import Dialog, Page, expect
from serve_support import Served, serving, wait_for

pytestmark = pytest.mark.slow

KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
SCRIPT = "<script>alert(1)</script>"
TREE = {
    "factory.yaml": "schemaVersion: v1alpha1\nname: defs\nalias: Acme\nrepositories:\n"
    "  - {owner: acme, name: api}\nagentDefaults: {model: auto, runner: linux}\n",
    "agents/foreman/agent.md": f"---\ndescription: Routes work.\nagentType: FOREMAN\n---\nLead. {SCRIPT}\n",
    "agents/reviewer/agent.md": "---\ndescription: Reviews.\nagentType: REVIEW\n"
    "harness: {type: codex, model: gpt-5}\n---\nReview carefully.\n",
    "runners/linux.yaml": "description: Linux.\nsetupCommands: [make deps]\n"
    "platform: {os: linux, arch: x86_64, linux: {dockerImage: 'python:3.12'}}\n",
    "automations/triage/automation.md": "---\nagent: reviewer\ntriggers:\n"
    "  - {provider: github, event: issue_labeled, filter: {labels: [triage]}}\n"
    "  - {provider: linear, event: issue_created}\n---\nTriage it.\n",
}


@pytest.fixture(scope="module")
def defs_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("defs-tree")
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    data = tmp_path_factory.mktemp("defs-serve")
    with serving(data, "--repo", root, env={"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}) as server:
        yield server


def applied_uid(served: Served) -> str:
    def find() -> str | None:
        rows = served.get("/api/v1/factory")["factories"]
        return next((f["uid"] for f in rows if f["name"] == "defs" and f["last_applied_revision"]), None)

    return str(wait_for(find, 30, "factory defs applied", alive=[served.proc], logs=[served.log]))


def test_definitions_are_listed_and_a_prompt_stays_text(page: Page, defs_served: Served) -> None:
    dialogs: list[str] = []
    violations: list[str] = []

    def seen(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    uid = applied_uid(defs_served)
    sign_in(page, defs_served, defs_served.key)
    page.goto(f"{defs_served.url}/console/factories/{uid}")

    agents = page.locator("table.agents tbody tr")
    expect(agents).to_have_count(2)
    expect(agents.nth(0).locator(".badge.foreman")).to_have_text("FOREMAN")
    expect(agents.nth(1)).to_contain_text("codex")
    expect(agents.nth(1)).to_contain_text("gpt-5")
    prompt = agents.nth(0).locator("details pre")
    expect(prompt).not_to_be_visible()  # collapsed until asked for
    agents.nth(0).locator("details summary").click()
    expect(prompt).to_be_visible()
    expect(prompt).to_have_text(f"Lead. {SCRIPT}")
    assert prompt.locator("script").count() == 0

    expect(page.locator("table.runners")).to_contain_text("python:3.12 not run")
    triggers = page.locator("td.triggers div")
    expect(triggers).to_have_count(2)
    expect(triggers.nth(0)).to_have_text("github · issue_labeled")
    expect(triggers.nth(1)).to_have_text("linear · issue_created not connected")
    expect(page.locator(".kv", has_text="Repositories")).to_contain_text("acme/api")
    assert dialogs == [] and violations == []
