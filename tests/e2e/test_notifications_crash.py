"""Notifications from real ``factoryctl serve`` processes to a real receiver (docs/notifications.md).

- ``kill -9`` of the server in the middle of an attempt: after a restart the message is sent again, with
  the same ``webhook-id``, once its claim lapses (``--notification-timeout 1``: 2 * 1 + 5 = 7 s).
- Two replicas on one PostgreSQL: every message is sent exactly once (claims skip locked rows).
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import os
import secrets
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import builders
import pytest
import standardwebhooks
from cryptography.fernet import Fernet
from serve_support import Served, committed, serving, wait_for

from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory
from store.models import NotificationAttempt, NotificationCursor, NotificationMessage

pytestmark = pytest.mark.slow


class Receiver:
    """A threaded HTTP receiver on 127.0.0.1: keeps (webhook-id, body) of each request; the first
    ``hang`` requests are held open until :attr:`release` is set."""

    def __init__(self, hang: int = 0) -> None:
        self.got: list[tuple[str, bytes, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.hang = hang
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.got.append((self.headers["webhook-id"], body, dict(self.headers)))
                    held = len(receiver.got) <= receiver.hang
                if held:
                    receiver.release.wait(30)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    @contextmanager
    def serving(self) -> Iterator[Receiver]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release.set()
            self.server.shutdown()
            self.server.server_close()

    def ids(self) -> list[str]:
        with self.lock:
            return [i for i, _, _ in self.got]


async def _seed(url: str, key: str, receiver_url: str, secret: str) -> None:
    """A team with the signing secret and one endpoint told about every CANCELLED run of the team."""
    engine = create_engine(url)
    await migrate(engine)
    clock, box = SystemClock(), SecretBox.from_setting(key)
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        await builders.secret(s, box, clock, team.id, "HOOK_SECRET", secret)
        factory = await builders.factory(s, clock, team.id, "crash")
        await builders.notification(
            s,
            clock,
            team.id,
            factory.uid,
            "ops",
            url=receiver_url,
            secret_name="HOOK_SECRET",
            events=["CANCELLED"],
            filter={"factories": ["*"]},
        )
    await engine.dispose()


def _cancelled_runs(served: Served, n: int) -> list[str]:
    """``n`` runs created and cancelled through the API, once the sender's fan-out has started."""
    out = []
    for i in range(n):
        status, body = served.post(
            "/api/v1/agent/run", {"prompt": f"run {i}", "config": {"worker_host": "nobody"}}
        )
        assert status == 200, body
        run_id = body["run_id"]
        status, body = served.post(f"/api/v1/agent/runs/{run_id}/cancel")
        assert status == 200, body
        out.append(run_id)
    return out


def _fan_out_started(url: str) -> bool:
    return bool(committed(url, NotificationCursor.name))


def test_kill_9_mid_attempt_redelivers_with_the_same_webhook_id(tmp_path: Path) -> None:
    key, secret = (
        Fernet.generate_key().decode(),
        "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode(),
    )
    data_dir = tmp_path / "data"
    url = f"sqlite+aiosqlite:///{data_dir / 'factory.db'}"
    data_dir.mkdir()
    args = ("--notification-timeout", "1", "--notification-allow-loopback")  # the receiver is local
    env = {"FACTORY_SECRET_KEY": key}
    with Receiver(hang=1).serving() as receiver:
        asyncio.run(_seed(url, key, receiver.url, secret))
        with serving(data_dir, *args, env=env) as served:
            wait_for(lambda: _fan_out_started(url), 20, "the notification fan-out starting")
            [run_id] = _cancelled_runs(served, 1)
            wait_for(lambda: len(receiver.ids()) == 1, 20, "the first attempt arriving")
            os.kill(served.proc.pid, signal.SIGKILL)  # while the receiver holds the attempt open
            served.proc.wait(10)
        receiver.release.set()
        assert committed(url, NotificationAttempt.id) == []  # the attempt died with the server
        with serving(data_dir, *args, env=env, port=served.port):
            wait_for(
                lambda: committed(url, NotificationMessage.status) == [("delivered",)],
                30,
                "the message delivered after the restart",
            )
        first, second = receiver.got[0], receiver.got[1]
        assert first[0] == second[0] and first[1] == second[1]  # same webhook-id, same body
        payload = standardwebhooks.Webhook(secret).verify(second[1], second[2])
        assert payload["data"]["run_id"] == run_id and payload["type"] == "run.cancelled"
        assert committed(url, NotificationAttempt.attempt, NotificationAttempt.outcome) == [(1, "succeeded")]


def test_two_replicas_send_each_message_once(tmp_path: Path, pg_template: Any) -> None:
    if pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    url = pg_template.new_database()
    key, secret = (
        Fernet.generate_key().decode(),
        "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode(),
    )
    try:
        with Receiver().serving() as receiver, ExitStack() as stack:
            asyncio.run(_seed(url, key, receiver.url, secret))
            env = {"FACTORY_SECRET_KEY": key, "FACTORY_NOTIFICATION_ALLOW_LOOPBACK": "1"}
            first = stack.enter_context(serving(tmp_path / "d0", env=env, database=url))
            # the first server wrote the admin key; the second shares its store
            second = stack.enter_context(
                serving(tmp_path / "d1", env=env, database=url, key_file=first.key_file)
            )
            servers = [first, second]
            wait_for(lambda: _fan_out_started(url), 20, "the notification fan-out starting")
            runs = _cancelled_runs(servers[0], 15) + _cancelled_runs(servers[1], 15)
            wait_for(lambda: len(receiver.ids()) >= 30, 30, "30 notifications")
            wait_for(
                lambda: (
                    Counter(s for (s,) in committed(url, NotificationMessage.status)) == {"delivered": 30}
                ),
                30,
                "every message recorded as delivered",
            )
            assert Counter(receiver.ids()).most_common(1)[0][1] == 1  # no message sent twice
            sent_runs = {json.loads(body)["data"]["run_id"] for _, body, _ in receiver.got}
            assert sent_runs == set(runs)
    finally:
        pg_template.drop(url)
