"""How a run's network changes its bwrap command line (factoryctl/worker/egress_sandbox.py; docs/workers.md,
"Network"): nothing without one, ``--share-net`` for ``open``, the relay and its directory otherwise."""

from __future__ import annotations

from pathlib import Path

from factoryctl.worker.egress_sandbox import EGRESS_MOUNT, SandboxNetwork
from factoryctl.worker.sandbox import Sandbox


def test_without_a_network_the_sandbox_has_none_and_runs_argv_as_is(tmp_path: Path) -> None:
    argv = Sandbox("/usr/bin/bwrap").argv(["claude", "-p"], tmp_path)
    assert "--unshare-all" in argv and "--share-net" not in argv and EGRESS_MOUNT not in argv
    assert argv[argv.index("--") + 1 :] == ["claude", "-p"]


def test_open_shares_the_host_network_only(tmp_path: Path) -> None:
    shared = Sandbox("/usr/bin/bwrap").with_network(SandboxNetwork(share_host=True))
    argv = shared.argv(["claude"], tmp_path)
    assert argv.index("--unshare-all") < argv.index("--share-net")
    assert argv[argv.index("--") + 1 :] == ["claude"]


def test_the_relay_starts_the_command_with_its_directory_bound_read_only(tmp_path: Path) -> None:
    base = Sandbox("/usr/bin/bwrap")
    network = SandboxNetwork(
        egress=tmp_path / "egress",
        python="/opt/py/bin/python3",
        python_dirs=(Path("/opt/py"),),
        forward=("127.0.0.1:4010",),
    )
    argv = base.with_network(network).argv(["claude", "-p"], tmp_path)
    assert "--unshare-all" in argv and "--share-net" not in argv
    assert ["--ro-bind", str(tmp_path / "egress"), EGRESS_MOUNT] == argv[
        argv.index(str(tmp_path / "egress")) - 1 : argv.index(str(tmp_path / "egress")) + 2
    ]
    assert ["--ro-bind", "/opt/py", "/opt/py"] == argv[argv.index("/opt/py") - 1 : argv.index("/opt/py") + 2]
    assert argv[argv.index("--") + 1 :] == [
        "/opt/py/bin/python3", "-I", "-S", f"{EGRESS_MOUNT}/relay.py", f"{EGRESS_MOUNT}/proxy.sock",
        "--forward", "127.0.0.1:4010", "--", "claude", "-p",
    ]  # fmt: skip
    assert base.network is None  # the worker's sandbox is unchanged; the run has its own copy
