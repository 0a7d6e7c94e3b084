"""``/api/v1/agent/schedules`` (docs/api.md, "Schedules"). Placeholder: routes are added here."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Add the schedule routes."""
