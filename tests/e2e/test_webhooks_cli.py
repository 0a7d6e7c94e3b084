"""``factoryctl webhooks|deliveries|automations`` as subprocesses against a real ``factoryctl serve``.

The server follows a factory directory (a definitions-managed factory, for test-filter) and the test
creates an API-managed factory with the client; every verb then runs as its own process, exactly as
a user or a script runs it.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from serve_support import CLI, Served, clean_env, run_cli, serving, wait_for

from factoryctl.client import FactoryClient

pytestmark = pytest.mark.slow
TEAM_TOKEN = "e2e-alerts-token-0123456789"


@dataclass
class Server:
    """The ``serve`` process and the factory directory it follows."""

    served: Served
    repo: Path

    @property
    def url(self) -> str:
        return self.served.url

    @property
    def key(self) -> str:
        return self.served.key

    def env(self) -> dict[str, str | None]:
        """What each command runs with: the server's data directory, URL and admin key."""
        return {
            "FACTORY_DATA_DIR": str(self.served.data_dir),
            "FACTORY_API_KEY": self.key,
            "FACTORY_API_URL": self.url,
            "NO_COLOR": None,
        }

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env(), stdin=stdin, timeout=60)

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self.cli(*args, stdin=stdin)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return done.stdout

    def client(self) -> FactoryClient:
        return FactoryClient(self.url, self.key)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("serve")
    repo = tmp_path_factory.mktemp("repo")
    (repo / "webhooks").mkdir()
    (repo / "factory.yaml").write_text("name: e2e-defs\n")
    (repo / "webhooks" / "alerts.yaml").write_text("authMode: token\nsecretName: alerts-token\n")
    made = run_cli(
        "--data-dir", data_dir, "secrets", "create", "alerts-token", "--from-stdin", stdin=TEAM_TOKEN + "\n"
    )
    assert made.returncode == 0, made.stderr
    with serving(data_dir, "--repo", repo) as served:
        yield Server(served, repo)


def post(url: str, payload: object, secret: str, delivery_id: str) -> int:
    headers = {"Authorization": f"Bearer {secret}", "X-Factory-Delivery-Id": delivery_id}
    return httpx.post(url, json=payload, headers=headers, timeout=10).status_code


def test_webhook_verbs_end_to_end(server: Server) -> None:
    with server.client() as client:
        factory = client.factories.create("e2e-shop").uid

    created = server.ok("webhooks", "create", factory, "--name", "orders", "--delivery-id-header", "X-Order")
    lines = created.strip().splitlines()
    secret = lines[-1]  # alone on the last line
    assert "shown once" in lines[-2] and len(secret) >= 32
    [url_line] = [line for line in lines if line.startswith("ingress URL:")]
    ingress = url_line.split(":", 1)[1].strip()
    assert ingress.startswith(f"{server.url}/webhooks/w/wh_")
    uid = ingress.rsplit("/", 1)[-1]

    listed = server.ok("webhooks", "list", factory)
    header, row = listed.splitlines()
    assert header.split() == ["UID", "NAME", "AUTH", "ENABLED", "INGRESS", "URL"]
    assert row.split() == [uid, "orders", "token", "yes", ingress]
    as_json = json.loads(server.ok("webhooks", "list", factory, "--format", "json"))
    assert [w["uid"] for w in as_json["webhooks"]] == [uid] and "secret" not in as_json["webhooks"][0]
    got = json.loads(server.ok("webhooks", "get", factory, uid, "--format", "json"))
    assert got["delivery_id_header"] == "X-Order" and got["enabled"] is True

    assert post(ingress, {"order": 1}, secret, "order-1") == 202
    assert post(ingress, {"order": 1}, "not-the-secret", "order-1") == 401
    assert server.ok("webhooks", "disable", factory, uid).strip() == f"{uid} (orders) disabled"
    assert post(ingress, {"order": 2}, secret, "order-2") == 404
    server.ok("webhooks", "enable", factory, uid)
    assert post(ingress, {"order": 3}, secret, "order-3") == 202

    deliveries = server.ok("deliveries", "list", factory, uid).splitlines()
    assert deliveries[0].split()[:3] == ["DELIVERY", "ID", "STATUS"]
    assert [d.split()[0] for d in deliveries[1:]] == ["order-3", "order-1", "order-1"]  # newest first
    accepted = json.loads(
        server.ok(
            "deliveries", "list", factory, uid, "--status", "Accepted", "--limit", "1", "--format", "json"
        )
    )
    assert [d["delivery_id"] for d in accepted["deliveries"]] == ["order-3"]
    one = server.ok("deliveries", "get", factory, uid, "order-1")
    assert "status:" in one and "Accepted" in one and '"order": 1' in one

    rotated = server.ok("webhooks", "rotate-secret", factory, uid).strip().splitlines()
    new_secret = rotated[-1]
    assert new_secret != secret and "old one no longer verifies" in rotated[-2]
    assert post(ingress, {"order": 4}, secret, "order-4") == 401
    assert post(ingress, {"order": 4}, new_secret, "order-4") == 202

    missing = server.cli("webhooks", "get", factory, "wh_doesnotexist")
    assert missing.returncode == 1 and missing.stdout == ""
    assert (
        missing.stderr.strip()
        == f"error: webhook wh_doesnotexist does not exist in factory {factory} (resource_not_found)"
    )
    invalid = server.cli("webhooks", "create", factory, "--name", "Bad Name")
    assert (
        invalid.returncode == 1
        and invalid.stderr.startswith("error: name: ")
        and "(invalid_request)" in invalid.stderr
    )

    deleted = json.loads(server.ok("webhooks", "delete", factory, uid, "--format", "json"))
    assert deleted == {"uid": uid, "deleted": True}
    assert post(ingress, {"order": 5}, new_secret, "order-5") == 404


