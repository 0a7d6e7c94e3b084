"""``POST /api/v1/factory-files/validate``: the full online validation of a factory's files, for CI.

The checks live in ``reconciler`` and ``api`` never imports it (docs/architecture.md), so the composition
root puts an async callable under :data:`VALIDATOR`; it gets a session, the caller's team and the files, and
returns the same JSON report as ``factoryctl validate --server --format json``. Without one the
endpoint answers 501 (the route always exists: ``create_app`` adds routes before the caller can set keys).

Files arrive either as ``multipart/form-data`` (each part's field name is the file's path inside the
factory, e.g. ``-F webhooks/github.yaml=@webhooks/github.yaml``) or as a JSON object mapping path to
content, optionally wrapped as ``{"files": {...}}``. Paths are relative POSIX paths; nothing is written
outside a temporary directory the validator owns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import sessions
from api.errors import BadRequest, FeatureNotAvailable, PayloadTooLarge
from api.http.bodies import fail_on, field_error, read_json_object
from api.http.paths import API_V1

Validator = Callable[[AsyncSession, str, dict[str, bytes]], Awaitable[dict[str, Any]]]
VALIDATOR: web.AppKey[Validator] = web.AppKey("factory_files_validator")

MAX_FILES = 1000
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


async def _json_files(request: web.Request) -> dict[str, bytes]:
    """Files from a JSON body: ``{path: content}``, or that mapping wrapped as ``{"files": {...}}``."""
    body = await read_json_object(request, max_bytes=MAX_TOTAL_BYTES)
    inner = body.get("files")
    mapping = inner if set(body) == {"files"} and isinstance(inner, dict) else body
    errors = [
        field_error(f"files.{k}", "must be the file's content as a string")
        for k, v in mapping.items()
        if not isinstance(v, str)
    ]
    fail_on(errors)
    return {_clean(str(k)): str(v).encode("utf-8") for k, v in mapping.items()}


async def validate_files(request: web.Request) -> web.Response:
    """``POST /factory-files/validate`` (member): 200 with the report, whether the files are valid or not."""
    who = await require(request, "member")
    validator = request.app.get(VALIDATOR)
    if validator is None:
        raise FeatureNotAvailable("this server was started without definition validation")
    if request.content_type.startswith("multipart/"):
        files = await _multipart_files(request)
    else:
        files = await _json_files(request)
    check_files(files)
    async with sessions(request)() as session:
        report = await validator(session, who.team_id, files)
    return web.json_response(report)


def setup(app: web.Application) -> None:
    app.router.add_post(API_V1 + "/factory-files/validate", validate_files)
