"""``GET /api/v1/agent`` and ``GET /api/v1/agent/environments``. Placeholder: routes are added here."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Add the routes."""
