"""Real-browser tests of the web console (docs/console.md, "Tested in a real browser"): Playwright's sync API
driving the Debian Chromium at ``/usr/bin/chromium`` (browser downloads are impossible here) against a real
``factoryctl serve`` subprocess, started with the e2e helpers of ``tests/e2e/serve_support.py``.

A missing Chromium is a failure with a clear message, never a silent skip: CI installs it (``.ci/run``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

# The e2e helpers live next door, in a directory without __init__.py (as the e2e tests import them).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from serve_support import Served, serving

CHROMIUM = os.environ.get("FACTORY_TEST_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """The system Chromium (no downloaded browser), one per module.

    Not pytest-playwright's session-wide ``playwright`` fixture: the sync API keeps an event loop running in
    this thread while it is open, and the async tests that run after this package need the thread free, so
    Playwright is stopped when the module ends.
    """
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: the console's browser tests need it "
            "(apt-get install -y chromium; .ci/run does this), or set FACTORY_TEST_CHROMIUM"
        )
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) and page per test."""
    context = chromium.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``factoryctl serve`` (SQLite, no workers) for the module's tests."""
    with serving(tmp_path_factory.mktemp("browser-serve")) as server:
        yield server
