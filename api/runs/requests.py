"""Parsing of run API input: ``RunAgentRequest`` bodies and ``GET /agent/runs`` query strings.

Pure functions (no I/O): bodies that break a rule raise :class:`api.ValidationFailed` (422) listing
every offending field; an attachment over the size limit raises :class:`api.PayloadTooLarge` (413);
bad query parameters raise :class:`api.BadRequest` (400). Unknown body fields are ignored. Reading
the body, ``limit`` and ``cursor`` is shared plumbing (:mod:`api.http`), done by the handlers.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multidict import MultiMapping

from api.errors import BadRequest, PayloadTooLarge, ValidationFailed
from api.http.bodies import field_error
from api.runs.config import validate_config, validate_skill_spec
from api.runs.new_run import NewAttachment
from api.runs.records import RunFilters
from api.runs.skill_list import primary_skill
from api.runs.states import RunState
from store.rules.vocabulary import RUN_SOURCES

SORT_BY = ("updated_at", "created_at", "title")
SORT_ORDER = ("desc", "asc")
MAX_PROMPT = 200_000
MAX_TITLE = 500
MAX_METADATA_KEYS = 20
MAX_METADATA_VALUE_BYTES = 256
MAX_ATTACHMENTS = 5
_METADATA_KEY = re.compile(r"^[a-zA-Z0-9._-]{1,64}$")
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_STRING_FIELDS = (
    "prompt",
    "title",
    "skill",
    "conversation_id",
    "parent_run_id",
    "agent_identity_uid",
    "mode",
)
_ID_MAX = 100


@dataclass(frozen=True)
class RunRequest:
    """A validated RunAgentRequest; ``config`` is the request layer (not yet resolved)."""

    prompt: str
    title: str | None
    config: dict[str, Any]
    metadata: dict[str, str]
    attachments: list[NewAttachment]
    conversation_id: str | None
    parent_run_id: str | None
    skill_field: str = "config.skill_spec"  # where the skill came from, for 422s at resolution


def parse_run_request(body: Mapping[str, Any], *, max_attachment_bytes: int) -> RunRequest:
    errors: list[dict[str, Any]] = []
    for name in _STRING_FIELDS:
        if body.get(name) is not None and not isinstance(body[name], str):
            errors.append(field_error(name, "must be a string"))
    if body.get("interactive") is not None and not isinstance(body["interactive"], bool):
        errors.append(field_error("interactive", "must be a boolean"))
    for name in ("conversation_id", "parent_run_id", "agent_identity_uid", "mode"):
        if isinstance(body.get(name), str) and len(body[name]) > _ID_MAX:
            errors.append(field_error(name, f"must be at most {_ID_MAX} characters"))
    errors += validate_config(body.get("config"))
    config = dict(body["config"]) if isinstance(body.get("config"), Mapping) else {}
    skill = body.get("skill")
    if isinstance(skill, str):
        if not validate_skill_spec(skill):
            errors.append(
                field_error("skill", "must be 'owner/repo:skill-name' or 'owner/repo:path/to/SKILL.md'")
            )
        elif config.get("skill_spec") is not None:
            errors.append(field_error("skill", "give either skill or config.skill_spec, not both"))
        elif config.get("skills") is not None:
            errors.append(field_error("skill", "give either skill or config.skills, not both"))
        else:
            config["skill_spec"] = skill
    prompt = body.get("prompt") if isinstance(body.get("prompt"), str) else None
    if not (prompt and prompt.strip()) and not primary_skill(config) and "prompt" not in _fields(errors):
        errors.append(field_error("prompt", "is required unless a skill is given"))
    if prompt is not None and len(prompt) > MAX_PROMPT:
        errors.append(field_error("prompt", f"must be at most {MAX_PROMPT} characters"))
    title = body.get("title") if isinstance(body.get("title"), str) else None
    if title is not None and len(title) > MAX_TITLE:
        errors.append(field_error("title", f"must be at most {MAX_TITLE} characters"))
    errors += validate_metadata(body.get("metadata"))
    attachments, attachment_errors = parse_attachments(
        body.get("attachments"), max_bytes=max_attachment_bytes
    )
    errors += attachment_errors
    if errors:
        raise ValidationFailed(_summary(errors), errors=errors)
    return RunRequest(
        prompt=prompt or "",
        title=title,
        config=config,
        metadata=dict(body.get("metadata") or {}),
        attachments=attachments,
        conversation_id=body.get("conversation_id"),
        parent_run_id=body.get("parent_run_id"),
        skill_field="skill" if isinstance(skill, str) else "config.skill_spec",
    )


def _fields(errors: list[dict[str, Any]]) -> set[str]:
    return {str(e["field"]) for e in errors}


def _summary(errors: list[dict[str, Any]]) -> str:
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first['field']}: {first['message']}{more}"


def validate_metadata(value: Any, *, field: str = "metadata") -> list[dict[str, Any]]:
    """≤20 keys matching ``[a-zA-Z0-9._-]{1,64}``, each mapping to a string of ≤256 UTF-8 bytes."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [field_error(field, "must be an object of string values")]
    errors: list[dict[str, Any]] = []
    if len(value) > MAX_METADATA_KEYS:
        errors.append(field_error(field, f"at most {MAX_METADATA_KEYS} keys"))
    for key, item in value.items():
        if not _METADATA_KEY.match(key):
            errors.append(field_error(f"{field}.{key}", "keys must match [a-zA-Z0-9._-]{1,64}"))
        elif not isinstance(item, str):
            errors.append(field_error(f"{field}.{key}", "must be a string"))
        elif len(item.encode("utf-8")) > MAX_METADATA_VALUE_BYTES:
            errors.append(field_error(f"{field}.{key}", f"must be at most {MAX_METADATA_VALUE_BYTES} bytes"))
    return errors


