"""Rendering console pages: the Jinja2 environment (autoescaping on), :func:`render`, and the few value
helpers every page shares (:func:`when`, :func:`pretty_json`, :func:`or_404`)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web

from api.console import times
from api.context import CLOCK
from api.errors import ResourceNotFound
from store import NotFound

HERE = Path(__file__).parent
# What the layout (base.html) reads on every page, with the value a page that says nothing gets: the
# environment is strict (a misspelt variable is an error), so the layout's own must always be defined.
LAYOUT_DEFAULTS: dict[str, Any] = {"user": None, "nav": None}
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
    # read the clock per call: an imported macro (ui.ago) sees globals, not the page's context
    env.globals["moment"] = lambda value: times.moment(value, app[CLOCK].now())  # docs/console.md, "Times"
    env.globals["duration"] = times.duration
    return env


def render(
    request: web.Request, template: str, context: dict[str, Any], *, status: int = 200
) -> web.Response:
    """``template`` with ``context`` over :data:`LAYOUT_DEFAULTS`; every value is escaped unless a template
    marks it safe (none does)."""
    context = {**LAYOUT_DEFAULTS, **context}
    return aiohttp_jinja2.render_template(template, request, context, status=status, app_key=TEMPLATES)


def when(value: dt.datetime | None, missing: str = "—") -> str:
    """A timestamp for people: ``2026-01-31 12:00:05 UTC`` (``missing`` when unset)."""
    if value is None:
        return missing
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty_json(value: object) -> str:
    """A JSON value (a payload, a configuration) as an indented, key-sorted text block."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def missing(what: str) -> str:
    """The text of a 404 page for ``what`` (a run, an automation): it may exist in another team."""
    return f"Not found: {what} does not exist (or belongs to another team)."


@contextmanager
def or_404(text: str) -> Iterator[None]:
    """Inside the block, a missing (or another team's) resource is the console's 404 page with ``text``."""
    try:
        yield
    except (ResourceNotFound, NotFound):
        raise web.HTTPNotFound(text=text) from None


__all__ = ["TEMPLATES", "or_404", "pretty_json", "render", "setup_templates", "when"]
