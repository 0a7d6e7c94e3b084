"""A run's artifacts from its worker (docs/agents.md, "Artifacts"): files and declared links.

``POST /api/v1/workers/runs/{id}/artifacts`` is ``multipart/form-data``: first a ``meta`` part, JSON
``{worker_id?, lease_token, links: [{type, url, branch | reference_type?, title?}], files: [{filepath,
mime_type}]}``, then one ``file`` part per entry of ``files``, in order. Answers ``{run_id, accepted}``.
Service-hosted workers call :func:`add_artifacts` in-process. Either way the rules are the same and are
checked here, whatever the worker already checked: only the lease holder adds; a URL is ``http(s)`` with a
host; a file path is relative and plain; per run at most :data:`MAX_FILES` files of
:data:`MAX_FILE_BYTES` each and :data:`MAX_TOTAL_BYTES` in all, and :data:`MAX_LINKS` links (``413``
past a cap). A file uploaded again under the same path replaces the earlier one (a retried attempt), a
link declared again is kept once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from sqlalchemy import delete, select

from api import NotAuthorized, PayloadTooLarge, ValidationFailed
from api.auth import principal, require_worker_host
from api.claims import bodies
from api.claims.protocol import Holder, WorkerProtocol
from api.claims.queue import locked_run, require_lease
from api.context import sessions
from api.http.bodies import field_error
from api.http.jsonlimits import InvalidJson, loads_limited
from api.http.paths import API_V1
from store import NotFound, ids
from store.models import Run, RunArtifact

FILE: Final = "FILE"
PULL_REQUEST: Final = "PULL_REQUEST"
EXTERNAL_REFERENCE: Final = "EXTERNAL_REFERENCE"
MAX_FILES: Final = 50
MAX_FILE_BYTES: Final = 10 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 50 * 1024 * 1024
MAX_LINKS: Final = 50
MAX_META_BYTES: Final = 64 * 1024
MAX_URL: Final = 2048
MAX_TEXT: Final = 300
MAX_PATH: Final = 500
DEFAULT_REFERENCE_TYPE: Final = "link"
DEFAULT_MIME: Final = "application/octet-stream"
_MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True)
class NewFile:
    filepath: str
    mime_type: str
    data: bytes


@dataclass(frozen=True)
class NewLink:
    artifact_type: str
    url: str
    branch: str | None = None
    reference_type: str | None = None
    title: str | None = None


def _refuse(where: str, why: str) -> Any:
    raise ValidationFailed(f"{where} {why}", errors=[field_error(where, why)])


def valid_url(value: object) -> bool:
    """An absolute ``http``/``https`` URL with a host and no whitespace or control characters: what the
    console may show as a link."""
    if not isinstance(value, str) or not value or len(value) > MAX_URL:
        return False
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return False


def _text(value: Any, where: str, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT or _UNSAFE.search(value):
        _refuse(where, f"must be a non-empty string of at most {MAX_TEXT} characters")
    return str(value)


def parse_links(raw: Any, *, field: str = "links") -> list[NewLink]:
    """Declared links, each checked; 422 naming the first bad one."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_LINKS:
        _refuse(field, f"must be a list of at most {MAX_LINKS} objects")
    out = []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping) or item.get("type") not in (PULL_REQUEST, EXTERNAL_REFERENCE):
            _refuse(f"{where}.type", f"must be {PULL_REQUEST} or {EXTERNAL_REFERENCE}")
        if not valid_url(item.get("url")):
            _refuse(f"{where}.url", "must be an http:// or https:// URL with a host")
        if item["type"] == PULL_REQUEST:
            branch = _text(item.get("branch"), f"{where}.branch", required=True)
            out.append(NewLink(PULL_REQUEST, item["url"], branch=branch))
        else:
            kind = _text(item.get("reference_type"), f"{where}.reference_type", required=False)
            title = _text(item.get("title"), f"{where}.title", required=False)
            out.append(NewLink(EXTERNAL_REFERENCE, item["url"], reference_type=kind, title=title))
    return out


def parse_file_meta(raw: Any, where: str) -> tuple[str, str]:
    """``(filepath, mime_type)`` of one ``files`` entry: a relative ``/``-separated path without ``.``/``..``
    segments; a MIME type that is not ``type/subtype`` becomes ``application/octet-stream``."""
    if not isinstance(raw, Mapping):
        _refuse(where, "must be an object {filepath, mime_type}")
    path = raw.get("filepath")
    if not isinstance(path, str) or not path or len(path) > MAX_PATH or _UNSAFE.search(path):
        _refuse(f"{where}.filepath", f"must be a relative path of at most {MAX_PATH} characters")
    segments = path.split("/")
    if any(s in ("", ".", "..") for s in segments):
        _refuse(f"{where}.filepath", "must be a relative path without empty, '.' or '..' segments")
    mime = raw.get("mime_type")
    return path, (mime if isinstance(mime, str) and _MIME.match(mime) else DEFAULT_MIME)


