"""What a run is told, and tells the server, about where it executes (docs/workers.md, "Sandbox").

The worker reports ``{kind, network}`` with the run's start heartbeat (stored on the run, shown as its
``sandbox``; ``is_sandbox_running`` follows ``kind``), and a run executing on the worker's host says so
on its own log, once, whatever made it so: ``--sandbox none``, or ``--sandbox auto`` on a machine where
bubblewrap does not work.
"""

from __future__ import annotations

from typing import Literal

from factoryctl.worker.job import Job
from factoryctl.worker.sandbox import Sandbox

SandboxMode = Literal["auto", "bwrap", "none"]
NETWORK_MODES = ("none", "allowlist", "open")


def sandbox_report(job: Job, sandbox: Sandbox | None) -> dict[str, str]:
    """``{"kind": "bwrap"|"none", "network": "none"|"allowlist"|"open"}`` of ``job`` run in ``sandbox``
    (None: on the host, where the network is the host's: ``open``)."""
    if sandbox is None:
        return {"kind": "none", "network": "open"}
    mode = sandbox.policy(job.network).mode  # the environment's policy, as this worker's operator allows it
    return {"kind": "bwrap", "network": mode if mode in NETWORK_MODES else "none"}


def unsandboxed_line(sandbox: Sandbox | None) -> str:
    """The run's log line saying it runs without a sandbox, and why."""
    why = (
        "the worker runs with --sandbox none"
        if sandbox is None
        else f"bubblewrap does not work on the worker's machine ({sandbox.problem()})"
    )
    return (
        f"UNSANDBOXED: this run executes on the worker's host as the worker's user, with its files and "
        f"network in reach: {why}"
    )
