"""A sandboxed run's network (docs/workers.md, "Network"), with the real bubblewrap, the real egress proxy
and relay, and aiohttp servers on the host's loopback standing for the model and for everything else.

Nothing leaves loopback: refused destinations are refused before any connection, and the names used
(``example.invalid``) never resolve."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from factoryctl.worker.egress import MAX_REFUSED, EgressProxy, public_only
from factoryctl.worker.egress_run import run_network
from factoryctl.worker.isolation import sandbox_report
from factoryctl.worker.job import Job
from factoryctl.worker.netpolicy import EgressRules, NetworkPolicy
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.sandbox import Sandbox, start_process

ENV = {"PATH": "/usr/bin:/bin"}
NAME = web.AppKey("name", str)


class Host:
    """Two HTTP servers on the host's loopback: ``model`` and ``other``; each answers its name and path."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.ports: dict[str, int] = {}

    async def start(self) -> web.AppRunner:
        async def answer(request: web.Request) -> web.Response:
            self.seen.append(f"{request.host} {request.path_qs} {request.headers.get('Connection')}")
            return web.Response(text=f"hello {request.app[NAME]}")

        runners = []
        for name in ("model", "other"):
            app = web.Application()
            app[NAME] = name
            app.router.add_get("/{tail:.*}", answer)
            runner = web.AppRunner(app)
            await runner.setup()
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            await web.SockSite(runner, sock).start()
            self.ports[name] = sock.getsockname()[1]
            runners.append(runner)
        self.runners = runners
        return runners[0]

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


@pytest.fixture
async def host() -> AsyncIterator[Host]:
    servers = Host()
    await servers.start()
    yield servers
    await servers.stop()


def job_for(network: dict[str, Any] | None, env: dict[str, str] | None = None) -> Job:
    claim: dict[str, Any] = {"run_id": "run_1", "environment": {"env": env or {}}}
    if network is not None:
        claim["network"] = network
    return Job.from_claim(claim)


