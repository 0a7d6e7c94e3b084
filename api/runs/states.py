"""The one run state machine (docs/api.md, "Run states"): every state change of a run is decided here,
nowhere else.

Pure and table-driven: :data:`_TABLE` lists every allowed (state, event) pair; :data:`_WHEN_CANCELLING`
lists how a pending cancel (``cancel_requested``) changes some of them; every other pair is refused with
:class:`IllegalTransition`, ``conflict`` unless :data:`_REFUSED` names a different error code.

Decisions the design left open:

- A lease is held only in CLAIMED and INPROGRESS (:data:`LEASED`). BLOCKED means the agent is waiting
  for input and the worker has let go of the run: it holds no lease and no worker slot, so a cancel ends
  it at once and a follow-up (the input) re-queues it as a continuation that any worker may claim.
- A claimed run may FAIL or ERROR before it starts (environment setup, unreadable attachments); only
  a started run can SUCCEED or BLOCK.
- With a cancel pending, the run ends CANCELLED as soon as it stops: the worker confirms (``cancelled``),
  the lease lapses, the agent blocks, or a claimed run is about to start (nothing has run yet). A worker
  reporting success, failure or error still records that outcome: it is what happened. A follow-up to a
  run that is being cancelled is refused like one to a CANCELLED run.
- ``cancelled`` without a pending cancel is refused: workers only confirm stops they were asked for.
- Follow-ups: a QUEUED/PENDING run keeps them until it is claimed (``queued``); a CLAIMED/INPROGRESS run
  gets them on its next heartbeat (``delivered``); a BLOCKED or finished run goes back to QUEUED as a
  continuation (``requeued``: the caller clears started/finished times and the old status message, and
  counts an attempt). CANCELLED runs refuse follow-ups (409); cancel on a terminal run is a 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Literal

from store.rules.vocabulary import RunState

ErrorCode = Literal["invalid_request", "conflict"]
FollowupOutcome = Literal["queued", "delivered", "requeued"]


class RunEvent(StrEnum):
    CLAIM = "claim"  # a worker takes a queued run (lease starts)
    START = "start"  # the worker starts executing
    SUCCEED = "succeed"  # worker report: execution ended, success
    FAIL = "fail"  # worker report: execution ended, failure
    ERROR = "error"  # worker report: the run could not be carried out
    BLOCK = "block"  # worker report: the agent awaits input; the worker lets go
    CANCELLED = "cancelled"  # worker report: stopped after a cancel request
    LEASE_EXPIRED = "lease_expired"  # the worker stopped heartbeating
    CANCEL = "cancel"  # POST /agent/runs/{id}/cancel
    FOLLOWUP = "followup"  # POST /agent/runs/{id}/followups


TERMINAL: Final = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.ERROR, RunState.CANCELLED})
ACTIVE: Final = frozenset(RunState) - TERMINAL
LEASED: Final = frozenset({RunState.CLAIMED, RunState.INPROGRESS})

# What a worker may report (``POST /workers/runs/{id}/state``) and the event each report is.
WORKER_REPORTS: Final[Mapping[RunState, RunEvent]] = MappingProxyType(
    {
        RunState.INPROGRESS: RunEvent.START,
        RunState.SUCCEEDED: RunEvent.SUCCEED,
        RunState.FAILED: RunEvent.FAIL,
        RunState.ERROR: RunEvent.ERROR,
        RunState.BLOCKED: RunEvent.BLOCK,
        RunState.CANCELLED: RunEvent.CANCELLED,
    }
)

LEASE_LOST_MESSAGE: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "message": "The worker stopped responding while the run was in progress (its lease expired).",
        "error_code": "resource_unavailable",
        "retryable": True,
    }
)


@dataclass(frozen=True)
class Transition:
    """The outcome of one event.

    ``cancel_requested`` is the flag's value after the event: True only while a cancel is pending on a
    CLAIMED or INPROGRESS run, False everywhere else. ``status_message`` is the service's own
    message for the run when not None (a worker's reported message, if any, is the caller's to store).
    ``followup`` is set for follow-up events only.
    """

    to: RunState
    cancel_requested: bool = False
    status_message: Mapping[str, Any] | None = None
    followup: FollowupOutcome | None = None


class IllegalTransition(Exception):
    def __init__(self, state: RunState, event: RunEvent, error_code: ErrorCode) -> None:
        super().__init__(f"{event.value} is not allowed for a run in state {state.value}")
        self.state = state
        self.event = event
        self.error_code: ErrorCode = error_code


@dataclass(frozen=True)
class _Rule:
    to: RunState
    cancel_requested: bool = False  # True: a cancel is now pending
    status_message: Mapping[str, Any] | None = None
    followup: FollowupOutcome | None = None


S, E = RunState, RunEvent

_TABLE: Final[dict[tuple[RunState, RunEvent], _Rule]] = {
    # the happy path
    (S.QUEUED, E.CLAIM): _Rule(S.CLAIMED),
    (S.CLAIMED, E.START): _Rule(S.INPROGRESS),
    (S.INPROGRESS, E.SUCCEED): _Rule(S.SUCCEEDED),
    (S.INPROGRESS, E.FAIL): _Rule(S.FAILED),
    (S.INPROGRESS, E.ERROR): _Rule(S.ERROR),
    (S.INPROGRESS, E.BLOCK): _Rule(S.BLOCKED),
    # a claimed run can fail before it starts (e.g. environment setup)
    (S.CLAIMED, E.FAIL): _Rule(S.FAILED),
    (S.CLAIMED, E.ERROR): _Rule(S.ERROR),
    # leases
    (S.CLAIMED, E.LEASE_EXPIRED): _Rule(S.QUEUED),
    (S.INPROGRESS, E.LEASE_EXPIRED): _Rule(S.ERROR, status_message=LEASE_LOST_MESSAGE),
    # cancel: at once where no worker holds the run, otherwise requested and confirmed later
    (S.QUEUED, E.CANCEL): _Rule(S.CANCELLED),
    (S.PENDING, E.CANCEL): _Rule(S.CANCELLED),
    (S.BLOCKED, E.CANCEL): _Rule(S.CANCELLED),
    (S.CLAIMED, E.CANCEL): _Rule(S.CLAIMED, cancel_requested=True),
    (S.INPROGRESS, E.CANCEL): _Rule(S.INPROGRESS, cancel_requested=True),
    # follow-ups
    (S.QUEUED, E.FOLLOWUP): _Rule(S.QUEUED, followup="queued"),
    (S.PENDING, E.FOLLOWUP): _Rule(S.PENDING, followup="queued"),
    (S.CLAIMED, E.FOLLOWUP): _Rule(S.CLAIMED, followup="delivered"),
    (S.INPROGRESS, E.FOLLOWUP): _Rule(S.INPROGRESS, followup="delivered"),
    (S.BLOCKED, E.FOLLOWUP): _Rule(S.QUEUED, followup="requeued"),
    (S.SUCCEEDED, E.FOLLOWUP): _Rule(S.QUEUED, followup="requeued"),
    (S.FAILED, E.FOLLOWUP): _Rule(S.QUEUED, followup="requeued"),
    (S.ERROR, E.FOLLOWUP): _Rule(S.QUEUED, followup="requeued"),
}

# With cancel_requested set (only ever in CLAIMED or INPROGRESS), these pairs differ from _TABLE.
_CANCELLED = _Rule(S.CANCELLED)
_WHEN_CANCELLING: Final[dict[tuple[RunState, RunEvent], _Rule | ErrorCode]] = {
    (S.CLAIMED, E.START): _CANCELLED,
    (S.CLAIMED, E.LEASE_EXPIRED): _CANCELLED,
    (S.CLAIMED, E.CANCELLED): _CANCELLED,
    (S.INPROGRESS, E.LEASE_EXPIRED): _CANCELLED,
    (S.INPROGRESS, E.BLOCK): _CANCELLED,
    (S.INPROGRESS, E.CANCELLED): _CANCELLED,
    (S.CLAIMED, E.FOLLOWUP): "conflict",
    (S.INPROGRESS, E.FOLLOWUP): "conflict",
}

# Refusals whose error code is not the default ``conflict``.
_REFUSED: Final[dict[tuple[RunState, RunEvent], ErrorCode]] = {
    (state, E.CANCEL): "invalid_request" for state in sorted(TERMINAL)
}


def transition(state: RunState, event: RunEvent, *, cancel_requested: bool = False) -> Transition:
    """Where ``event`` takes a run in ``state``; raises :class:`IllegalTransition` when it may not."""
    key = (state, event)
    rule: _Rule | ErrorCode | None = _TABLE.get(key)
    if cancel_requested and key in _WHEN_CANCELLING:
        rule = _WHEN_CANCELLING[key]
    if rule is None:
        raise IllegalTransition(state, event, _REFUSED.get(key, "conflict"))
    if isinstance(rule, str):
        raise IllegalTransition(state, event, rule)
    # A pending cancel lives only while a worker holds the run; leaving CLAIMED/INPROGRESS settles it.
    flag = (rule.cancel_requested or cancel_requested) and rule.to in LEASED
    return Transition(rule.to, flag, rule.status_message, rule.followup)


__all__ = [
    "ACTIVE",
    "LEASED",
    "LEASE_LOST_MESSAGE",
    "TERMINAL",
    "WORKER_REPORTS",
    "ErrorCode",
    "FollowupOutcome",
    "IllegalTransition",
    "RunEvent",
    "RunState",
    "Transition",
    "transition",
]
