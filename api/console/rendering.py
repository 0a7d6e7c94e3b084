"""Rendering console pages: the Jinja2 environment (autoescaping on) and :func:`render`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web

HERE = Path(__file__).parent
TEMPLATES = web.AppKey("console_templates", jinja2.Environment)


def setup_templates(app: web.Application) -> jinja2.Environment:
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        app_key=TEMPLATES,
        undefined=jinja2.StrictUndefined,
    )
    env.globals["condition"] = lambda conds, kind: next((c for c in conds if c.get("type") == kind), None)
    env.globals["static_url"] = lambda name: str(app.router["console_static"].url_for(filename=name))
    return env


def render(
    request: web.Request, template: str, context: dict[str, Any], *, status: int = 200
) -> web.Response:
    """``template`` with ``context``; every value is escaped unless a template marks it safe (none does)."""
    return aiohttp_jinja2.render_template(template, request, context, status=status, app_key=TEMPLATES)


__all__ = ["TEMPLATES", "render", "setup_templates"]
