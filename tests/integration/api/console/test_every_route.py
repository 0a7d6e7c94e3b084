"""Every console page answers without a server error (docs/console.md, "Pages"), on SQLite and PostgreSQL.

The routes are read from the app's router, so a page added later is visited too; path parameters are filled
with real ids of a seeded team (a factory, webhook, delivery, automation, schedule, notification endpoint,
runs live and finished, API keys). A route with a parameter this test cannot fill fails the test: seed it.
Visited signed out, as a member and as an admin - a template variable missing from one page's context is a
500 that no flow test would see (``GET /console/logout`` was one).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import re
from typing import Any

import builders
from aiohttp import web
from aiohttp.test_utils import TestClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import ApiKey, RunArtifact

from .support import sign_in

PARAM = re.compile(r"\{(\w+)(?::[^}]*)?\}")


async def _seed(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, team_id: str
) -> dict[str, list[str]]:
    """One of everything a console route can name; {path parameter: values to try}."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        factory = await builders.factory(s, clock, team_id, "shop", description="Ships the shop")
        info = await builders.secret(s, box, clock, team_id, "hook-secret", "token-value")
        hook = await builders.webhook(
            s, clock, team_id, factory.uid, "issues", secret_name=info.name, secret_version=info.version
        )
        await builders.delivery(
            s, team_id, hook.uid, "d-1", received_at=clock.now(), payload=b'{"action": "opened"}'
        )
        automation = await builders.automation(
            s,
            clock,
            team_id,
            factory.uid,
            "triage",
            [builders.webhook_trigger([hook.uid], {"action": "opened"})],
        )
        await builders.schedule(s, clock, team_id, "nightly", "0 3 * * *", factory_uid=factory.uid)
        await builders.notification(s, clock, team_id, factory.uid, "ops")
        await builders.environment(s, clock, team_id, "py", {"setup": ["true"]})
        queued = await builders.run(s, clock, team_id, factory_uid=factory.uid, automation_id=automation.uid)
        finished = await builders.run(
            s,
            clock,
            team_id,
            factory_uid=factory.uid,
            state="SUCCEEDED",
            started_at=clock.now(),
            finished_at=clock.now() + dt.timedelta(seconds=1),
        )
        artifact = RunArtifact(
            uid=ids.new_id(ids.ARTIFACT), run_id=finished.run_id, artifact_type="FILE",
            created_at=clock.now(), filename="r.md", filepath="r.md", mime_type="text/markdown", size_bytes=2,
            data=b"ok",
        )  # fmt: skip
        s.add(artifact)
        key_ids = list((await s.scalars(select(ApiKey.id).where(ApiKey.team_id == team_id))).all())
    return {
        "uid": [factory.uid],
        "wid": [hook.uid],
        "aid": [automation.uid],
        "run_id": [queued.run_id, finished.run_id],
        "artifact_uid": [artifact.uid, "art_missing"],
        "key_id": key_ids,
        "filename": ["console.css", "console.js"],
    }


def _console_gets(app: web.Application, seeded: dict[str, list[str]]) -> list[str]:
    """Every path a GET can reach under ``/console`` (and ``/``), parameters filled from ``seeded``."""
    paths: set[str] = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = str(info.get("path") or info.get("formatter") or info.get("prefix") or "")
        if route.method not in ("GET", "*") or not (template == "/" or template.startswith("/console")):
            continue
        if "prefix" in info:  # the static files: one path per asset
            template = template.rstrip("/") + "/{filename}"
        names = PARAM.findall(template)
        missing = [n for n in names if n not in seeded]
        assert not missing, f"{template}: seed a value for {missing} in _seed()"
        for values in itertools.product(*(seeded[n] for n in names)):
            path = template
            for name, value in zip(names, values, strict=True):
                path = PARAM.sub(lambda m, n=name, v=value: v if m.group(1) == n else m.group(0), path)
            paths.add(path)
    return sorted(paths)


async def _visit(client: TestClient[Any, Any], paths: list[str]) -> dict[str, int]:
    statuses = {}
    for path in paths:
        # A live run's event stream stays open: its status line is all this test needs.
        async with asyncio.timeout(15), client.get(path, allow_redirects=False) as resp:
            statuses[path] = resp.status
    return statuses


async def test_every_console_route_answers_without_a_server_error(
    client: TestClient[Any, Any],
    api_app: web.Application,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    team_id: str,
    make_key: Any,
) -> None:
    admin, member = await make_key("admin"), await make_key("member")
    seeded = await _seed(sessions, box, team_id)
    paths = _console_gets(api_app, seeded)
    assert "/console/logout" in paths and any("/automations/" in p for p in paths), paths
    assert len(paths) >= 12, paths  # the enumeration found the pages, not only the login form

    signed_out = await _visit(client, paths)
    assert {p: s for p, s in signed_out.items() if s >= 500} == {}
    for key in (member, admin):
        client.session.cookie_jar.clear()
        assert (await sign_in(client, key)).status == 303
        statuses = await _visit(client, paths)
        assert {p: s for p, s in statuses.items() if s >= 500} == {}, key
        # signed in, the pages are shown (not a redirect to the sign-in form or a refusal)
        assert statuses["/console/logout"] == 200
        assert all(statuses[p] == 200 for p in paths if p.startswith("/console/factories/")), statuses
        pages = [p for p in paths if p.startswith("/console/runs") and "/artifacts/" not in p]
        assert all(statuses[p] == 200 for p in pages), statuses
        # a run's file downloads from its own run only; any other pair is a 404
        files = {p: s for p, s in statuses.items() if "/artifacts/" in p}
        assert sorted(files.values()) == [200] + [404] * (len(files) - 1), files
