"""Console pages (docs/console.md, "Pages"): filled in by the page's owner."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Register this module's console routes (none yet)."""
