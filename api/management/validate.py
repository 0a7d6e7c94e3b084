"""``POST /api/v1/factory-files/validate``: check a factory's files; the product's request and answer.

The body is ``{"files": [{"path": "factory.yaml", "content": "..."}]}`` (the older ``{path: content}``
map, bare or under ``"files"``, and ``multipart/form-data`` with the path as each part's field name are
still accepted). The answer is ``{valid, schema_version, diagnostics, deferred_resolutions,
state_dependent_checks_not_run, validation_scope}`` (docs/api.md, "Factory files").

Like the product, the parser and state-independent tiers need no API key; anonymous calls are limited per
client address (:data:`ANONYMOUS_LIMIT` a minute, the API's one rate limiter, :mod:`api.ratelimit`) so the
endpoint is no free CPU sink. A request with a member or admin key also gets the state-dependent tier run
against its team's store (secrets, webhook UIDs, names taken) - a factoryctl extension; a wrong key is a
401, never a silent downgrade.

The checks live in ``reconciler`` and ``api`` never imports it (docs/architecture.md), so the composition
root puts an async callable under :data:`VALIDATOR`: it gets the files and, for an authenticated caller, an
:class:`OnlineScope`, and returns the answer. Without one the endpoint answers 501 (the route always
exists: ``create_app`` adds routes before the caller can set keys). Paths are relative POSIX paths;
nothing is written outside a temporary directory the validator owns, and no symlink is ever followed.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import bearer_token, require
from api.auth_failures import AUTH_FAILURES, client_address
from api.context import CLOCK, sessions
from api.errors import BadRequest, FeatureNotAvailable, PayloadTooLarge, RateLimited
from api.http.bodies import fail_on, field_error, read_json_object
from api.http.paths import API_V1
from api.management import factory_schemas


@dataclass(frozen=True)
class OnlineScope:
    """Where the state-dependent checks look: the caller's team, through the request's session."""

    session: AsyncSession
    team_id: str


Validator = Callable[[dict[str, bytes], OnlineScope | None], Awaitable[dict[str, Any]]]
VALIDATOR: web.AppKey[Validator] = web.AppKey("factory_files_validator")
# Anonymous validations per client address and minute; an app may set another (tests do).
ANONYMOUS_LIMIT = 60
ANONYMOUS_LIMIT_KEY: web.AppKey[int] = web.AppKey("factory_files_anonymous_limit")
RATE_KEY_PREFIX = "ff-validate:"

MAX_FILES = 1000
MAX_FILE_BYTES = 2 * 1024 * 1024  # the product's limit per file (UTF-8 content)
MAX_TOTAL_BYTES = 8 * 1024 * 1024
MAX_PATH = 1000  # UTF-8 bytes: with the temporary root it stays far below PATH_MAX (4096)
MAX_SEGMENT = 255  # UTF-8 bytes: NAME_MAX of common file systems


def path_problem(path: str) -> str | None:
    """Why ``path`` is not an acceptable relative file path, or None.

    Every limit the file system would enforce when the validator writes the file is checked here, so a
    name it cannot create is a 422 naming the file instead of an ``OSError`` (docs/api.md, "Other
    endpoints").
    """
    parts = path.split("/")
    if not path or len(path.encode("utf-8", "surrogatepass")) > MAX_PATH:
        return f"a path must have 1-{MAX_PATH} bytes"
    if path.startswith("/") or "\\" in path or "\x00" in path or not path.isprintable():
        return "must be a relative POSIX path without backslashes or control characters"
    if any(p in ("", ".", "..") for p in parts):
        return "must not contain empty, '.' or '..' segments"
    if any(len(p.encode("utf-8")) > MAX_SEGMENT for p in parts):
        return f"a file or directory name must be at most {MAX_SEGMENT} bytes"
    return None


def _clean(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


def _clashes(paths: list[str]) -> dict[str, str]:
    """Files that are also a directory of another file (``a`` and ``a/b.yaml``): file -> one such path.

    No tree can hold both, so they are refused before anything is written."""
    files = set(paths)
    found: dict[str, str] = {}
    for path in sorted(paths):
        parts = path.split("/")
        for end in range(1, len(parts)):
            directory = "/".join(parts[:end])
            if directory in files:
                found.setdefault(directory, path)
    return found


def check_files(files: dict[str, bytes]) -> None:
    """A 422 listing every unusable path (shape, length, a file/directory clash), or no file at all."""
    errors = [field_error(f"files.{p}", why) for p in files if (why := path_problem(p))]
    if not errors:
        errors += [
            field_error(f"files.{file}", f"is a file, but {inside!r} needs it to be a directory")
            for file, inside in _clashes(list(files)).items()
        ]
    if not files:
        errors.append(field_error("files", "no files given: send at least factory.yaml"))
    if len(files) > MAX_FILES:
        errors.append(field_error("files", f"at most {MAX_FILES} files"))
    fail_on(errors)


async def _multipart_files(request: web.Request) -> dict[str, bytes]:
    """Files from ``multipart/form-data``: each part's field name is the path; 413 over the total.

    A body aiohttp cannot split into parts (no boundary, a malformed part header) is the caller's
    mistake: 400, never 500.
    """
    try:
        return await _read_parts(request)
    except (ValueError, HttpProcessingError) as exc:
        raise BadRequest(f"malformed multipart/form-data body: {type(exc).__name__}") from None


async def _read_parts(request: web.Request) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    total = 0
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue  # nested multipart: not a file
        chunks = []
        while chunk := await part.read_chunk():
            total += len(chunk)
            if total > MAX_TOTAL_BYTES:
                raise PayloadTooLarge(f"files exceed {MAX_TOTAL_BYTES} bytes in total")
            chunks.append(chunk)
        files[_clean(part.name or part.filename or "")] = bytes(part.decode(b"".join(chunks)))
    return files


def _listed(entries: list[Any]) -> dict[str, bytes]:
    """The product's ``[{"path": ..., "content": ...}]``; a 422 names every malformed entry."""
    errors = []
    files: dict[str, bytes] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            errors.append(field_error(f"files[{i}].path", "must be the file's path as a string"))
        elif not isinstance(entry.get("content"), str):
            errors.append(field_error(f"files[{i}].content", "must be the file's UTF-8 content as a string"))
        elif (path := _clean(entry["path"])) in files:
            errors.append(field_error(f"files[{i}].path", f"{path!r} is given twice"))
        elif (data := _content(entry)) is None:
            errors.append(field_error(f"files[{i}].content", "is not valid base64"))
        else:
            files[path] = data
    fail_on(errors)
    return files


def _content(entry: dict[str, Any]) -> bytes | None:
    """An entry's bytes. ``"encoding": "base64"`` is a factoryctl extension: a file that is not UTF-8 is
    sent as it is, so the loader reports it exactly as a local run does; None when it does not decode."""
    text: str = entry["content"]
    if entry.get("encoding") != "base64":
        return text.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


async def _json_files(request: web.Request) -> dict[str, bytes]:
    """Files from a JSON body: ``{"files": [{path, content}]}``, or the older ``{path: content}`` map,
    bare or under ``"files"``."""
    body = await read_json_object(request, max_bytes=MAX_TOTAL_BYTES)
    inner = body.get("files")
    if set(body) == {"files"} and isinstance(inner, list):
        return _listed(inner)
    mapping = inner if set(body) == {"files"} and isinstance(inner, dict) else body
    errors = [
        field_error(f"files.{k}", "must be the file's content as a string")
        for k, v in mapping.items()
        if not isinstance(v, str)
    ]
    fail_on(errors)
    return {_clean(str(k)): str(v).encode("utf-8", "surrogatepass") for k, v in mapping.items()}


def _check_sizes(files: dict[str, bytes]) -> None:
    """A 413 naming the first file over :data:`MAX_FILE_BYTES` (the total is checked while reading)."""
    for path, data in files.items():
        if len(data) > MAX_FILE_BYTES:
            raise PayloadTooLarge(f"{path!r} has {len(data)} bytes; a file may have at most {MAX_FILE_BYTES}")


async def _spend_anonymous(request: web.Request) -> None:
    """Count one anonymous validation of the client address; a 429 with ``Retry-After`` past the limit."""
    budget = request.app[AUTH_FAILURES]
    address = client_address(request.remote, request.headers.getall("X-Forwarded-For", []), budget.trusted)
    limit = request.app.get(ANONYMOUS_LIMIT_KEY, ANONYMOUS_LIMIT)
    decision = await budget.limiter.consume(
        RATE_KEY_PREFIX + address, limit, request.app[CLOCK].now().timestamp()
    )
    if not decision.allowed:
        raise RateLimited(
            f"at most {limit} unauthenticated validations per minute from one address;"
            " retry after the Retry-After delay, or send an API key",
            headers={"Retry-After": str(decision.retry_after or 1)},
        )


async def validate_files(request: web.Request) -> web.Response:
    """``POST /factory-files/validate`` (public; a member key adds the state-dependent tier): 200 with the
    report, whether the files are valid or not."""
    who = await require(request, "member") if bearer_token(request) is not None else None
    if who is None:
        await _spend_anonymous(request)
    validator = request.app.get(VALIDATOR)
    if validator is None:
        raise FeatureNotAvailable("this server was started without definition validation")
    if request.content_type.startswith("multipart/"):
        files = await _multipart_files(request)
    else:
        files = await _json_files(request)
    check_files(files)
    _check_sizes(files)
    if who is None:
        return web.json_response(await validator(files, None))
    async with sessions(request)() as session:
        report = await validator(files, OnlineScope(session, who.team_id))
    return web.json_response(report)


def setup(app: web.Application) -> None:
    """The factory-files family: this endpoint and the schema documents (:mod:`.factory_schemas`)."""
    app.router.add_post(API_V1 + "/factory-files/validate", validate_files)
    factory_schemas.setup(app)
