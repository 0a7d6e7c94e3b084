"""The run state machine: every (state, event, cancel pending) combination is either listed below with
its outcome or refused with the listed error code (default ``conflict``)."""

from __future__ import annotations

import pytest

from api.runs.states import (
    ACTIVE,
    LEASE_LOST_MESSAGE,
    LEASED,
    TERMINAL,
    WORKER_REPORTS,
    IllegalTransition,
    RunEvent,
    RunState,
    transition,
)

Q, C, RUN, B, P = RunState.QUEUED, RunState.CLAIMED, RunState.INPROGRESS, RunState.BLOCKED, RunState.PENDING
OK, FAIL, ERR, X = RunState.SUCCEEDED, RunState.FAILED, RunState.ERROR, RunState.CANCELLED
E = RunEvent

# (state, event, cancel pending) -> (next state, cancel pending after, follow-up outcome) or an error code.
# Anything not listed must be refused with "conflict".
EXPECTED: dict[tuple[RunState, RunEvent, bool], tuple[RunState, bool, str | None] | str] = {
    # happy path
    (Q, E.CLAIM, False): (C, False, None),
    (C, E.START, False): (RUN, False, None),
    (RUN, E.SUCCEED, False): (OK, False, None),
    (RUN, E.FAIL, False): (FAIL, False, None),
    (RUN, E.ERROR, False): (ERR, False, None),
    (RUN, E.BLOCK, False): (B, False, None),
    # failing before the start
    (C, E.FAIL, False): (FAIL, False, None),
    (C, E.ERROR, False): (ERR, False, None),
    (C, E.FAIL, True): (FAIL, False, None),
    (C, E.ERROR, True): (ERR, False, None),
    # outcomes reported while a cancel is pending are recorded as reported, except blocking
    (RUN, E.SUCCEED, True): (OK, False, None),
    (RUN, E.FAIL, True): (FAIL, False, None),
    (RUN, E.ERROR, True): (ERR, False, None),
    (RUN, E.BLOCK, True): (X, False, None),
    # leases
    (C, E.LEASE_EXPIRED, False): (Q, False, None),
    (RUN, E.LEASE_EXPIRED, False): (ERR, False, None),
    (C, E.LEASE_EXPIRED, True): (X, False, None),
    (RUN, E.LEASE_EXPIRED, True): (X, False, None),
    # cancel
    (Q, E.CANCEL, False): (X, False, None),
    (P, E.CANCEL, False): (X, False, None),
    (B, E.CANCEL, False): (X, False, None),
    (C, E.CANCEL, False): (C, True, None),
    (RUN, E.CANCEL, False): (RUN, True, None),
    (C, E.CANCEL, True): (C, True, None),
    (RUN, E.CANCEL, True): (RUN, True, None),
    (OK, E.CANCEL, False): "invalid_request",
    (FAIL, E.CANCEL, False): "invalid_request",
    (ERR, E.CANCEL, False): "invalid_request",
    (X, E.CANCEL, False): "invalid_request",
    # the worker confirms a requested cancel; a claimed run that has not started is cancelled at start
    (C, E.CANCELLED, True): (X, False, None),
    (RUN, E.CANCELLED, True): (X, False, None),
    (C, E.START, True): (X, False, None),
    # follow-ups
    (Q, E.FOLLOWUP, False): (Q, False, "queued"),
    (P, E.FOLLOWUP, False): (P, False, "queued"),
    (C, E.FOLLOWUP, False): (C, False, "delivered"),
    (RUN, E.FOLLOWUP, False): (RUN, False, "delivered"),
    (C, E.FOLLOWUP, True): "conflict",
    (RUN, E.FOLLOWUP, True): "conflict",
    (B, E.FOLLOWUP, False): (Q, False, "requeued"),
    (OK, E.FOLLOWUP, False): (Q, False, "requeued"),
    (FAIL, E.FOLLOWUP, False): (Q, False, "requeued"),
    (ERR, E.FOLLOWUP, False): (Q, False, "requeued"),
    (X, E.FOLLOWUP, False): "conflict",
}


def _combinations() -> list[tuple[RunState, RunEvent, bool]]:
    # A cancel can only be pending while a worker holds the run (CLAIMED or INPROGRESS).
    return [
        (state, event, pending)
        for state in RunState
        for event in RunEvent
        for pending in ((False, True) if state in LEASED else (False,))
    ]


@pytest.mark.parametrize(("state", "event", "pending"), _combinations())
def test_every_state_event_pair(state: RunState, event: RunEvent, pending: bool) -> None:
    expected = EXPECTED.get((state, event, pending), "conflict")
    if isinstance(expected, str):
        with pytest.raises(IllegalTransition) as refused:
            transition(state, event, cancel_requested=pending)
        assert (refused.value.state, refused.value.event, refused.value.error_code) == (
            state,
            event,
            expected,
        )
        return
    result = transition(state, event, cancel_requested=pending)
    assert (result.to, result.cancel_requested, result.followup) == expected
    lease_lost = (state, event, pending) == (RUN, E.LEASE_EXPIRED, False)
    assert result.status_message == (LEASE_LOST_MESSAGE if lease_lost else None)


def test_expected_table_has_no_unreachable_rows() -> None:
    assert set(EXPECTED) <= set(_combinations())


def test_lease_lapse_in_progress_is_a_retryable_resource_unavailable_error() -> None:
    result = transition(RUN, E.LEASE_EXPIRED)
    assert result.to is ERR
    assert result.status_message is not None
    assert result.status_message["error_code"] == "resource_unavailable"
    assert result.status_message["retryable"] is True


def test_state_sets_partition_the_states() -> None:
    assert TERMINAL == {OK, FAIL, ERR, X}
    assert ACTIVE == {Q, C, RUN, B, P}
    assert LEASED == {C, RUN} and LEASED <= ACTIVE
    assert [s.value for s in RunState] == [s.name for s in RunState]  # the wire value is the name


def test_worker_reports_move_the_run_to_the_reported_state() -> None:
    for reported, event in WORKER_REPORTS.items():
        start = C if event is E.START else RUN
        assert transition(start, event, cancel_requested=reported is X).to is reported


def test_cancel_during_a_run_then_the_worker_confirms() -> None:
    state = transition(Q, E.CLAIM).to
    state = transition(state, E.START).to
    requested = transition(state, E.CANCEL)
    assert (requested.to, requested.cancel_requested) == (RUN, True)
    assert transition(requested.to, E.CANCELLED, cancel_requested=True).to is X


def test_finished_run_continues_after_a_followup_and_runs_again() -> None:
    assert transition(OK, E.FOLLOWUP).to is Q
    assert transition(Q, E.CLAIM).to is C


def test_refusal_message_names_the_event_and_state() -> None:
    with pytest.raises(IllegalTransition, match="cancel is not allowed for a run in state SUCCEEDED"):
        transition(OK, E.CANCEL)
