"""The exception tree of the worker protocol (drawn in :mod:`api.claims`)."""

from __future__ import annotations

from store import WriteRefused


class LeaseRefused(WriteRefused):
    """A worker call the run refuses: the caller does not hold its lease, or the state machine refuses
    the report. The one lease error of every worker path (docs/workers.md, "Endpoints"): HTTP answers
    it ``409`` with the run's ``state`` (:mod:`api.problems`), a service-hosted worker's channel turns
    it into ``LeaseLost``.

    ``state`` is the run's state now, so a worker repeating a report can tell "already recorded".
    """

    def __init__(self, detail: str, state: str) -> None:
        super().__init__(detail)
        self.state = state
        self.extensions = {"state": state}


class NotLeaseHolder(LeaseRefused):
    """The caller does not hold the run's lease (never did, it lapsed, or the run finished)."""

    def __init__(self, run_id: str, state: str) -> None:
        super().__init__(f"run {run_id} is {state} and its lease is not held by this worker", state)


__all__ = ["LeaseRefused", "NotLeaseHolder"]
