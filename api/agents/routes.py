"""``GET /api/v1/agent`` (skills, :mod:`api.agents.catalog`) and ``GET /api/v1/agent/environments``
(:mod:`api.agents.environments`): the official SDKs' read surface (docs/api.md, "Agents (skills)" and
"Environments for the SDKs"). Both need ``member``; worker keys get 403.
"""

from __future__ import annotations

from aiohttp import web

from api.agents.catalog import list_agents
from api.agents.environments import list_environments
from api.http.paths import API_V1
from api.runs.prepare import install_resolver


def setup(app: web.Application) -> None:
    """Add the routes; the skill resolver is the run API's (installed here too when runs are not routed)."""
    install_resolver(app)
    app.router.add_get(f"{API_V1}/agent", list_agents)
    app.router.add_get(f"{API_V1}/agent/environments", list_environments)
