"""The official Python SDK (``oz-agent-sdk``), unchanged and with strict response validation, creates a run
with ``config={"harness": {"type": "claude"}}`` and parses the run fields an agent preset fills (issue 26):
``session_id``, ``conversation_id``, ``session_link``, ``request_usage``, ``run_time``,
``is_sandbox_running``, ``artifacts`` (docs/api.md, "Agent session and usage"). A worker reports through
the real worker protocol in between. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import builders
from oz_agent_sdk import AsyncOzAPI
from oz_agent_sdk.types.agent import RunItem
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, create_app
from api.claims.protocol import Holder, WorkerProtocol
from api.context import ServerSettings
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import session_factory


async def test_strict_sdk_parses_a_preset_run(
    aiohttp_server: Any, engine: AsyncEngine, box: SecretBox, tmp_path: Path
) -> None:
    clock = SystemClock()
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, clock, team.id, "member", name="sdk")
    settings = ServerSettings(data_dir=tmp_path / "data", public_url="https://factory.example.com")
    app = create_app(settings, engine, box, route_modules=ROUTE_MODULES)
    server = await aiohttp_server(app)
    protocol = WorkerProtocol.of(app)
    async with AsyncOzAPI(
        api_key=key, base_url=str(server.make_url("/api/v1")), max_retries=0, _strict_response_validation=True
    ) as client:
        created = await client.agent.run(prompt="fix the flaky test", config={"harness": {"type": "claude"}})
        queued = await client.agent.runs.retrieve(created.run_id)
        assert isinstance(queued, RunItem)
        assert queued.request_usage is None and queued.run_time is None and queued.is_sandbox_running is False
        assert queued.agent_config is not None and queued.agent_config.harness is not None
        assert queued.agent_config.harness.type == "claude"

        answer = await protocol.claim(("",), "svc:1", harnesses=("echo", "claude"))
        assert answer is not None and answer["run"]["run_id"] == created.run_id
        holder = Holder("svc:1", answer["lease_token"])
        await protocol.heartbeat(
            created.run_id, holder, start=True, sandbox={"kind": "bwrap", "network": "none"}
        )
        await protocol.append_events(
            created.run_id,
            holder,
            [
                {"kind": "session", "data": {"session_id": "0b6f5c9e-claude"}},
                {"kind": "message", "data": {"role": "assistant", "text": "done"}},
                {"kind": "usage", "data": {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}},
            ],
        )
        running = await client.agent.runs.retrieve(created.run_id)
        assert running.is_sandbox_running is True and running.run_time is not None
        await protocol.report(created.run_id, holder, "SUCCEEDED", {"message": "done"})

        run = await client.agent.runs.retrieve(created.run_id)
        assert (run.session_id, run.conversation_id) == ("0b6f5c9e-claude", "0b6f5c9e-claude")
        assert run.session_link == f"https://factory.example.com/console/runs/{created.run_id}"
        assert run.request_usage is not None
        assert run.request_usage.total_tokens == 1500
        assert run.request_usage.inference_cost_usd == 0.0123 == run.request_usage.inference_cost
        assert run.run_time is not None and run.run_time.startswith("PT") and run.run_time.endswith("S")
        assert run.is_sandbox_running is False and run.artifacts == []
        listed = await client.agent.runs.list()
        assert [r.run_id for r in listed.runs] == [created.run_id]
        assert listed.runs[0].request_usage == run.request_usage
