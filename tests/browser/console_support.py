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
