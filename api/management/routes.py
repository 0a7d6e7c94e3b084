"""Route registration of the management API: every management module adds its own routes."""

from __future__ import annotations

from aiohttp import web

from api.management import deliveries, github, replay, secrets, validate, webhooks


def setup(app: web.Application) -> None:
    for module in (webhooks, deliveries, replay, secrets, validate, github):
        module.setup(app)
