"""One run's network around its sandbox (docs/workers.md, "Network"): :func:`run_network`.

Under ``none`` and ``allowlist`` it starts the run's :class:`~factoryctl.worker.egress.EgressProxy` on a
Unix socket in a fresh egress directory (mode 0700, outside every workspace), copies the relay script
beside it, and gives the run a sandbox whose processes start through the relay; when the run ends the
proxy stops and the directory goes. ``open`` gives the sandbox the host's network. A run with no
sandbox (``--sandbox none``, or nothing run-controlled) keeps the host's network and gets no proxy.
``open`` is said on the run's log, and so is each refused destination (the policy itself is on the
run's details, from its start heartbeat).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from factoryctl.worker.egress import EgressProxy, public_only
from factoryctl.worker.egress_sandbox import PROXY_SOCKET, RELAY_FILE, SandboxNetwork
from factoryctl.worker.job import Job
from factoryctl.worker.netpolicy import EgressRules, NetworkPolicy, model_endpoints
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.sandbox import SYSTEM_DIRS, Sandbox

RELAY_SOURCE = Path(__file__).with_name("egress_relay.py")
SYSTEM_PYTHON = "/usr/bin/python3"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})

EventSink = Callable[[Sequence[AgentEvent]], Awaitable[None]]
LineSink = Callable[[str, str], Awaitable[None]]


def relay_python() -> tuple[str, tuple[Path, ...]]:
    """An interpreter the sandbox sees, and the directories to bind for it: the system's ``python3``
    (inside the system directories every sandbox has), else this process's own, its prefix bound."""
    if os.access(SYSTEM_PYTHON, os.X_OK):
        return SYSTEM_PYTHON, ()
    executable = os.path.realpath(sys.executable)
    system = [Path(d).resolve() for d in SYSTEM_DIRS if os.path.isdir(d)]
    prefix = Path(os.path.realpath(sys.base_prefix))
    bound = () if any(prefix.is_relative_to(s) for s in system) else (prefix,)
    return executable, bound


def model_rules(
    job: Job,
    preset: str | None,
    base: Mapping[str, str] | None,
    policy: NetworkPolicy | None = None,
    *,
    listed_private: bool = True,
) -> EgressRules:
    """``job``'s rules: ``policy`` (default: its own), the model endpoint its agent uses (the run's
    variables over the worker's), and which of those the worker itself set (they may be private or
    loopback; listed destinations may too when ``listed_private``)."""
    worker = dict(os.environ if base is None else base)
    model = model_endpoints(preset, {**worker, **job.environment_variables()})
    return EgressRules(
        job.network if policy is None else policy,
        model,
        trusted=model_endpoints(preset, worker),
        listed_private=listed_private,
    )


@contextlib.asynccontextmanager
async def run_network(
    job: Job,
    sandbox: Sandbox | None,
    *,
    preset: str | None,
    base_env: Mapping[str, str] | None,
    on_event: EventSink,
    on_output: LineSink,
) -> AsyncIterator[Sandbox | None]:
    """The sandbox ``job``'s processes start in, with its network (``preset``: the agent preset's name,
    which says where its model is; None for the command harness), for as long as the run lasts."""
    if sandbox is None:
        yield None
        return
    policy = sandbox.policy(job.network)
    if policy.mode == "open":
        await on_output("system", "network: open (the host's network, chosen by the run's environment)")
        yield sandbox.with_network(SandboxNetwork(share_host=True))
        return
    if policy is not job.network:
        await on_output(
            "system",
            "network: the environment asks for open, which this worker's operator does not allow "
            "(serve --sandbox-open-network); the run reaches its model endpoint alone",
        )
    rules = model_rules(job, preset, base_env, policy, listed_private=sandbox.listed_private)

    async def refused(host: str, port: int, reason: str) -> None:
        await on_event([AgentEvent("egress_refused", {"host": host, "port": port, "reason": reason})])
        await on_output("system", f"network: refused {host}:{port} ({reason})")

    directory = Path(tempfile.mkdtemp(prefix="factoryctl-egress-"))
    proxy = EgressProxy(
        rules, directory / PROXY_SOCKET, refusal=sandbox.address_refusal or public_only, on_refused=refused
    )
    try:
        shutil.copyfile(RELAY_SOURCE, directory / RELAY_FILE)
        await proxy.start()
        python, python_dirs = relay_python()
        ports = {port: authority(host, port) for host, port in rules.trusted if host in LOOPBACK_HOSTS}
        forward = tuple(ports.values())
        network = SandboxNetwork(egress=directory, python=python, python_dirs=python_dirs, forward=forward)
        yield sandbox.with_network(network)
    finally:
        await proxy.close()
        if proxy.unrecorded:
            await on_output("system", f"network: {proxy.unrecorded} more refused destination(s) not recorded")
        shutil.rmtree(directory, ignore_errors=True)


def authority(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