def test_signature_webhook_secret_from_stdin(server: Server) -> None:
    with server.client() as client:
        factory = client.factories.create("e2e-signed").uid
    out = server.ok(
        "webhooks",
        "create",
        factory,
        "--name",
        "gh",
        "--scheme",
        "github",
        "--secret-from-stdin",
        stdin="provider-secret-value\n",
    )
    assert (
        "provider-secret-value" not in out
    )  # the caller's own secret is not echoed... once: it is the answer
    hook = json.loads(
        server.ok("webhooks", "create", factory, "--name", "stripe", "--scheme", "stripe", "--format", "json")
    )
    assert hook["secret_configured"] is False and "secret" not in hook
    supplied = server.ok(
        "webhooks", "rotate-secret", factory, hook["uid"], "--secret-from-stdin", stdin="whsec-stripe\n"
    )
    assert "whsec-stripe" not in supplied and "in place" in supplied


def test_automation_test_filter(server: Server) -> None:
    with server.client() as client:

        def applied() -> tuple[str, str] | None:
            page = client.factories.list(search="e2e-defs")
            if not page.items:
                return None
            detail = client.factories.get(page.items[0].uid)
            return (detail.uid, detail.webhooks[0].uid) if detail.webhooks else None

        factory, hook = wait_for(applied, 30, "the definitions to apply")
        automation_dir = server.repo / "automations" / "triage"
        automation_dir.mkdir(parents=True)
        (automation_dir / "automation.md").write_text(
            "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
            f"      webhook_ids: [{hook}]\n      payload:\n        severity: [high, critical]\n"
            "---\nTriage the alert.\n"
        )
        automation = wait_for(
            lambda: next((a.uid for a in client.factories.get(factory).automations), None),
            30,
            "the automation to apply",
        )
    ingress = f"{server.url}/webhooks/w/{hook}"
    assert post(ingress, {"severity": "high"}, TEAM_TOKEN, "alert-1") == 202
    assert post(ingress, {"severity": "low"}, TEAM_TOKEN, "alert-2") == 202

    yes = server.ok("automations", "test-filter", factory, automation, "--delivery-id", "alert-1")
    assert yes.splitlines()[0] == "Would trigger"
    no = server.ok("automations", "test-filter", factory, automation, "--delivery-id", "alert-2")
    lines = no.splitlines()
    assert lines[0] == "Would not trigger" and "payload check: failed" in no and "(at severity)" in no
    as_json = json.loads(
        server.ok(
            "automations", "test-filter", factory, automation, "--delivery-id", "alert-2", "--format", "json"
        )
    )
    assert (
        as_json["payload_check"]["failed_path"] == "severity" and as_json["webhook_check"]["passed"] is True
    )
    gone = server.cli("automations", "test-filter", factory, automation, "--delivery-id", "never")
    assert gone.returncode == 1 and "(resource_not_found)" in gone.stderr

    rotated = server.ok("webhooks", "rotate-secret", factory, hook).splitlines()
    assert "keeps its old secret until its definition next applies" in "\n".join(rotated)
    assert post(ingress, {"severity": "high"}, TEAM_TOKEN, "alert-3") == 202  # still the captured value


def test_tables_use_rich_on_a_terminal(server: Server) -> None:
    with server.client() as client:
        factory = client.factories.create("e2e-tty").uid
        client.webhooks.create(factory, "tty-hook")
    primary, replica = pty.openpty()
    env = clean_env(server.env() | {"COLUMNS": "200", "TERM": "xterm"})
    proc = subprocess.run(
        [*CLI, "webhooks", "list", factory, "--server", server.url],
        stdout=replica,
        stderr=subprocess.PIPE,
        env=env,
        timeout=60,
    )
    os.close(replica)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    shown = b"".join(chunks).decode()
    assert proc.returncode == 0, proc.stderr
    assert "tty-hook" in shown and "INGRESS URL" in shown
    assert "─" in shown and "\x1b[" in shown  # a rich rule under bold headers, not plain columns


def test_validate_remote_against_serve(server: Server, tmp_path: Path) -> None:
    from factoryctl.client.files import validate_remote

    broken = tmp_path / "broken"
    (broken / "webhooks").mkdir(parents=True)
    (broken / "factory.yaml").write_text("name: e2e-broken\n")
    (broken / "webhooks" / "hook.yaml").write_text("authMode: token\nsecretName: no-such-secret\n")
    report = validate_remote(server.url, server.key, [server.repo, broken])
    by_path = {f["path"]: f for f in report["factories"]}
    assert by_path[str(server.repo)]["errors"] == []  # its secret exists on this server
    [error] = by_path[str(broken)]["errors"]
    assert error["rule"] == "FC040" and error["path"] == f"{broken}/webhooks/hook.yaml"
    assert report["valid"] is False and report["summary"]["errors"] == 1
