"""``serve``'s run limits as the CLI edge reads them (docs/operations.md): flags first, then ``FACTORY_*``
variables, then the defaults; a bad value stops the start with a message naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from factoryctl.cli import build_parser
from factoryctl.context import CliContext
from factoryctl.serve.options import ServeOptions
from factoryctl.worker.limits import GIB, Limits


def options(argv: list[str], env: dict[str, str], tmp_path: Path) -> ServeOptions:
    args = build_parser(["serve", *argv]).parse_args(["serve", "--workers", "0", *argv])
    return ServeOptions.from_args(CliContext(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'f.db'}", env), args)


def test_defaults_then_variables_then_flags(tmp_path: Path) -> None:
    assert options([], {}, tmp_path).limits == Limits()
    env = {"FACTORY_MEMORY_LIMIT": "2G", "FACTORY_PROCESS_LIMIT": "64", "FACTORY_TIME_LIMIT": "600"}
    assert options([], env, tmp_path).limits == Limits(2 * GIB, 64, Limits().disk_bytes, 600.0)
    flagged = options(["--memory-limit", "1G", "--disk-limit", "0"], env, tmp_path).limits
    assert flagged == Limits(GIB, 64, None, 600.0)


def test_a_bad_limit_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'many' is not a number of processes"):
        options([], {"FACTORY_PROCESS_LIMIT": "many"}, tmp_path)


def test_what_environments_may_ask_of_the_shared_machine_is_off_until_the_operator_says(
    tmp_path: Path,
) -> None:
    """docs/workers.md, "Network": service-hosted runs share the server's machine with every team."""
    plain = options([], {}, tmp_path)
    assert (plain.sandbox_open_network, plain.sandbox_private_egress) == (False, False)
    env = {"FACTORY_SANDBOX_OPEN_NETWORK": "yes"}
    assert options([], env, tmp_path).sandbox_open_network is True
    flagged = options(["--sandbox-private-egress"], {}, tmp_path)
    assert (flagged.sandbox_open_network, flagged.sandbox_private_egress) == (False, True)
    assert (
        options([], {}, tmp_path).self_heal is True
        and options(["--no-self-heal"], {}, tmp_path).self_heal is False
    )
