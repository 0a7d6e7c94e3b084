"""From an environment's ``network`` to the sandbox a run gets, end to end (issue 27): the server computes
the policy into the claim, the service-hosted worker runs the run in bubblewrap behind its egress proxy
under that policy and reports the mode it applied, which the run shows as ``sandbox``; a destination the
policy does not name is refused and recorded as an ``egress_refused`` event (docs/security.md, "Network
policy"). The destination is a real HTTP server on this host's loopback, which only an explicit listing
reaches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import select

from store.models import RunEvent

if TYPE_CHECKING:
    from conftest import Ctx

FETCH = (
    'python3 -c "import urllib.request; '
    "print(urllib.request.urlopen('http://127.0.0.1:{port}/ok', timeout=10).read().decode())\""
)


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="reached")


async def refused(ctx: Ctx, run_id: str) -> list[tuple[str, int]]:
    """The run's ``egress_refused`` events as ``(host, port)``."""
    query = select(RunEvent.data).where(RunEvent.run_id == run_id, RunEvent.kind == "egress_refused")
    async with ctx.sessions() as s:
        return [(d["host"], d["port"]) for d in (await s.execute(query)).scalars()]


async def test_each_mode_reaches_the_run_s_sandbox_and_its_proxy(ctx: Ctx) -> None:
    app = web.Application()
    app.router.add_get("/ok", _ok)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        port = server.port
        setup = [FETCH.format(port=port)]
        environments: dict[str, dict[str, Any] | None] = {
            "listed": {"mode": "allowlist", "allow": [f"127.0.0.1:{port}"]},
            "sealed": {"mode": "none"},
            "plain": None,  # the default: the repositories' hosts (none here), so nothing
            "wide": {"mode": "open"},
        }
        for name, network in environments.items():
            body = {"name": name, "setup": setup, **({"network": network} if network else {})}
            resp = await ctx.client.post("/api/v1/environments", json=body, headers=ctx.admin)
            assert resp.status == 201, await resp.text()
        for name, mode, reached in (
            ("listed", "allowlist", True),
            ("sealed", "none", False),
            ("plain", "allowlist", False),
            ("wide", "open", True),
        ):
            created = await ctx.create({"prompt": "look", "config": {"environment_id": name}})
            run = await ctx.finished(created["run_id"])
            assert run["sandbox"] == {"kind": "bwrap", "network": mode}, name
            if reached:
                assert run["state"] == "SUCCEEDED", (name, run.get("status_message"))
                assert await refused(ctx, run["run_id"]) == []
            else:
                assert run["state"] == "FAILED", (name, run.get("status_message"))
                assert run["status_message"]["error_code"] == "environment_setup_failed"
                assert await refused(ctx, run["run_id"]) == [("127.0.0.1", port)], name
    finally:
        await server.close()