def worker_env(host: Host) -> dict[str, str]:
    """The worker's own environment: it points the agent at the model (``serve --agent-env``)."""
    return {**ENV, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{host.ports['model']}"}


class Recorder:
    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self.lines: list[str] = []

    async def event(self, events: Any) -> None:
        self.events.extend(events)

    async def line(self, stream: str, text: str) -> None:
        self.lines.append(text)

    def refused(self) -> list[dict[str, Any]]:
        return [dict(e.data) for e in self.events if e.kind == "egress_refused"]


async def sandboxed(sandbox: Sandbox | None, script: str, workspace: Path) -> str:
    proc = await start_process(
        ["bash", "-c", script],
        cwd=workspace,
        env=ENV,
        sandbox=sandbox,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return out.decode()


async def test_the_model_endpoint_is_reached_and_everything_else_is_refused_once(
    host: Host, tmp_path: Path
) -> None:
    rec = Recorder()
    model, other = host.ports["model"], host.ports["other"]
    job = job_for(None)  # no network in the claim: an allowlist with no entries
    async with run_network(
        job, Sandbox(), preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as sandbox:
        assert sandbox is not None and sandbox.network is not None
        egress = sandbox.network.egress
        assert egress is not None and (egress / "proxy.sock").is_socket()
        out = await sandboxed(
            sandbox,
            f'echo "proxy $HTTPS_PROXY no[$NO_PROXY]"; '
            f"curl -sS -m 20 'http://127.0.0.1:{model}/v1/messages?x=1'; echo; "
            f"curl -sS -m 20 --noproxy '*' http://127.0.0.1:{model}/direct; echo; "  # the forwarded port
            f"curl -sS -m 20 --proxytunnel http://127.0.0.1:{model}/tunnel; echo; "  # CONNECT, then HTTP
            f"curl -sS -m 20 http://127.0.0.1:{other}/; echo; "
            f"curl -sS -m 20 http://127.0.0.1:{other}/again; echo; "
            f"curl -s -m 20 -o /dev/null -w '%{{http_connect}}' https://example.invalid/; echo; "
            f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{other}/ 2>/dev/null || echo 'no direct way out'",
            tmp_path,
        )
    lines = [line for line in out.splitlines() if line]
    assert lines[0].startswith("proxy http://127.0.0.1:") and lines[0].endswith("no[]")
    assert lines[1:4] == ["hello model"] * 3
    assert lines[4:6] == [f"egress to 127.0.0.1:{other} refused: not on the network allowlist"] * 2
    assert lines[6:] == ["403", "no direct way out"]  # the CONNECT's answer
    assert host.seen[0] == f"127.0.0.1:{model} /v1/messages?x=1 close"  # origin form, Connection: close
    assert [s.split()[1] for s in host.seen] == ["/v1/messages?x=1", "/direct", "/tunnel"]  # "other": none
    assert rec.refused() == [  # once per destination
        {"host": "127.0.0.1", "port": other, "reason": "not on the network allowlist"},
        {"host": "example.invalid", "port": 443, "reason": "not on the network allowlist"},
    ]
    assert rec.lines == [  # the policy is on the run's details; the log says what was refused
        f"network: refused 127.0.0.1:{other} (not on the network allowlist)",
        "network: refused example.invalid:443 (not on the network allowlist)",
    ]
    assert not egress.exists()  # the run's egress directory goes with the run


async def test_a_destination_listed_by_name_may_be_loopback(host: Host, tmp_path: Path) -> None:
    rec = Recorder()
    other = host.ports["other"]
    job = job_for({"mode": "allowlist", "allow": [f"127.0.0.1:{other}"]})
    async with run_network(
        job, Sandbox(), preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as sandbox:
        out = await sandboxed(sandbox, f"curl -sS -m 20 http://127.0.0.1:{other}/listed", tmp_path)
    assert out == "hello other" and rec.refused() == []


async def test_a_model_endpoint_the_run_chose_cannot_be_a_loopback_address(
    host: Host, tmp_path: Path
) -> None:
    """A run's environment that points "the model" at the worker's own loopback (the API, the database)
    gets it allowed by name but refused by address: only the worker's own endpoint may be local."""
    rec = Recorder()
    other = host.ports["other"]
    job = job_for(None, env={"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{other}"})
    async with run_network(
        job, Sandbox(), preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as sandbox:
        out = await sandboxed(sandbox, f"curl -sS -m 20 http://127.0.0.1:{other}/api", tmp_path)
    assert out.strip() == f"egress to 127.0.0.1:{other} refused: 127.0.0.1 is not a public address"
    assert rec.refused() == [
        {"host": "127.0.0.1", "port": other, "reason": "127.0.0.1 is not a public address"}
    ]
    assert host.seen == []


async def test_mode_none_reaches_only_the_model(host: Host, tmp_path: Path) -> None:
    rec = Recorder()
    other = host.ports["other"]
    job = job_for({"mode": "none", "allow": [f"127.0.0.1:{other}"]})
    async with run_network(
        job, Sandbox(), preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as sandbox:
        out = await sandboxed(
            sandbox,
            f"curl -sS -m 20 http://127.0.0.1:{host.ports['model']}/; echo; curl -sS -m 20 http://127.0.0.1:{other}/",
            tmp_path,
        )
    assert out.splitlines() == [
        "hello model",
        f"egress to 127.0.0.1:{other} refused: network mode none: only the model endpoint is reachable",
    ]


async def test_open_shares_the_host_network_and_none_keeps_the_host(host: Host, tmp_path: Path) -> None:
    rec = Recorder()
    other = host.ports["other"]
    job = job_for({"mode": "open"})
    async with run_network(
        job, Sandbox(), preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as sandbox:
        out = await sandboxed(
            sandbox, f'echo "[$HTTPS_PROXY]"; curl -sS -m 20 http://127.0.0.1:{other}/', tmp_path
        )
    assert out.splitlines() == ["[]", "hello other"]
    assert rec.lines == ["network: open (the host's network, chosen by the run's environment)"]
    async with run_network(
        job, None, preset=None, base_env=ENV, on_event=rec.event, on_output=rec.line
    ) as none:
        assert none is None  # --sandbox none: the host's network, no proxy


async def ask(path: Path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(request)
    data = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return data


async def test_addresses_are_judged_after_dns_unless_listed_by_name(host: Host, tmp_path: Path) -> None:
    """A wildcard's name that resolves to a private, loopback or metadata address is refused (the DNS
    answers here are scripted); the same address listed by name is reached."""
    answers = {
        "meta.example.com": "169.254.169.254",
        "loop.example.com": "127.0.0.1",
        "named.internal": "127.0.0.1",
    }

    async def resolve(name: str, port: int) -> list[tuple[Any, ...]]:
        if name not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[name], port))]

    refused: list[tuple[str, int, str]] = []

    async def on_refused(name: str, port: int, reason: str) -> None:
        refused.append((name, port, reason))

    other = host.ports["other"]
    rules = EgressRules(NetworkPolicy("allowlist", (f"*.example.com:{other}", f"named.internal:{other}")))
    proxy = EgressProxy(
        rules, tmp_path / "p.sock", refusal=public_only, on_refused=on_refused, resolve=resolve
    )
    await proxy.start()
    try:
        meta = await ask(tmp_path / "p.sock", f"CONNECT meta.example.com:{other} HTTP/1.1\r\n\r\n".encode())
        loop = await ask(
            tmp_path / "p.sock", f"GET http://loop.example.com:{other}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        named = await ask(
            tmp_path / "p.sock", f"GET http://named.internal:{other}/n HTTP/1.1\r\nHost: y\r\n\r\n".encode()
        )
        unknown = await ask(
            tmp_path / "p.sock", f"CONNECT nowhere.example.com:{other} HTTP/1.1\r\n\r\n".encode()
        )
        bad = await ask(tmp_path / "p.sock", b"GET /relative HTTP/1.1\r\n\r\n")
    finally:
        await proxy.close()
    assert meta.startswith(b"HTTP/1.1 403") and b"169.254.169.254 is not a public address" in meta
    assert loop.startswith(b"HTTP/1.1 403") and b"127.0.0.1 is not a public address" in loop
    assert named.startswith(b"HTTP/1.1 200") and named.endswith(b"hello other")
    assert unknown.startswith(b"HTTP/1.1 502")  # allowed, but no such name: not a refusal
    assert bad.startswith(b"HTTP/1.1 400")
    assert [r[:2] for r in refused] == [("meta.example.com", other), ("loop.example.com", other)]


async def test_the_relay_costs_little_per_process_start(host: Host, tmp_path: Path) -> None:
    """The relay adds one interpreter start to each sandboxed process (docs/workers.md, "Network": about
    10-20 ms on this machine kind); bounded loosely here so a slow CI machine does not fail it."""
    rec = Recorder()
    job = job_for(None)

    async def timed(sandbox: Sandbox) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.monotonic()
            proc = await start_process(["true"], cwd=tmp_path, env=ENV, sandbox=sandbox)
            assert await proc.wait() == 0
            best = min(best, time.monotonic() - start)
        return best

    plain = await timed(Sandbox())
    async with run_network(
        job, Sandbox(), preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as sandbox:
        assert sandbox is not None
        relayed = await timed(sandbox)
    assert relayed - plain < 0.5


async def test_refusals_are_recorded_once_per_destination_and_bounded(tmp_path: Path) -> None:
    refused: list[tuple[str, int]] = []

    async def on_refused(name: str, port: int, reason: str) -> None:
        refused.append((name, port))

    proxy = EgressProxy(
        EgressRules(NetworkPolicy("none")), tmp_path / "p.sock", refusal=public_only, on_refused=on_refused
    )
    await proxy.start()
    try:
        for port in [1, 1, *range(2, MAX_REFUSED + 2)]:  # MAX_REFUSED + 1 destinations, the first twice
            answer = await ask(
                tmp_path / "p.sock", f"CONNECT example.invalid:{port} HTTP/1.1\r\n\r\n".encode()
            )
            assert answer.startswith(b"HTTP/1.1 403")
    finally:
        await proxy.close()
    assert len(refused) == MAX_REFUSED and refused[:2] == [("example.invalid", 1), ("example.invalid", 2)]
    assert proxy.unrecorded == 1  # the run's log counts those past the bound


# What a worker's operator lets an environment choose (docs/workers.md, "Network"): serve shares its machine
# with every team, so by default it honours no `mode: open` and no listed loopback or private destination.
SHARED: dict[str, bool] = {"open_network": False, "listed_private": False}  # serve by default


async def test_a_listed_loopback_destination_is_refused_where_the_operator_does_not_allow_it(
    host: Host, tmp_path: Path
) -> None:
    rec = Recorder()
    model, other = host.ports["model"], host.ports["other"]
    job = job_for({"mode": "allowlist", "allow": [f"127.0.0.1:{other}"]})
    async with run_network(
        job,
        Sandbox(**SHARED),
        preset="claude",
        base_env=worker_env(host),
        on_event=rec.event,
        on_output=rec.line,
    ) as sandbox:
        out = await sandboxed(
            sandbox,
            f"curl -sS -m 20 http://127.0.0.1:{model}/; echo; curl -sS -m 20 http://127.0.0.1:{other}/",
            tmp_path,
        )
    assert out.splitlines() == [  # the worker's own model endpoint still works
        "hello model",
        f"egress to 127.0.0.1:{other} refused: 127.0.0.1 is not a public address",
    ]
    assert rec.refused() == [
        {"host": "127.0.0.1", "port": other, "reason": "127.0.0.1 is not a public address"}
    ]


async def test_open_is_an_allowlist_of_the_model_where_the_operator_does_not_allow_it(
    host: Host, tmp_path: Path
) -> None:
    rec = Recorder()
    other = host.ports["other"]
    job = job_for({"mode": "open"})
    sandbox = Sandbox(**SHARED)
    assert sandbox_report(job, sandbox) == {"kind": "bwrap", "network": "allowlist"}  # what the run shows
    async with run_network(
        job, sandbox, preset="claude", base_env=worker_env(host), on_event=rec.event, on_output=rec.line
    ) as confined:
        out = await sandboxed(confined, f"curl -sS -m 20 http://127.0.0.1:{other}/", tmp_path)
    assert out.strip() == f"egress to 127.0.0.1:{other} refused: not on the network allowlist"
    assert "which this worker's operator does not allow" in rec.lines[0]
    assert sandbox_report(job, Sandbox()) == {"kind": "bwrap", "network": "open"}  # a self-hosted worker
