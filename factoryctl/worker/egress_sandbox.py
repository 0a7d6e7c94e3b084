"""A run's network inside its bubblewrap sandbox (docs/workers.md, "Network"): what
:class:`~factoryctl.worker.sandbox.Sandbox` adds to its command line for one run.

Either the host's network (``open``: ``--share-net``), or the egress relay: the run's egress directory
(the proxy's socket and the relay script) bound read-only at :data:`EGRESS_MOUNT`, and the command started
through :mod:`factoryctl.worker.egress_relay` by an interpreter the sandbox sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

EGRESS_MOUNT = "/run/factoryctl-egress"  # the run's egress directory inside the sandbox
RELAY_FILE = "relay.py"
PROXY_SOCKET = "proxy.sock"


@dataclass(frozen=True)
class SandboxNetwork:
    """One run's network inside its sandbox: the host's (``share_host``), or the egress relay. ``egress``:
    the host directory holding the proxy's socket and the relay script; ``python``: an interpreter the
    sandbox sees (``python_dirs``: what must be bound for it, when it is outside the system directories);
    ``forward``: ``host:port`` of loopback model endpoints, whose ports the relay also listens on."""

    share_host: bool = False
    egress: Path | None = None
    python: str = "/usr/bin/python3"
    python_dirs: tuple[Path, ...] = ()
    forward: tuple[str, ...] = ()

    def bwrap_args(self) -> list[str]:
        if self.share_host:
            return ["--share-net"]
        out: list[str] = []
        for path in self.python_dirs:
            out += ["--ro-bind", str(path), str(path)]
        if self.egress is not None:
            out += ["--ro-bind", str(self.egress), EGRESS_MOUNT]
        return out

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started through the relay (unchanged for the host's network)."""
        if self.share_host or self.egress is None:
            return list(argv)
        relay = [self.python, "-I", "-S", f"{EGRESS_MOUNT}/{RELAY_FILE}", f"{EGRESS_MOUNT}/{PROXY_SOCKET}"]
        for authority in self.forward:
            relay += ["--forward", authority]
        return [*relay, "--", *argv]
