"""Parsing of RunAgentRequest bodies and list query strings (pure, no server)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from multidict import MultiDict

from api import BadRequest, PayloadTooLarge, ValidationFailed
from api.runs.requests import parse_list_query, parse_rfc3339, parse_run_request


def fields(exc: ValidationFailed) -> set[str]:
    return {e["field"] for e in exc.errors or []}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-01-31T12:00:00Z", dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)),
        ("2026-01-31t12:00:00z", dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)),
        ("2026-01-31T14:00:00+02:00", dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)),
        ("2026-01-31T14:00:00 02:00", dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)),  # '+' unescaped in a URL
        ("2026-01-31T12:00:00.123456789Z", dt.datetime(2026, 1, 31, 12, 0, 0, 123456, tzinfo=dt.UTC)),
    ],
)
def test_rfc3339_timestamps(raw: str, expected: dt.datetime) -> None:
    assert parse_rfc3339(raw, field="created_after") == expected


@pytest.mark.parametrize("raw", ["2026-01-31", "2026-01-31T12:00:00", "2026-02-30T00:00:00Z", "now", ""])
def test_non_rfc3339_timestamps_are_400(raw: str) -> None:
    with pytest.raises(BadRequest, match="created_after"):
        parse_rfc3339(raw, field="created_after")


def test_list_query_normalises_states_and_aliases() -> None:
    query = parse_list_query(
        MultiDict([("state", "queued,FAILED"), ("state", "failed"), ("config_name", "n")])
    )
    assert query.filters.states == ("QUEUED", "FAILED")
    assert query.filters.config_name == "n"
    assert (query.sort_by, query.sort_order) == ("updated_at", "desc")


def test_request_defaults_and_skill_shorthand() -> None:
    parsed = parse_run_request({"skill": "o/r:s", "metadata": {"k": "v"}}, max_attachment_bytes=10)
    assert parsed.prompt == ""
    assert parsed.config == {"skill_spec": "o/r:s"}
    with pytest.raises(ValidationFailed) as info:
        parse_run_request({"skill": "o/r:s", "config": {"skill_spec": "o/r:t"}}, max_attachment_bytes=10)
    assert fields(info.value) == {"skill"}


def test_attachment_size_is_checked_before_decoding() -> None:
    data = base64.b64encode(b"x" * 11).decode()
    with pytest.raises(PayloadTooLarge):
        parse_run_request(
            {"prompt": "p", "attachments": [{"file_name": "f", "data": data}]}, max_attachment_bytes=10
        )
    exact = base64.b64encode(b"x" * 10).decode()
    parsed = parse_run_request(
        {"prompt": "p", "attachments": [{"file_name": "f", "data": exact}]}, max_attachment_bytes=10
    )
    assert parsed.attachments[0].data == b"x" * 10
    assert parsed.attachments[0].mime_type == "application/octet-stream"
