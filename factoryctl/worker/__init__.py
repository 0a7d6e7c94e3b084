"""The worker agent: what executes a claimed run, outside the server.

``factoryctl worker`` (:mod:`factoryctl.worker.agent`) claims runs over HTTP through the typed
client (the protocol and its retry policy: ``docs/workers.md``); ``serve --workers N`` runs the same
code in-process (:mod:`factoryctl.serve.local_workers`). Either way a claim becomes a
:class:`~factoryctl.worker.job.Job`, the run loop (:mod:`factoryctl.worker.execution`) prepares a
workspace (:mod:`~factoryctl.worker.workspace`) and its environment
(:mod:`~factoryctl.worker.environment`), runs a harness (:mod:`~factoryctl.worker.harness`) and
reports the returned :class:`~factoryctl.worker.job.Outcome`. Nothing here imports the server
(:mod:`api`) or the store: the layering contracts forbid it.

Exception tree (:mod:`factoryctl.worker.errors`)::

    WorkerError
    ├── InvalidClaim             a claim payload cannot be turned into a Job
    ├── HarnessError             a harness is misconfigured (unknown type, missing command)
    │   └── HarnessUnavailable   the run asks for a harness this worker does not offer; FAILED
    │                            ``harness_unavailable``
    ├── RunnerUnavailable        the run's runner cannot run here (macOS) or is gone; FAILED
    │                            ``runner_unavailable``
    ├── WorkspaceError           the run workspace cannot be created or written
    ├── EnvironmentSetupFailed   cloning a repository or a setup command failed; the run is FAILED
    │   │                        with ``error_code`` ``environment_setup_failed``
    │   └── RunnerSetupFailed    a runner's setup command failed; FAILED ``runner_setup_failed``
    ├── SandboxUnavailable       the run needs the sandbox this worker must use and none works
    │                            here; the run is FAILED with ``error_code`` ``sandbox_unavailable``
    ├── LeaseLost                the server no longer lets this worker act on the run (404/409):
    │                            the run is abandoned, its fate is the server's
    └── WorkerRefused            the server refused the worker's key or host (401/403): the
                                 worker stops (``factoryctl worker`` exits 1)

A failing agent is not an exception: harnesses return an ``Outcome`` with state ``FAILED``.
"""

from __future__ import annotations

from factoryctl.worker.errors import (
    EnvironmentSetupFailed,
    HarnessError,
    HarnessUnavailable,
    InvalidClaim,
    LeaseLost,
    RunnerSetupFailed,
    RunnerUnavailable,
    SandboxUnavailable,
    WorkerError,
    WorkerRefused,
    WorkspaceError,
)

__all__ = [
    "EnvironmentSetupFailed",
    "HarnessError",
    "HarnessUnavailable",
    "InvalidClaim",
    "LeaseLost",
    "RunnerSetupFailed",
    "RunnerUnavailable",
    "SandboxUnavailable",
    "WorkerError",
    "WorkerRefused",
    "WorkspaceError",
]
