"""The console in a real browser (Chromium through Playwright) against a real ``factoryctl serve``: sign-in,
the Content-Security-Policy, cross-site refusal, roles on the keys page, a key shown once, inert markup.

Kept few and fast: they run in every CI (``make test``). Each test gets a fresh browser context (no cookies).
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from console_support import reload_shown_once, sign_in
from playwright.sync_api import Dialog, Page, expect
from serve_support import Served, free_port, run_cli

pytestmark = pytest.mark.slow

XSS = "<img src=x onerror=alert(1)>"


@contextlib.contextmanager
def other_site(html: str, root: Path) -> Iterator[str]:
    """``html`` served as ``index.html`` by a plain http.server at ``http://localhost:PORT/`` (another site
    than the console's ``127.0.0.1``)."""
    (root / "index.html").write_text(html)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_sign_in_lands_on_factories_under_a_strict_policy(page: Page, served: Served) -> None:
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    sign_in(page, served, served.key)
    expect(page.locator("h1")).to_have_text("Factories")
    for path in ("/console/factories", "/console/secrets", "/console/keys"):
        response = page.goto(served.url + path)
        assert response is not None and response.status == 200
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.locator("script:not([src])").count() == 0  # no inline script
        assert page.locator("[style]").count() == 0  # no inline style
    assert violations == []


def test_a_cross_site_form_post_is_refused_and_the_user_stays_signed_in(
    page: Page, served: Served, tmp_path: Path
) -> None:
    sign_in(page, served, served.key)
    csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
    # even with the session's CSRF token (as if it had leaked), another site cannot sign the user out
    evil = (
        f'<!doctype html><form id="f" method="post" action="{served.url}/console/logout">'
        f'<input type="hidden" name="csrf_token" value="{csrf}"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with other_site(evil, tmp_path) as url:
        with page.expect_response(f"{served.url}/console/logout") as posted:
            page.goto(url)
        assert posted.value.status == 403
    page.goto(served.url + "/console/factories")
    assert page.url.endswith("/console/factories")
    expect(page.locator(".who .keyname")).to_be_visible()


def test_a_member_sees_keys_read_only(page: Page, served: Served) -> None:
    done = run_cli("--data-dir", served.data_dir, "keys", "create", "--name", "reader", "--role", "member")
    assert done.returncode == 0, done.stderr
    sign_in(page, served, done.stdout.strip().splitlines()[-1])
    page.goto(served.url + "/console/keys")
    expect(page.locator("table.grid.keys")).to_contain_text("reader")
    assert page.locator("form[action='/console/keys']").count() == 0
    assert page.locator("form.revoke").count() == 0
    page.goto(served.url + "/console/secrets")
    assert page.locator("form[action='/console/secrets']").count() == 0


def test_a_new_key_is_shown_once_and_markup_stays_inert(page: Page, served: Served) -> None:
    dialogs: list[str] = []

    def seen(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    status, _ = served.post("/api/v1/factory", {"name": "xss-demo", "description": XSS})
    assert status == 201
    sign_in(page, served, served.key)
    expect(page.locator("table.grid")).to_contain_text(XSS)  # shown as text
    page.goto(served.url + "/console/keys")
    page.fill("#key-name", XSS)
    page.select_option("#key-role", "member")
    page.click("#key-form button[type=submit]")
    shown = page.locator("#shown-key")
    expect(shown).to_be_visible()
    plaintext = shown.inner_text().strip()
    assert plaintext.startswith("fk_") and plaintext not in page.url
    expect(page.locator("table.grid.keys")).to_contain_text(XSS)
    reload_shown_once(page)  # a reload is a GET of the page: the key is gone
    assert page.locator("#shown-key").count() == 0 and plaintext not in page.content()
    assert page.locator("table.grid.keys tbody tr", has_text=XSS).count() == 1  # not submitted twice
    # a secret name with markup is refused and echoed as text
    page.goto(served.url + "/console/secrets")
    page.fill("#secret-name", XSS)
    page.check("#secret-generate")
    page.click("#secret-form button[type=submit]")
    expect(page.locator("p.alert")).to_contain_text(XSS)
    assert page.locator("img[src=x]").count() == 0
    assert dialogs == []
