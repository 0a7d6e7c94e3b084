"""The real nginx with deploy/nginx/factoryctl.conf in front of two ``serve`` replicas on PostgreSQL
(docs/deployment.md, "nginx").

The site file is used as shipped, with only its placeholders replaced (listen addresses, the certificate, the
upstream servers): nginx terminates TLS on a loopback port with a certificate made here and runs in the
foreground with its own pid, log and temp paths. The replicas trust only nginx's address (127.0.0.1) as a
proxy; clients of the test connect from other loopback addresses (127.0.0.2, .3: through nginx; .4: straight
to a replica), so each one's address is known. The tests show webhook ingress through nginx at the URL the
API shows (202, served by both replicas), a run's event stream delivering an event before it ends, the
sign-in failure budget counting the client nginx forwards (and not an address the client wrote, nor
headers sent by anyone but nginx), and Secure cookies over the https the proxy terminated. A second setup,
one replica on SQLite without ``--public-url``, shows what nginx's ``X-Forwarded-Proto`` does on its own
(Secure cookies; the same header sent straight to the replica is ignored) and that URLs shown to users come
from configuration, never from forwarded headers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import Served, free_port, serving, stop, wait_for

pytestmark = pytest.mark.slow  # the two-replica tests need PostgreSQL (their fixture skips without)
ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "deploy" / "nginx" / "factoryctl.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
ENV = {"FACTORY_SECRET_KEY": "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18=", "NO_COLOR": "1"}
BUDGET = 3  # --client-auth-failure-limit of both replicas


@dataclass
class Stack:
    url: str  # nginx, https
    http_port: int  # nginx, plain http
    replicas: tuple[Served, ...]

    @property
    def key(self) -> str:
        return self.replicas[0].key

    def client(self, source: str = "127.0.0.2") -> httpx.Client:
        """A client of nginx connecting from ``source`` (a loopback address nginx forwards as the client)."""
        transport = httpx.HTTPTransport(local_address=source, verify=False)
        return httpx.Client(base_url=self.url, transport=transport, timeout=20)

    def admin(self, source: str = "127.0.0.2") -> httpx.Client:
        client = self.client(source)
        client.headers["Authorization"] = f"Bearer {self.key}"
        return client


def site_config(tmp: Path, https_port: int, http_port: int, upstreams: list[int]) -> Path:
    """deploy/nginx/factoryctl.conf with its placeholders replaced (each must be found exactly once, so the
    test notices when the shipped file changes shape)."""
    text = SITE.read_text()
    replacements = {
        "    server 127.0.0.1:8080 max_fails=3 fail_timeout=10s;\n": "".join(
            f"    server 127.0.0.1:{port} max_fails=3 fail_timeout=10s;\n" for port in upstreams
        ),
        "    listen 80;\n": f"    listen 127.0.0.1:{http_port};\n",
        "    listen [::]:80;\n": "",
        "    listen 443 ssl http2;\n": f"    listen 127.0.0.1:{https_port} ssl http2;\n",
        "    listen [::]:443 ssl http2;\n": "",
        "/etc/ssl/factoryctl/fullchain.pem": str(tmp / "cert.pem"),
        "/etc/ssl/factoryctl/privkey.pem": str(tmp / "key.pem"),
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"{SITE} no longer has {old!r} exactly once"
        text = text.replace(old, new)
    site = tmp / "factoryctl.conf"
    site.write_text(text)
    return site


def main_config(tmp: Path, site: Path) -> Path:
    """What /etc/nginx/nginx.conf provides, in ``tmp``: foreground, own pid, logs and temp directories."""
    temp = "\n".join(
        f"    {name}_temp_path {tmp / name};" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers otherwise run as nobody: no access to tmp
    config = tmp / "nginx.conf"
    config.write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {tmp / 'nginx.pid'};\n"
        f"error_log {tmp / 'error.log'} info;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n    access_log {tmp / 'access.log'};\n{temp}\n    include {site};\n}}\n"
    )
    return config


def certificate(tmp: Path) -> None:
    key, cert = str(tmp / "key.pem"), str(tmp / "cert.pem")
    request = (
        "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
    )
    subprocess.run(
        ["openssl", *request.split(), "-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
    )


@contextlib.contextmanager
def nginx_in_front(
    tmp: Path, upstreams: list[int], https_port: int | None = None
) -> Iterator[tuple[str, int]]:
    """The real nginx with the shipped site file in front of ``upstreams`` (loopback ports), in the
    foreground; yields its https URL and its plain-http port once it proxies ``/healthz``."""
    https_port, http_port = https_port or free_port(), free_port()
    url = f"https://127.0.0.1:{https_port}"
    certificate(tmp)
    config = main_config(tmp, site_config(tmp, https_port, http_port, upstreams))
    args = [NGINX, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(config)]
    checked = subprocess.run([*args, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    log = tmp / "nginx.out"
    with log.open("ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        logs = [log, tmp / "error.log"]
        wait_for(lambda: _answers(url), 20, "nginx proxying /healthz", alive=[proc], logs=logs)
        yield url, http_port
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful: open streams are closed first
        try:
            proc.wait(15)
        finally:
            stop(proc)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_template: Any) -> Iterator[Stack]:
    """Two replicas on one PostgreSQL database behind nginx, as docs/deployment.md sets them up."""
    if pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    assert Path(NGINX).exists(), "nginx is not installed (apt-get install nginx; .ci/run installs it)"
    ports = [free_port(), free_port()]
    https_port = free_port()
    url = f"https://127.0.0.1:{https_port}"
    database = pg_template.new_database()
    replica = ("--trusted-proxy", "127.0.0.1", "--public-url", url)
    replica += ("--client-auth-failure-limit", str(BUDGET))
    data = tmp_path_factory.mktemp("replicas")
    try:
        with (
            serving(data / "a", *replica, env=ENV, database=database, port=ports[0]) as a,
            serving(
                data / "b", *replica, env=ENV, database=database, port=ports[1], key_file=a.key_file
            ) as b,
            nginx_in_front(tmp_path_factory.mktemp("nginx"), ports, https_port) as (shown, http_port),
        ):
            assert shown == url
            yield Stack(url, http_port, (a, b))
    finally:
        pg_template.drop(database)


def _answers(url: str) -> bool:
    try:
        with httpx.Client(transport=httpx.HTTPTransport(verify=False), timeout=2) as client:
            return client.get(f"{url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def test_the_plain_http_listener_redirects_to_https(stack: Stack) -> None:
    resp = httpx.get(f"http://127.0.0.1:{stack.http_port}/console/", timeout=10)
    assert resp.status_code == 301 and resp.headers["Location"].startswith("https://127.0.0.1")


def test_ingress_through_nginx_at_the_url_the_api_shows(stack: Stack) -> None:
    with stack.admin() as admin:
        factory = admin.post("/api/v1/factory", json={"name": "proxied"})
        assert factory.status_code == 201, factory.text
        hook = admin.post(f"/api/v1/factory/{factory.json()['uid']}/webhooks", json={"name": "orders"})
        assert hook.status_code == 201, hook.text
    shown = hook.json()
    assert shown["ingress_url"] == f"{stack.url}/webhooks/w/{shown['uid']}"  # --public-url: nginx, https
    with stack.client("127.0.0.3") as sender:
        for n in range(6):
            resp = sender.post(
                shown["ingress_url"],
                json={"order": n},
                headers={"Authorization": f"Bearer {shown['secret']}", "X-Factory-Delivery-Id": f"order-{n}"},
            )
            assert resp.status_code == 202, resp.text
    for replica in stack.replicas:  # round robin: each replica accepted some of them
        assert f"/webhooks/w/{shown['uid']}" in replica.log.read_text()


def test_a_run_event_arrives_through_nginx_before_the_stream_ends(stack: Stack) -> None:
    with stack.admin() as admin:
        made = admin.post("/api/v1/agent/run", json={"prompt": "stream me"})
        assert made.status_code == 200, made.text
        run_id = made.json()["run_id"]
        path = f"/api/v1/agent/runs/{run_id}/events"
        with admin.stream("GET", path, headers={"Last-Event-ID": "0"}, timeout=20) as stream:
            assert stream.status_code == 200 and stream.headers["content-type"].startswith(
                "text/event-stream"
            )
            lines = stream.iter_lines()
            first = next(line for line in lines if line.startswith("event: "))
            # The run is QUEUED (no workers): the stream is still open, the event came through unbuffered.
            assert first == "event: state"
            assert admin.get(f"/api/v1/agent/runs/{run_id}").json()["state"] == "QUEUED"
            cancelled = admin.post(f"/api/v1/agent/runs/{run_id}/cancel")
            assert cancelled.status_code in (200, 202), cancelled.text
            rest = list(lines)  # the stream ends after the terminal state
            assert any('"CANCELLED"' in line for line in rest if line.startswith("data: "))


def test_the_sign_in_budget_counts_the_client_nginx_forwards(stack: Stack) -> None:
    wrong = {"Authorization": "Bearer fk_wrong-key-for-the-budget"}
    good = {"Authorization": f"Bearer {stack.key}"}
    with stack.client("127.0.0.2") as guesser, stack.client("127.0.0.3") as neighbour:
        for _ in range(BUDGET):
            assert guesser.get("/api/v1/agent/runs", headers=wrong).status_code == 401
        assert guesser.get("/api/v1/agent/runs", headers=wrong).status_code == 429  # across both replicas
        # What the client writes in X-Forwarded-For does not change whose budget it spends.
        spoofed = {**good, "X-Forwarded-For": "198.51.100.9"}
        assert guesser.get("/api/v1/agent/runs", headers=spoofed).status_code == 429
        # Another client behind the same proxy has its own budget.
        assert neighbour.get("/api/v1/agent/runs", headers=wrong).status_code == 401
        assert neighbour.get("/api/v1/agent/runs", headers=good).status_code == 200
    # Straight to a replica, from an address that is not the trusted proxy: the header is not believed
    # (naming the locked-out client changes nothing for this caller).
    direct = httpx.HTTPTransport(local_address="127.0.0.4")
    with httpx.Client(transport=direct, timeout=10) as caller:
        headers = {**good, "X-Forwarded-For": "127.0.0.2"}
        assert caller.get(f"{stack.replicas[1].url}/api/v1/agent/runs", headers=headers).status_code == 200


def test_cookies_are_secure_behind_the_tls_proxy(stack: Stack) -> None:
    with stack.client("127.0.0.3") as browser:
        assert all(secure(c) for c in cookies(browser.get("/console/login")))


@pytest.fixture(scope="module")
def unnamed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One replica on SQLite behind nginx without ``--public-url``: what nginx's X-Forwarded-Proto alone
    changes."""
    assert Path(NGINX).exists(), "nginx is not installed (apt-get install nginx; .ci/run installs it)"
    port = free_port()
    data = tmp_path_factory.mktemp("unnamed")
    with (
        serving(data, "--trusted-proxy", "127.0.0.1", env=ENV, port=port) as replica,
        nginx_in_front(tmp_path_factory.mktemp("nginx-unnamed"), [port]) as (url, http_port),
    ):
        yield Stack(url, http_port, (replica,))


