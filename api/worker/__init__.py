"""The execution side of a worker: jobs, per-run workspaces, environments and harnesses.

This package does no HTTP and touches no database: a worker loop claims a run, turns the claim
into a :class:`api.worker.job.Job`, prepares a workspace (:mod:`api.worker.workspace`) and its
environment (:mod:`api.worker.environment`), runs a harness (:mod:`api.worker.harness`) and reports
the returned :class:`api.worker.job.Outcome`.

Exception tree::

    WorkerError
    ├── InvalidClaim             a claim payload cannot be turned into a Job
    ├── HarnessError             a harness is misconfigured (unknown type, missing command)
    ├── WorkspaceError           the run workspace cannot be created or written
    └── EnvironmentSetupFailed   cloning a repository or a setup command failed; the run is FAILED
                                 with ``error_code`` ``environment_setup_failed``

A failing agent is not an exception: harnesses return an ``Outcome`` with state ``FAILED``.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base class of every error raised by the worker package."""


class InvalidClaim(WorkerError):
    pass


class HarnessError(WorkerError):
    pass


class WorkspaceError(WorkerError):
    pass


class EnvironmentSetupFailed(WorkerError):
    """Environment preparation failed; ``output_tail`` is the end of the output, secrets redacted."""

    error_code = "environment_setup_failed"

    def __init__(self, message: str, output_tail: str = "") -> None:
        self.message = message
        self.output_tail = output_tail
        super().__init__(message)


__all__ = [
    "EnvironmentSetupFailed",
    "HarnessError",
    "InvalidClaim",
    "WorkerError",
    "WorkspaceError",
]