async def add_artifacts(
    protocol: WorkerProtocol, run_id: str, holder: Holder, files: Sequence[NewFile], links: Sequence[NewLink]
) -> int:
    """Store the run's artifacts (lease holder only, within the run's caps); how many rows were added."""
    async with protocol.sessions() as session, session.begin():
        run = await locked_run(session, run_id, holder.team_id)
        require_lease(run, holder.owner, holder.lease_token)
        rows = (
            await session.execute(
                select(
                    RunArtifact.artifact_type, RunArtifact.filepath, RunArtifact.url, RunArtifact.size_bytes
                ).where(RunArtifact.run_id == run_id)
            )
        ).all()
        paths = {f.filepath for f in files}
        kept_files = [r for r in rows if r.artifact_type == FILE and r.filepath not in paths]
        links_seen = {(r.artifact_type, r.url) for r in rows if r.artifact_type != FILE}
        new_links = []
        for link in links:
            if (link.artifact_type, link.url) not in links_seen:
                links_seen.add((link.artifact_type, link.url))
                new_links.append(link)
        unique = {f.filepath: f for f in files}
        if len(kept_files) + len(unique) > MAX_FILES:
            raise PayloadTooLarge(f"a run keeps at most {MAX_FILES} files")
        total = sum(int(r.size_bytes or 0) for r in kept_files) + sum(len(f.data) for f in unique.values())
        if total > MAX_TOTAL_BYTES:
            raise PayloadTooLarge(f"a run's files may take at most {MAX_TOTAL_BYTES} bytes")
        if len(links_seen) > MAX_LINKS:
            raise PayloadTooLarge(f"a run keeps at most {MAX_LINKS} declared links")
        if paths:
            await session.execute(
                delete(RunArtifact).where(
                    RunArtifact.run_id == run_id,
                    RunArtifact.artifact_type == FILE,
                    RunArtifact.filepath.in_(sorted(paths)),
                )
            )
        now = protocol.clock.now()
        for f in unique.values():
            session.add(
                RunArtifact(
                    uid=ids.new_id(ids.ARTIFACT),
                    run_id=run_id,
                    artifact_type=FILE,
                    created_at=now,
                    filename=f.filepath.rsplit("/", 1)[-1][:255],
                    filepath=f.filepath,
                    mime_type=f.mime_type,
                    size_bytes=len(f.data),
                    data=f.data,
                )
            )
        for link in new_links:
            session.add(
                RunArtifact(
                    uid=ids.new_id(ids.ARTIFACT),
                    run_id=run_id,
                    artifact_type=link.artifact_type,
                    created_at=now,
                    url=link.url,
                    branch=link.branch,
                    reference_type=link.reference_type,
                    title=link.title,
                )
            )
    return len(unique) + len(new_links)


async def _authorize(request: web.Request, run_id: str) -> Any:
    """As every worker route: a worker or admin key, the run in its team, a host it acts for."""
    who = await principal(request)
    if who.role not in ("worker", "admin"):
        raise NotAuthorized(f"the worker API needs a worker or admin key; this key has {who.role}")
    async with sessions(request)() as session:
        host = await session.scalar(
            select(Run.worker_host).where(Run.run_id == run_id, Run.team_id == who.team_id)
        )
    if host is None:
        raise NotFound(f"run {run_id} does not exist")
    return await require_worker_host(request, host)


async def _read_part(part: Any, limit: int, what: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await part.read_chunk(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"{what} exceeds {limit} bytes")
        chunks.append(chunk)


async def upload_route(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    who = await _authorize(request, run_id)
    if request.content_type != "multipart/form-data":
        raise ValidationFailed("the body must be multipart/form-data: a meta part, then the files")
    try:
        holder, files, links = await _read_upload(request, who)
    except (ValueError, UnicodeError, HttpProcessingError) as exc:  # a malformed multipart body
        raise ValidationFailed(f"the multipart body cannot be read: {exc}"[:300], errors=[]) from None
    count = await add_artifacts(WorkerProtocol.of(request.app), run_id, holder, files, links)
    return web.json_response({"run_id": run_id, "accepted": count})


async def _read_upload(request: web.Request, who: Any) -> tuple[Holder, list[NewFile], list[NewLink]]:
    """The meta part (holder, links, file entries) and the file parts, in order."""
    reader = await request.multipart()
    meta_part = await reader.next()
    if meta_part is None or getattr(meta_part, "name", None) != "meta":
        _refuse("meta", "must be the first part")
    try:  # the project's one strict JSON reader: no unpaired surrogate or NUL reaches the database
        meta = loads_limited(await _read_part(meta_part, MAX_META_BYTES, "the meta part"))
    except InvalidJson:
        meta = None
    if not isinstance(meta, dict):
        _refuse("meta", "must be a JSON object")
    holder = bodies.holder(who, meta)
    links = parse_links(meta.get("links"))
    entries = meta.get("files") or []
    if not isinstance(entries, list) or len(entries) > MAX_FILES:
        _refuse("files", f"must be a list of at most {MAX_FILES} objects")
    files = []
    for i, entry in enumerate(entries):
        path, mime = parse_file_meta(entry, f"files[{i}]")
        part = await reader.next()
        if part is None or getattr(part, "name", None) != "file":
            _refuse(f"files[{i}]", "has no file part")
        files.append(NewFile(path, mime, await _read_part(part, MAX_FILE_BYTES, f"file {path!r}")))
    if await reader.next() is not None:
        _refuse("files", "lists fewer files than the body holds")
    return holder, files, links


def setup(app: web.Application) -> None:
    app.router.add_post(f"{API_V1}/workers/runs/{{run_id}}/artifacts", upload_route)


__all__ = ["NewFile", "NewLink", "add_artifacts", "parse_file_meta", "parse_links", "setup", "valid_url"]
