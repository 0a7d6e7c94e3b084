"""A run's runner (``runners/<name>.yaml``) on this worker: what it can honour, and its setup.

The claim carries the runner as ``{name, setup_commands, instance_shape, platform}``
(:func:`factoryctl.worker.job.parse_runner`). This worker runs Linux, in its sandbox over its own system
(docs/workers.md, "Runners and skills"):

- ``platform.os: macos`` cannot run here: the run ends FAILED ``runner_unavailable`` before anything of
  it starts (:func:`check_runner`), as does a runner that no longer exists (the server fails those first);
- ``platform.docker_image`` is not honoured: one line on the run's log says the sandbox over the worker's
  system is used instead (:func:`runner_notes`);
- ``instance_shape``'s ``memory_gb`` becomes the run's memory limit when it is lower than the worker's
  (:meth:`factoryctl.worker.limits.Limits.for_runner`, enforced by the watchdog); its ``vcpus`` cannot be
  enforced without cgroups, and one log line says so;
- ``setup_commands`` run in order in the workspace, in the sandbox, after the environment's own setup and
  before the harness, exactly like an environment's (:func:`factoryctl.worker.environment.run_runner_setup`);
  a failing one ends the run FAILED ``runner_setup_failed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from factoryctl.worker.errors import RunnerUnavailable
from factoryctl.worker.job import Job
from factoryctl.worker.limits import Limits, format_size

LINUX_ONLY = "this worker runs Linux only"


def check_runner(job: Job) -> None:
    """Raise :class:`RunnerUnavailable` when ``job``'s runner cannot run on this worker."""
    runner = job.runner
    if runner is None:
        return
    if runner.get("error"):
        raise RunnerUnavailable(f"runner {runner['name']!r} is unavailable: {runner['error']}")
    platform = runner.get("platform") or {}
    if str(platform.get("os") or "linux").lower() != "linux":
        raise RunnerUnavailable(
            f"runner {runner['name']!r} asks for platform {platform.get('os')!r}, and {LINUX_ONLY}: "
            "route the run to a worker of that platform or use a Linux runner"
        )


def runner_notes(runner: Mapping[str, Any], limits: Limits) -> list[str]:
    """The ``system`` log lines about what of the runner this worker applies (``limits``: the run's, the
    shape's memory already in them) and what it does not."""
    notes = []
    platform = runner.get("platform") or {}
    if platform.get("docker_image"):
        notes.append(
            f"runner {runner['name']!r}: docker image {platform['docker_image']!r} is not used; the run "
            "executes in this worker's sandbox over its own system"
        )
    shape = runner.get("instance_shape") or {}
    if "memory_gb" in shape:
        memory = format_size(limits.memory_bytes) if limits.memory_bytes is not None else "unlimited"
        notes.append(
            f"runner {runner['name']!r}: instance shape memory {shape['memory_gb']} GB; the run's memory "
            f"limit is {memory} (the lower of the shape's and the worker's)"
        )
    if "vcpus" in shape:
        notes.append(
            f"runner {runner['name']!r}: instance shape {shape['vcpus']} vCPUs is not enforced: this worker "
            "has no CPU limit without cgroups"
        )
    return notes
