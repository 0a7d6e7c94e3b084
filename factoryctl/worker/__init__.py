"""The worker agent: what executes a claimed run, outside the server.

``factoryctl worker`` (:mod:`factoryctl.worker.agent`) claims runs over HTTP through the typed
client; ``serve --workers N`` runs the same code in-process (:mod:`factoryctl.serve.local_workers`).
Either way a claim becomes a :class:`~factoryctl.worker.job.Job`, the run loop
(:mod:`factoryctl.worker.execution`) prepares a workspace (:mod:`~factoryctl.worker.workspace`)
and its environment (:mod:`~factoryctl.worker.environment`), runs a harness
(:mod:`~factoryctl.worker.harness`) and reports the returned :class:`~factoryctl.worker.job.Outcome`.
Nothing here imports the server (:mod:`api`) or the store: the layering contracts forbid it.

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
