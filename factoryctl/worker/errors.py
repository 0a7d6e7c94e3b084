"""The worker package's exceptions (the tree is drawn in :mod:`factoryctl.worker`).

One module so every part of the worker (and ``serve``'s in-process workers) raises and catches the
same classes; :mod:`factoryctl.worker` re-exports them.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base class of every error raised by the worker package."""


class InvalidClaim(WorkerError):
    """A claim payload cannot be turned into a Job."""


class HarnessError(WorkerError):
    """A harness is misconfigured (unknown type, missing command)."""


class HarnessUnavailable(HarnessError):
    """The run asks for a harness this worker does not offer (``claude``, ``codex``, ``gemini``): the run
    ends FAILED ``harness_unavailable`` before anything of it starts."""

    error_code = "harness_unavailable"


class RunnerUnavailable(WorkerError):
    """The run's runner cannot run on this worker (a macOS runner on a Linux worker) or no longer exists:
    the run ends FAILED ``runner_unavailable`` before anything of it starts."""

    error_code = "runner_unavailable"


class WorkspaceError(WorkerError):
    """The run workspace cannot be created or written."""


class EnvironmentSetupFailed(WorkerError):
    """Environment preparation failed; ``output_tail`` is the end of the output, secrets redacted."""

    error_code = "environment_setup_failed"

    def __init__(self, message: str, output_tail: str = "") -> None:
        self.message = message
        self.output_tail = output_tail
        super().__init__(message)


class RunnerSetupFailed(EnvironmentSetupFailed):
    """A setup command of the run's runner failed (after the environment's own setup): FAILED
    ``runner_setup_failed``, with the output tail like an environment's."""

    error_code = "runner_setup_failed"


class SandboxUnavailable(WorkerError):
    """A run needs the sandbox this worker must use, and it does not work here (docs/workers.md,
    "Sandbox"): the run ends FAILED ``sandbox_unavailable`` before anything of it starts."""

    error_code = "sandbox_unavailable"


class LeaseLost(WorkerError):
    """The server no longer lets this worker act on the run (lease reaped, run finished or taken).

    The server has already decided the run's fate, so the worker abandons it: reporting would only
    be refused.
    """


class WorkerRefused(WorkerError):
    """The server refused this worker's key or host (401/403): retrying would only hammer it."""


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
