"""``factoryctl github connect|show|disconnect`` as subprocesses against a real ``factoryctl serve``, and
a real GitHub payload signed by ``@octokit/webhooks-methods`` posted to the URL ``connect`` printed."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from serve_support import run_cli, serving

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
APP_SECRET = "e2e-github-app-secret"
_SIGN = (
    "import { sign } from '@octokit/webhooks-methods';"
    "let body = ''; process.stdin.setEncoding('utf8');"
    "process.stdin.on('data', (c) => { body += c; });"
    "process.stdin.on('end', async () => { process.stdout.write(await sign(process.argv[1], body)); });"
)


def test_connect_show_deliver_disconnect(tmp_path: Path) -> None:
    made = run_cli(
        "--data-dir", tmp_path, "secrets", "create", "github-app", "--from-stdin", stdin=APP_SECRET + "\n"
    )
    assert made.returncode == 0, made.stderr
    with serving(tmp_path) as served:
        env: dict[str, str | None] = {
            "FACTORY_DATA_DIR": str(tmp_path),
            "FACTORY_API_KEY": served.key,
            "FACTORY_API_URL": served.url,
            "NO_COLOR": None,
        }

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(*args, env=env, timeout=60)

        connected = cli("github", "connect", "--secret-name", "github-app", "--format", "json")
        assert connected.returncode == 0, connected.stderr
        connection = json.loads(connected.stdout)
        assert connection["uid"].startswith("gh_") and connection["secret_name"] == "github-app"
        again = cli("github", "connect", "--secret-name", "github-app")
        assert again.returncode == 1 and "already has a GitHub App connection" in again.stderr
        shown = cli("github", "show")
        assert shown.returncode == 0 and connection["url"] in shown.stdout

        examples = ROOT / "node_modules/@octokit/webhooks-examples/api.github.com/index.json"
        ping = next(g for g in json.loads(examples.read_text()) if g["name"] == "ping")["examples"][0]
        body = json.dumps(ping).encode()
        signature = subprocess.run(
            ["node", "--input-type=module", "-e", _SIGN, APP_SECRET],
            input=body,
            capture_output=True,
            cwd=ROOT,
            check=True,
            timeout=30,
        ).stdout.decode()
        delivery = str(uuid.uuid4())
        headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": signature}
        url = connection["url"].replace(connection["url"].split("/webhooks/")[0], served.url)
        answer = httpx.post(url, content=body, headers=headers, timeout=30)
        assert answer.status_code == 202 and answer.json() == {"delivery_id": delivery}

        gone = cli("github", "disconnect", "--format", "json")
        assert gone.returncode == 0 and json.loads(gone.stdout) == {"uid": connection["uid"], "deleted": True}
        assert cli("github", "show").returncode == 1
        assert httpx.post(url, content=body, headers=headers, timeout=30).status_code == 404
