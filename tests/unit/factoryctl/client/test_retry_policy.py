"""The client's pure retry policy: delays, Retry-After parsing, which answers and errors are retried."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from factoryctl.client import Run, WebhookWithSecret, parse_retry_after, retry_delay
from factoryctl.client._transport import error_is_retryable, status_is_retryable
from factoryctl.client.errors import (
    APIStatusError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    UnprocessableEntityError,
    error_class,
)


def test_backoff_grows_exponentially_is_capped_and_jittered() -> None:
    low, high = (lambda: 0.0), (lambda: 0.999999)
    assert [retry_delay(n, None, 0.5, 8.0, low) for n in range(6)] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0]
    assert retry_delay(2, None, 0.5, 8.0, high) == pytest.approx(2.0, rel=1e-5)
    assert retry_delay(60, None, 0.5, 8.0, high) == pytest.approx(8.0, rel=1e-5)  # capped, no overflow


def test_retry_after_wins_over_backoff() -> None:
    assert retry_delay(0, "3", jitter_rng=lambda: 0.5) == 3.0
    assert retry_delay(5, "0", jitter_rng=lambda: 0.5) == 0.0
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_delay(0, date, now=now) == pytest.approx(30.0)
    assert retry_delay(0, "soon", 0.5, 8.0, lambda: 0.0) == 0.25  # unparseable: backoff


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (" 1.5 ", 1.5), ("-4", 0.0), ("", None), (None, None), ("nan", None), ("later", None)],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=0.0) == seconds


def test_past_http_date_means_now() -> None:
    assert parse_retry_after(email.utils.formatdate(1000.0, usegmt=True), now=5000.0) == 0.0


@pytest.mark.parametrize(
    ("status", "idempotent", "retryable", "expected"),
    [
        (408, False, False, True),
        (429, False, False, True),
        (503, False, False, True),
        (409, True, False, False),  # a real conflict stays a conflict
        (409, False, True, True),  # ... unless the server says it is transient
        (500, True, False, True),
        (500, False, True, False),  # a create may have happened
        (502, False, False, False),
        (504, True, False, True),
        (501, True, False, False),
        (400, True, False, False),
        (404, True, False, False),
        (422, True, False, False),
    ],
)
def test_which_statuses_are_retried(status: int, idempotent: bool, retryable: bool, expected: bool) -> None:
    assert status_is_retryable(status, idempotent=idempotent, problem_retryable=retryable) is expected


def test_which_transport_errors_are_retried() -> None:
    never_sent = httpx.ConnectError("refused")
    maybe_sent = httpx.ReadTimeout("slow")
    assert error_is_retryable(never_sent, idempotent=False)
    assert not error_is_retryable(maybe_sent, idempotent=False)
    assert error_is_retryable(maybe_sent, idempotent=True)
    assert not error_is_retryable(httpx.UnsupportedProtocol("ftp"), idempotent=True)


def test_one_exception_class_per_status() -> None:
    assert error_class(404) is NotFoundError and error_class(409) is ConflictError
    assert error_class(422) is UnprocessableEntityError
    assert error_class(502) is InternalServerError and error_class(501) is InternalServerError
    assert error_class(405) is APIStatusError


def test_models_ignore_unknown_members_and_keep_them_in_raw() -> None:
    run = Run.from_json({"run_id": "r", "state": "QUEUED", "agent_config": None, "new_member": 1})
    assert run.agent_config == {} and run.raw["new_member"] == 1
    hook = WebhookWithSecret.from_json({"uid": "wh_1", "name": "n", "secret": "s", "enabled": False})
    assert hook.secret == "s" and hook.enabled is False
    with pytest.raises(TypeError):
        Run.from_json({"run_id": "r", "state": "QUEUED", "cancel_requested": "yes"})
    with pytest.raises(KeyError):
        Run.from_json({"state": "QUEUED"})
