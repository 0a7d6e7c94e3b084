"""Notification endpoints, messages and attempts over the management API (docs/notifications.md)."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Register the notification routes (none yet)."""
