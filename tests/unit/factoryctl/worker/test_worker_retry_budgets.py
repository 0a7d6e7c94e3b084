"""The worker calls' retry policy as data: each spec's flags and budget, and what the budgets add up to.

The behaviour behind each row is proven against the real server in
``tests/integration/worker/test_worker_retry_policy.py``; this pins the table of docs/workers.md.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from factoryctl.client import ConflictError, retry_delay
from factoryctl.client._transport import ClientOptions, RequestSpec, delay_after_error, delay_after_status
from factoryctl.client.errors import error_from_response
from factoryctl.client.worker_resources import (
    REPORT_RETRIES,
    RETRY_FOREVER,
    START_RETRIES,
    append_run_logs,
    claim_run,
    conflict_run_state,
    heartbeat_run,
    report_run_state,
    run_secrets,
)

OPTIONS = ClientOptions("http://127.0.0.1:9", "fk_test", httpx.Timeout(5.0))  # the library default: 2


def longest_wait(retries: int, *, jitter: float) -> float:
    """Seconds a call's retries wait in total with the client's backoff, for a jitter draw."""
    return sum(retry_delay(n, None, 0.5, 8.0, lambda: jitter) for n in range(retries))


@pytest.mark.parametrize(
    ("spec", "retries"),
    [
        (claim_run("h"), None),  # the client's budget: unlimited in the worker agent
        (heartbeat_run("run_1", state="INPROGRESS"), START_RETRIES),
        (heartbeat_run("run_1"), 0),
        (report_run_state("run_1", "SUCCEEDED"), REPORT_RETRIES),
        (append_run_logs("run_1", [("stdout", "x")]), 2),
        (run_secrets("run_1"), 4),
    ],
    ids=["claim", "start", "heartbeat", "report", "logs", "secrets"],
)
def test_every_worker_call_is_safe_to_repeat_with_its_own_budget(
    spec: RequestSpec[Any], retries: int | None
) -> None:
    assert spec.safe_to_repeat and spec.retries == retries


def test_budgets_in_seconds() -> None:
    assert 3.5 < longest_wait(START_RETRIES, jitter=0.0) and longest_wait(START_RETRIES, jitter=1.0) < 8.0
    # one to two minutes: the outcome of a run outlives a server restart
    assert (
        50.0 < longest_wait(REPORT_RETRIES, jitter=0.0) and longest_wait(REPORT_RETRIES, jitter=1.0) < 105.0
    )


def test_a_worker_client_retries_claims_without_limit() -> None:
    worker = ClientOptions("http://127.0.0.1:9", "fk_test", httpx.Timeout(5.0), max_retries=RETRY_FOREVER)
    refused = httpx.ConnectError("refused")
    lost = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    claim = claim_run("h", wait_seconds=20)
    for attempt in (0, 10, 10_000):
        assert delay_after_error(worker, claim, attempt, lost, lambda: 0.5) is not None
    assert delay_after_error(worker, claim, 10_000, refused, lambda: 0.5) == pytest.approx(6.0)  # capped
    assert delay_after_error(OPTIONS, claim, 2, refused, lambda: 0.5) is None  # a library user's budget


def test_a_heartbeat_is_never_repeated_but_a_report_is_repeated_after_any_transient_failure() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:9/x")
    unavailable = httpx.Response(503, request=request)
    broken = httpx.Response(500, request=request)
    lost = httpx.ReadTimeout("slow")
    beat, report = heartbeat_run("run_1"), report_run_state("run_1", "FAILED")
    assert delay_after_status(OPTIONS, beat, 0, unavailable, lambda: 0.5) is None
    assert delay_after_error(OPTIONS, beat, 0, lost, lambda: 0.5) is None
    for attempt in (0, REPORT_RETRIES - 1):
        assert delay_after_status(OPTIONS, report, attempt, broken, lambda: 0.5) is not None
        assert delay_after_error(OPTIONS, report, attempt, lost, lambda: 0.5) is not None
    assert delay_after_error(OPTIONS, report, REPORT_RETRIES, lost, lambda: 0.5) is None
    conflict = httpx.Response(409, request=request, json={"status": 409, "error_code": "conflict"})
    assert delay_after_status(OPTIONS, report, 0, conflict, lambda: 0.5) is None  # final


def conflict(detail: str, **members: object) -> ConflictError:
    response = httpx.Response(
        409,
        request=httpx.Request("POST", "http://127.0.0.1:9/x"),
        json={"status": 409, "error_code": "conflict", "detail": detail, **members},
    )
    error = error_from_response(response)
    assert isinstance(error, ConflictError)
    return error


def test_the_run_state_a_conflict_names_is_its_state_member_never_its_prose() -> None:
    assert conflict_run_state(conflict("run run_1 is ERROR and ...", state="FAILED")) == "FAILED"
    assert conflict_run_state(conflict("run run_1 is ERROR and ...", state="nonsense")) is None
    assert conflict_run_state(conflict("run run_1 is SUCCEEDED and its lease is not held")) is None
