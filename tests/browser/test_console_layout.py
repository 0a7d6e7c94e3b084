"""The console's layout in Chromium (docs/console.md, "Small screens", "Themes", "Error pages"): every page
at 390 px and 1280 px, in the light and the dark theme, has no horizontal page overflow; the menu folds at
390 px and opens without script; error pages are pages of the layout.

The server is the seeded demo that ``make screenshots`` photographs (``tools/screenshots.py``: the example
factory, its sample deliveries, a succeeded run), and the pages are the ones its :func:`console_pages` finds
by following the console's links.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from playwright.sync_api import Browser, Page, StorageState, expect

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from screenshots import console_pages, demo  # noqa: E402 - tools/ is not a package

pytestmark = pytest.mark.slow
Site = tuple[str, StorageState, list[tuple[str, str]]]  # the demo's URL, a signed-in state, its pages
OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"
PAGES = {"factories", "factory", "webhook", "automation", "runs", "run", "secrets", "keys", "logout"}


@pytest.fixture(scope="module")
def site(chromium: Browser) -> Iterator[Site]:
    """The demo's URL, a signed-in browser state and the console's pages."""
    with demo(ROOT / "example-factory") as (url, key):
        context = chromium.new_context()
        page = context.new_page()
        page.goto(url + "/console/login")
        page.fill("#api_key", key)
        page.click("button[type=submit]")
        page.wait_for_url("**/console/factories")
        pages = console_pages(page, url)
        state = context.storage_state()
        context.close()
        yield url, state, pages


def overflow(page: Page) -> int:
    return int(page.evaluate(OVERFLOW))


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_page_overflows_sideways(
    chromium: Browser, site: Site, width: int, scheme: Literal["light", "dark"]
) -> None:
    url, state, pages = site
    assert PAGES <= {name for name, _ in pages}, pages
    errors = [("not-found", "/console/factories/fa_nope"), ("no-page", "/console/nope")]
    context = chromium.new_context(
        viewport={"width": width, "height": 900},
        color_scheme=scheme,
        storage_state=state,
    )
    try:
        page = context.new_page()
        wide = {}
        for name, path in [*pages, *errors]:
            response = page.goto(url + path)
            assert response is not None and response.status in (200, 404), (name, response)
            page.wait_for_load_state("load")
            if overflow(page) > 0:
                wide[name] = overflow(page)
        assert wide == {}, f"pages wider than {width} px ({scheme}): {wide}"
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == ("rgb(13, 17, 23)" if scheme == "dark" else "rgb(246, 247, 249)")
    finally:
        context.close()
    signed_out = chromium.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    try:
        page = signed_out.new_page()
        page.goto(url + "/console/login")
        assert overflow(page) <= 0
    finally:
        signed_out.close()


def test_the_menu_folds_at_390_px_and_opens_without_script(chromium: Browser, site: Site) -> None:
    url, state, _ = site
    context = chromium.new_context(
        viewport={"width": 390, "height": 844},
        storage_state=state,
        java_script_enabled=False,
    )
    try:
        page = context.new_page()
        page.goto(url + "/console/runs")
        runs_link = page.locator(".mainnav a", has_text="Runs")
        expect(runs_link).to_be_hidden()
        page.locator("label.navbutton").click()
        expect(runs_link).to_be_visible()
        runs_link.click()
        page.wait_for_url("**/console/runs")
    finally:
        context.close()
    wide = chromium.new_context(viewport={"width": 1280, "height": 800}, storage_state=state)
    try:
        page = wide.new_page()
        page.goto(url + "/console/runs")
        expect(page.locator(".mainnav a", has_text="Runs")).to_be_visible()
        expect(page.locator("label.navbutton")).to_be_hidden()
    finally:
        wide.close()


def test_error_pages_are_pages_of_the_console(chromium: Browser, site: Site) -> None:
    url, state, _ = site
    context = chromium.new_context(storage_state=state)
    try:
        page = context.new_page()
        for path, says in (
            ("/console/factories/fa_nope", "No such factory."),
            ("/console/nope", "There is no console page at /console/nope."),
            ("/console/runs/run_nope", "run run_nope does not exist"),
        ):
            response = page.goto(url + path)
            assert response is not None and response.status == 404
            assert response.headers["content-type"].startswith("text/html")
            expect(page.locator("#error h1")).to_have_text("Not found")
            expect(page.locator("#error .errortext")).to_contain_text(says)
            expect(page.locator(".topbar .mainnav")).to_have_count(1)  # the layout, signed in
            radius = page.locator("#error").evaluate("e => getComputedStyle(e).borderTopLeftRadius")
            assert radius == "10px"  # the stylesheet applied (the CSP allows it)
        # a POST without the session's CSRF token: refused, as a page
        refused = context.request.post(url + "/console/logout", form={"csrf_token": "stale"})
        assert refused.status == 403 and refused.headers["content-type"].startswith("text/html")
        assert 'class="card narrow errorpage"' in refused.text() and "CSRF token" in refused.text()
    finally:
        context.close()
    signed_out = chromium.new_context()
    try:
        page = signed_out.new_page()
        response = page.goto(url + "/console/nope")
        assert response is not None and response.status == 404
        expect(page.locator("#error .actions a")).to_have_text("Sign in")
    finally:
        signed_out.close()
