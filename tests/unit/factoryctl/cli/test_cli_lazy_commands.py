"""The lazy command table of ``factoryctl.cli``: what it lists, what each command line imports.

Import checks run ``factoryctl`` in a fresh interpreter (this test process has imported everything
already) and read back ``sys.modules``: a module that creeps back into ``--help`` or into an offline
``validate`` fails here, not only in ``bench/cli_startup.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factoryctl.cli import COMMANDS, build_parser, command_name

REPO = Path(__file__).resolve().parents[4]
# Run main(argv), then print the imported modules as the last line of stderr.
PROBE = """
import json, sys
from factoryctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write("\\n" + json.dumps(sorted(sys.modules)) + "\\n")
"""
SERVER_SIDE = ("sqlalchemy", "alembic", "aiohttp", "api", "store.db", "store.models")
CLIENT_SIDE = ("httpx", "factoryctl.client", "rich")


def imported(*argv: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTORY_", "GITHUB_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env | {"NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def loaded(modules: set[str], *packages: str) -> set[str]:
    return {m for m in modules for p in packages if m == p or m.startswith(p + ".")}


def registered_help(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {choice.dest: choice.help for choice in sub._choices_actions}


def test_the_table_lists_every_command_with_the_help_its_module_registers() -> None:
    """``--help`` shows the table; a command's own parser shows what its module says: they must agree."""
    full = registered_help(build_parser())  # every module imported
    assert full == {name: command.help for name, command in COMMANDS.items()}
    assert list(full) == list(COMMANDS)
    assert registered_help(build_parser([])) == full  # nothing imported, the same listing


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        ([], None),
        (["--help"], None),
        (["--version"], None),
        (["runs", "list", "--server", "http://x"], "runs"),
        (["--database", "validate", "plan", "tree"], "plan"),  # --database takes "validate"
        (["--data-dir=/tmp/d", "keys", "list"], "keys"),
        (["--datab", "sqlite://", "deliveries", "list"], "deliveries"),  # argparse's abbreviations
        (["-h", "webhooks"], "webhooks"),
        (["no-such-command"], None),
        (["--database"], None),  # the real parser reports the missing value
    ],
)
def test_command_name_finds_the_command_as_argparse_will(argv: list[str], name: str | None) -> None:
    assert command_name(argv) == name


def test_help_imports_no_command_module() -> None:
    modules = imported("--help")
    assert loaded(modules, "factoryctl.commands") == set()
    assert loaded(modules, *SERVER_SIDE, *CLIENT_SIDE, "store", "reconciler", "yaml", "asyncio") == set()


def test_offline_validate_imports_the_loader_only() -> None:
    modules = imported("validate", "example-factory")
    assert "reconciler.loader" in modules and "reconciler.rules" in modules  # it did validate
    assert loaded(modules, "factoryctl.commands") == {"factoryctl.commands", "factoryctl.commands.validate"}
    assert loaded(modules, *SERVER_SIDE, *CLIENT_SIDE, "reconciler.online", "asyncio") == set()


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["runs", "list", "--help"], "runs"),
        (["schedules", "list", "--help"], "schedules"),
        (["webhooks", "list", "--help"], "webhooks"),
        (["automations", "--help"], "webhooks"),
        (["keys", "create", "--help"], "keys"),
        (["secrets", "--help"], "secrets"),
        (["plan", "--help"], "plan_apply"),
        (["validate", "--help"], "validate"),
    ],
)
def test_a_command_imports_its_own_module_and_no_client_or_store(argv: list[str], module: str) -> None:
    modules = imported(*argv)
    shared = {"factoryctl.commands", "factoryctl.commands._http", "factoryctl.commands._output"}
    commands = loaded(modules, "factoryctl.commands") - shared
    assert commands == {f"factoryctl.commands.{module}"}
    assert loaded(modules, *SERVER_SIDE, *CLIENT_SIDE) == set()


def test_copied_constants_match_the_store() -> None:
    """Parsers are built without the store; the values they repeat must stay the store's."""
    from factoryctl.client.names import PREFIX
    from factoryctl.commands import keys, plan_apply, secrets
    from store.apikeys import ROLES
    from store.ids import AUTOMATION, FACTORY, SCHEDULE, WEBHOOK
    from store.teams import DEFAULT_TEAM

    assert keys.ROLES == ROLES
    assert PREFIX == {"factory": FACTORY, "webhook": WEBHOOK, "automation": AUTOMATION, "schedule": SCHEDULE}
    assert plan_apply.DEFAULT_TEAM == secrets.DEFAULT_TEAM == DEFAULT_TEAM