def parse_attachments(value: Any, *, max_bytes: int) -> tuple[list[NewAttachment], list[dict[str, Any]]]:
    """Decode ≤5 ``{file_name, mime_type?, data}``; raises PayloadTooLarge for an oversize file."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [field_error("attachments", "must be an array")]
    if len(value) > MAX_ATTACHMENTS:
        return [], [field_error("attachments", f"at most {MAX_ATTACHMENTS} attachments")]
    out: list[NewAttachment] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        where = f"attachments[{i}]"
        if not isinstance(item, Mapping):
            errors.append(field_error(where, "must be an object {file_name, mime_type, data}"))
            continue
        name, mime, data = (
            item.get("file_name"),
            item.get("mime_type", "application/octet-stream"),
            item.get("data"),
        )
        if not isinstance(name, str) or not _safe_file_name(name):
            errors.append(
                field_error(f"{where}.file_name", "must be a plain file name (no path), 1-255 characters")
            )
        elif name in seen:
            errors.append(field_error(f"{where}.file_name", f"duplicate file name {name!r}"))
        else:
            seen.add(name)
        if not isinstance(mime, str) or not 0 < len(mime) <= 200:
            errors.append(field_error(f"{where}.mime_type", "must be a string of 1-200 characters"))
        if not isinstance(data, str):
            errors.append(field_error(f"{where}.data", "must be a base64 string"))
            continue
        stripped = data.strip()
        decoded_len = len(stripped) * 3 // 4 - stripped[-2:].count("=")
        if decoded_len > max_bytes:
            raise PayloadTooLarge(f"{where} ({name}) is larger than {max_bytes} bytes")
        try:
            raw = base64.b64decode(stripped, validate=True)
        except (binascii.Error, ValueError):
            errors.append(field_error(f"{where}.data", "is not valid base64"))
            continue
        if isinstance(name, str) and isinstance(mime, str):
            out.append(NewAttachment(file_name=name, mime_type=mime, data=raw))
    return out, errors


def _safe_file_name(name: str) -> bool:
    return (
        0 < len(name) <= 255
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and name.isprintable()
    )


def parse_rfc3339(value: str, *, field: str) -> dt.datetime:
    """An RFC 3339 timestamp with offset; a space before the offset (an unescaped ``+``) is accepted."""
    text = value.strip()
    if len(text) > 6 and text[-6] == " " and text[-5:-3].isdigit():
        text = text[:-6] + "+" + text[-5:]
    match = _RFC3339.match(text)
    if not match:
        raise BadRequest(f"{field} must be an RFC 3339 timestamp such as 2026-01-31T12:00:00Z")
    date, time, fraction, offset = match.groups()
    fraction = (fraction or "")[:7]
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        return dt.datetime.fromisoformat(f"{date}T{time}{fraction}{offset}").astimezone(dt.UTC)
    except (ValueError, OverflowError):  # OverflowError: in UTC the instant falls before year 1 or after 9999
        raise BadRequest(f"{field} is not a valid date and time") from None


@dataclass(frozen=True)
class ListQuery:
    filters: RunFilters
    sort_by: str
    sort_order: str


def parse_list_query(query: MultiMapping[str]) -> ListQuery:
    """The filters and sort of ``GET /agent/runs`` (``limit`` and ``cursor`` are the caller's)."""
    states: list[str] = []
    for raw in query.getall("state", []):
        for part in raw.split(","):
            part = part.strip().upper()
            if part not in RunState.__members__:
                raise BadRequest(f"state {part!r} is not one of {', '.join(RunState.__members__)}")
            if part not in states:
                states.append(part)
    sort_by = query.get("sort_by", "updated_at")
    if sort_by not in SORT_BY:
        raise BadRequest(f"sort_by must be one of {', '.join(SORT_BY)}")
    sort_order = query.get("sort_order", "desc").lower()
    if sort_order not in SORT_ORDER:
        raise BadRequest("sort_order must be desc or asc")
    name, alias = query.get("name"), query.get("config_name")
    if name is not None and alias is not None and name != alias:
        raise BadRequest("name and config_name are the same filter; give one of them")
    source = query.get("source")
    if source is not None and source.upper() not in RUN_SOURCES:
        raise BadRequest(f"source must be one of {', '.join(RUN_SOURCES)}")
    times = {
        key: parse_rfc3339(query[key], field=key)
        for key in ("created_after", "created_before", "updated_after")
        if query.get(key) is not None
    }
    filters = RunFilters(
        states=tuple(states),
        config_name=name if name is not None else alias,
        model_id=query.get("model_id"),
        creator=query.get("creator"),
        source=source.upper() if source is not None else None,
        created_after=times.get("created_after"),
        created_before=times.get("created_before"),
        updated_after=times.get("updated_after"),
        factory_uid=query.get("factory_uid"),
        automation_id=query.get("automation_id"),
        schedule_id=query.get("schedule_id"),
        q=query.get("q") or None,
    )
    return ListQuery(filters=filters, sort_by=sort_by, sort_order=sort_order)
