"""Helpers shared by the console's browser tests (``tests/browser/``)."""

from __future__ import annotations

from playwright.sync_api import Page
from serve_support import Served


def sign_in(page: Page, served: Served, key: str) -> None:
    """Sign in through the console's form with ``key`` and land on ``/console/factories``."""
    page.goto(served.url + "/console/login")
    page.fill("#api_key", key)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/factories")


def reload_shown_once(page: Page) -> None:
    """Reload a page that showed a value once, as a user would: after it finished loading. The console's
    script turns that history entry into a GET at DOMContentLoaded; a reload racing the page's own load
    (the value is visible before the deferred script has run) would submit the form again."""
    page.wait_for_load_state("load")
    page.reload()
