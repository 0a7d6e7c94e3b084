"""``make screenshots``: PNGs of every console page (docs/console.md), from a seeded demo server.

Starts ``python -m factoryctl.demo`` (the example factory, its secrets and one apply, on SQLite in a
temporary data directory) on a free port, signs in with its admin key in Chromium (Playwright, the system
browser at ``/usr/bin/chromium``), posts the sample deliveries the demo prints and waits for a run
to succeed, follows the console's own links to find the pages that exist (a factory,
its webhooks and automations, runs) and saves one PNG per page into ``--out`` (default ``docs/console``),
plus the secrets and keys pages showing a value once, a 404 page, and the factory, runs and run pages in
the dark theme and at 390 px. ``tests/browser/test_console_layout.py`` walks the same pages
(:func:`console_pages`) of the same demo (:func:`demo`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("FACTORY_TEST_CHROMIUM", "/usr/bin/chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the demo server exited:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the demo server did not answer within {timeout}s:\n{log.read_text()}")


def shoot(page: Page, out: Path, name: str) -> None:
    path = out / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def first_link(page: Page, selector: str) -> str | None:
    link = page.locator(selector).first
    return link.get_attribute("href") if link.count() else None


# The sample delivery the demo prints: `curl -sS -X POST <url> -H 'Authorization: Bearer <token>' ...`.
SAMPLE_CURL = re.compile(r"-X POST (\S+/webhooks/w/\S+) -H 'Authorization: Bearer (\S+)'")


def seed_runs(url: str, key: str, log: Path, timeout: float = 60.0) -> None:
    """Post the demo's sample deliveries (one the alert-triage filter takes, one it does not) and wait
    until a run they started has SUCCEEDED, so the webhook, runs and run pages have something to show."""
    found = SAMPLE_CURL.search(log.read_text())
    if found is None:
        raise SystemExit(f"the demo printed no sample delivery command:\n{log.read_text()}")
    ingress, token = found.groups()
    samples = [
        ("demo-1", {"service": "api", "severity": "high"}),
        ("demo-2", {"service": "web", "severity": "low"}),
    ]
    for alert_id, body in samples:
        headers = {"Authorization": f"Bearer {token}", "X-Alert-Id": alert_id}
        response = httpx.post(ingress, json=body, headers=headers, timeout=10)
        if response.status_code != 202:
            raise SystemExit(f"the sample delivery got {response.status_code}: {response.text}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = httpx.get(url + "/api/v1/agent/runs", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        if any(run.get("state") == "SUCCEEDED" for run in runs.json().get("runs", [])):
            return
        time.sleep(0.2)
    raise SystemExit(f"no run of the sample delivery succeeded within {timeout}s:\n{log.read_text()}")


def console_pages(page: Page, url: str) -> list[tuple[str, str]]:
    """(name, path) of the console's pages, found by following its links from a signed-in page: the
    factories list, the first factory, every webhook and automation of it, the runs list, every run on it
    (the first is named ``run``), secrets, keys and the sign-out page."""
    page.goto(url + "/console/factories")
    pages: list[tuple[str, str]] = [("factories", "/console/factories")]
    factory = first_link(page, "table.grid a[href^='/console/factories/']")
    if factory:
        page.goto(url + factory)
        pages.append(("factory", factory))
        for kind in ("webhook", "automation"):
            hrefs = page.eval_on_selector_all(
                f"a[href*='/{kind}s/']", "links => [...new Set(links.map(a => a.getAttribute('href')))]"
            )
            pages += [(kind if i == 0 else f"{kind}-{i + 1}", h) for i, h in enumerate(hrefs)]
    page.goto(url + "/console/runs")
    pages.append(("runs", "/console/runs"))
    runs = page.eval_on_selector_all(
        "#runs-list a[href^='/console/runs/']",
        "links => [...new Set(links.map(a => a.getAttribute('href')))]",
    )
    pages += [("run" if i == 0 else f"run-{i + 1}", h) for i, h in enumerate(runs)]
    pages += [("secrets", "/console/secrets"), ("keys", "/console/keys"), ("logout", "/console/logout")]
    return pages


SHOTS = ("factories", "factory", "webhook", "automation", "runs", "run")


def capture(url: str, key: str, out: Path) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"] if os.geteuid() == 0 else []
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(url + "/console/login")
        shoot(page, out, "login")
        page.fill("#api_key", key)
        page.click("button[type=submit]")
        page.wait_for_url("**/console/factories")
        pages = dict(console_pages(page, url))
        for name in SHOTS:
            response = page.goto(url + pages[name]) if name in pages else None
            if response is not None and response.status == 200:
                shoot(page, out, name)
        page.goto(url + "/console/factories/fa_nope")
        shoot(page, out, "not-found")
        page.goto(url + "/console/secrets")
        shoot(page, out, "secrets")
        page.fill("#secret-name", "screenshot-demo")
        page.check("#secret-generate")
        page.click("#secret-form button[type=submit]")
        shoot(page, out, "secrets-shown-once")
        page.goto(url + "/console/keys")
        page.fill("#key-name", "ci-bot")
        page.select_option("#key-role", "member")
        page.click("#key-form button[type=submit]")
        shoot(page, out, "keys-shown-once")
        page.goto(url + "/console/keys")
        shoot(page, out, "keys")
        # the dark theme (prefers-color-scheme) and a 390 px phone, same session
        state = page.context.storage_state()
        for suffix, context in (
            ("dark", browser.new_context(storage_state=state, color_scheme="dark")),
            ("mobile", browser.new_context(storage_state=state, viewport={"width": 390, "height": 844})),
        ):
            other = context.new_page()
            for name in ("factory", "runs", "run"):
                if name in pages and other.goto(url + pages[name]) is not None:
                    shoot(other, out, f"{name}-{suffix}")
            context.close()
        browser.close()


@contextmanager
def demo(example: Path, *, seed: bool = True) -> Iterator[tuple[str, str]]:
    """The seeded demo server on a free port (its sample deliveries posted and a run succeeded when
    ``seed``): yields its URL and admin key, and stops it afterwards."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="factoryctl-demo-") as tmp:
        data, log = Path(tmp) / "data", Path(tmp) / "demo.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        with log.open("ab") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "factoryctl.demo", "--data-dir", str(data), "--port", str(port),
                 str(example)],
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                start_new_session=True,
            )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc, log)
            key = (data / "admin.key").read_text().strip()
            if seed:
                seed_runs(url, key, log)
            yield url, key
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="screenshots")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    parser.add_argument("--example", type=Path, default=ROOT / "example-factory")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    with demo(args.example) as (url, key):
        capture(url, key, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
