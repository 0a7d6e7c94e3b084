"""A real ``factoryctl serve`` for ``bench/soak.py`` and ``bench/fairness.py``, set up with the CLI.

Secrets, member API keys and the factory are created by ``factoryctl`` commands, exactly as an operator
would, before ``serve`` starts in a child process; its output goes to ``serve.log`` in the scratch
directory. The notification receiver runs in the bench's process, on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, CookieJar, TCPConnector, web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from store.db import create_engine
from store.models import Webhook

HOOKS = ("hook-a", "hook-b", "hook-c")
TOKEN_SECRET, NOTIFY_SECRET = "soak-token", "soak-notify"
CLI = str(Path(sys.executable).with_name("factoryctl"))
STREAMS_PER_KEY = 10  # below the server's 20 open streams per key (docs/events.md, "Bounds")


@dataclass
class Served:
    """The running server and what a client needs to load it."""

    server: subprocess.Popen[bytes]
    engine: AsyncEngine  # the bench's own connection to the store, for counting
    http: ClientSession
    base: str
    keys: list[str]  # member keys: keys[0] for requests and the console, the others for streams
    hooks: dict[str, str]  # webhook name -> UID
    token: str  # the webhooks' bearer token
    log_path: Path
    answered: dict[str, int] = field(default_factory=lambda: {"204": 0, "500": 0})

    def check_alive(self) -> None:
        if self.server.poll() is not None:
            raise SystemExit(f"serve exited ({self.server.returncode}); see {self.log_path}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_factory(root: Path, notify_port: int) -> Path:
    """3 webhooks, one automation matching ``action: opened`` on all of them, one notification endpoint."""
    repo = root / "soak-factory"
    for sub in ("webhooks", "automations/on-opened", "notifications"):
        (repo / sub).mkdir(parents=True, exist_ok=True)
    (repo / "factory.yaml").write_text("name: soak\ndescription: bench/soak.py\n")
    for hook in HOOKS:
        (repo / "webhooks" / f"{hook}.yaml").write_text(f"authMode: token\nsecretName: {TOKEN_SECRET}\n")
    (repo / "automations/on-opened/automation.md").write_text(
        "---\ntitle: Soak run\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        f"      webhooks: [{', '.join(HOOKS)}]\n      payload:\n        action: [opened]\n---\n"
        "Echo the delivery.\n"
    )
    (repo / "notifications/soak.yaml").write_text(
        f"url: http://127.0.0.1:{notify_port}/hook\nsecretName: {NOTIFY_SECRET}\nevents: [SUCCEEDED]\n"
        'filter:\n  factories: ["*"]\nenabled: true\n'
    )
    return repo


def cli(base: list[str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([*base, *args], input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"factoryctl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def setup(base_cli: list[str], work: Path, notify_port: int, stream_clients: int) -> tuple[str, list[str]]:
    """Secrets, keys and the factory, through the CLI; the webhook token and the member keys."""
    token = cli(base_cli, "secrets", "create", TOKEN_SECRET, "--generate").strip().splitlines()[-1]
    signing = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    cli(base_cli, "secrets", "create", NOTIFY_SECRET, "--from-stdin", stdin=signing)
    cli(base_cli, "apply", str(write_factory(work, notify_port)), "--auto-approve")
    keys = []
    for n in range(1 + -(-stream_clients // STREAMS_PER_KEY)):
        created = cli(base_cli, "keys", "create", "--name", f"soak-{n}", "--role", "member")
        keys.append(created.strip().splitlines()[-1])
    return token, keys


def start(cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def log_summary(log_path: Path) -> str:
    text = log_path.read_text(errors="replace")
    return f"serve log: {text.count('Traceback')} tracebacks, {text.count('ERROR')} ERROR lines"


async def receiver(port: int, answered: dict[str, int]) -> web.AppRunner:
    """The notification endpoint: 204, or 500 to a tenth of the messages (a seeded draw)."""
    rng = random.Random(29)

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        fail = rng.random() < 0.1
        answered["500" if fail else "204"] += 1
        return web.Response(status=500 if fail else 204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def wait_for(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def serving(
    work: Path,
    db_url: str,
    *,
    workers: int,
    stream_clients: int = 0,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    worker_process: bool = True,
) -> AsyncIterator[Served]:
    """``factoryctl serve`` on a free loopback port with ``workers`` echo workers, ready to answer
    (``worker_process``: the workers in their own process, ready too)."""
    notify_port, port = free_port(), free_port()
    base_cli = [CLI, "--data-dir", str(work / "data"), "--database", db_url]
    token, keys = setup(base_cli, work, notify_port, stream_clients)
    engine = create_engine(db_url)
    async with engine.connect() as conn:
        hooks = {name: uid for name, uid in (await conn.execute(select(Webhook.name, Webhook.uid))).all()}
    cmd = [*base_cli, "serve", "--port", str(port), "--workers", str(workers), "--harness", "echo"]
    cmd += ["--delivery-rate-limit", str(10**9), "--notification-allow-loopback", *extra]
    cmd += ["--worker-process" if worker_process else "--no-worker-process"]
    log_path = work / "serve.log"
    server = start(cmd, log_path, env)
    jar = CookieJar(unsafe=True)  # the console's cookie, on an IP address
    http = ClientSession(connector=TCPConnector(limit=0), cookie_jar=jar, timeout=ClientTimeout(total=60))
    served = Served(server, engine, http, f"http://127.0.0.1:{port}", keys, hooks, token, log_path)
    notify = await receiver(notify_port, served.answered)
    try:

        async def ready() -> bool:
            served.check_alive()
            with contextlib.suppress(Exception):
                async with http.get(f"{served.base}/readyz") as r:
                    return r.status == 200
            return False

        await wait_for(ready, 60, "serve ready")
        if worker_process and workers:

            async def workers_ready() -> bool:
                served.check_alive()
                return b'"workers process ready"' in log_path.read_bytes()

            await wait_for(workers_ready, 60, "the workers' process ready")
        yield served
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(server.wait, 30)
        if server.poll() is None:
            server.kill()
        await http.close()
        await engine.dispose()
        await notify.cleanup()