def test_x_forwarded_proto_from_nginx_alone_makes_cookies_secure(unnamed: Stack) -> None:
    with unnamed.client("127.0.0.3") as browser:
        assert all(secure(c) for c in cookies(browser.get("/console/login")))
    # Straight to the replica from an address that is not the trusted proxy: the header is not believed.
    direct = httpx.HTTPTransport(local_address="127.0.0.4")
    with httpx.Client(transport=direct, timeout=10) as caller:
        forged = caller.get(
            f"{unnamed.replicas[0].url}/console/login", headers={"X-Forwarded-Proto": "https"}
        )
    assert not any(secure(c) for c in cookies(forged))


def test_shown_urls_never_follow_forwarded_headers(unnamed: Stack) -> None:
    """Without --public-url the URLs shown are the replica's own address, whatever nginx forwards: they are
    built from configuration only (so deployment.md sets FACTORY_PUBLIC_URL)."""
    with unnamed.admin() as admin:
        factory = admin.post("/api/v1/factory", json={"name": "unnamed"})
        assert factory.status_code == 201, factory.text
        hook = admin.post(f"/api/v1/factory/{factory.json()['uid']}/webhooks", json={"name": "orders"})
        assert hook.status_code == 201, hook.text
    shown = hook.json()["ingress_url"]
    assert shown == f"{unnamed.replicas[0].url}/webhooks/w/{hook.json()['uid']}"
    with unnamed.client() as sender:  # the same webhook through nginx
        path = shown.removeprefix(unnamed.replicas[0].url)
        auth = {"Authorization": f"Bearer {hook.json()['secret']}", "X-Factory-Delivery-Id": "u-1"}
        assert sender.post(path, json={}, headers=auth).status_code == 202


def cookies(resp: httpx.Response) -> list[str]:
    assert resp.status_code == 200, resp.text
    found = resp.headers.get_list("set-cookie")
    assert found, "the sign-in form sets a cookie"
    return found


def secure(cookie: str) -> bool:
    return "secure" in [part.strip().lower() for part in cookie.split(";")]
