"""URL hygiene shared by every route: a NUL character in the path or the query is refused up front.

No route means anything by U+0000, and PostgreSQL's text columns cannot hold it: left alone, a ``%00``
in a run ID or a ``q=`` filter reaches a query and fails there as a 500 (found by the API fuzzer,
docs/api.md, "Fuzzing"). Refusing it here answers 400 for every route at once.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from api.errors import BadRequest


@web.middleware
async def refuse_nul(request: web.Request, handler: Handler) -> web.StreamResponse:
    if "\x00" in request.path or any("\x00" in k or "\x00" in v for k, v in request.query.items()):
        raise BadRequest("the URL holds a NUL character (%00)")
    return await handler(request)
