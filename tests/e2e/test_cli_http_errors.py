"""One failure, one answer: every HTTP verb maps the same failure to the same exit code and output.

The contract (docs/cli.md, "Exit codes"): 0 ok, 1 the server refused, 2 usage, 3 cannot connect.
``--format json`` adds one JSON object on stdout: the server's problem body, or
``{"error", "error_code"}`` when no answer came. Every verb runs as its own process against a real
``factoryctl serve``; "cannot connect" uses a port nothing listens on.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serve_support import Served, free_port, run_cli, serving

from factoryctl.client import FactoryClient

pytestmark = pytest.mark.slow

# One verb of each command group that talks HTTP, each naming objects that do not exist.
VERBS: dict[str, tuple[str, ...]] = {
    "runs get": ("runs", "get", "run_doesnotexist"),
    "runs list": ("runs", "list"),
    "webhooks get": ("webhooks", "get", "fa_doesnotexist", "wh_doesnotexist"),
    "webhooks list": ("webhooks", "list", "fa_doesnotexist"),
    "deliveries list": ("deliveries", "list", "fa_doesnotexist", "wh_doesnotexist"),
    "deliveries get": ("deliveries", "get", "fa_doesnotexist", "wh_doesnotexist", "d-1"),
    "automations test-filter": (
        "automations",
        "test-filter",
        "fa_doesnotexist",
        "au_doesnotexist",
        "--delivery-id",
        "d-1",
    ),
}
NOT_FOUND = [name for name in VERBS if name != "runs list"]  # an empty list is not an error


def cli(
    server: Served, *args: str, key: str | None = "default", url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``factoryctl ARGS --server URL`` (``url`` defaults to the server's) with ``key`` as
    ``FACTORY_API_KEY`` (``"default"``: the server's admin key, None: none)."""
    env = {"FACTORY_DATA_DIR": str(server.data_dir), "NO_COLOR": "1"}
    if key is not None:
        env["FACTORY_API_KEY"] = server.key if key == "default" else key
    return run_cli(*args, "--server", url or server.url, env=env, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("serve")) as served:
        yield served


def without_instance(problem: dict[str, object]) -> dict[str, object]:
    """A problem body minus ``instance`` (the request path, which differs by verb by design)."""
    return {k: v for k, v in problem.items() if k != "instance"}


def test_a_refused_key_is_exit_1_with_one_message_on_every_verb(server: Served, tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: refused\n")
    verbs = {**VERBS, "validate --server": ("validate", str(tmp_path))}
    texts = {name: cli(server, *argv, key="fk_wrong") for name, argv in verbs.items()}
    for name, done in texts.items():
        assert (done.returncode, done.stdout) == (1, ""), f"{name}: {done.stderr}"
    assert {done.stderr for done in texts.values()} == {texts["runs get"].stderr}
    assert texts["runs get"].stderr.endswith(" (authentication_required)\n")
    assert texts["runs get"].stderr.startswith("error: ")

    jsons = {name: cli(server, *argv, "--format", "json", key="fk_wrong") for name, argv in verbs.items()}
    problems = {}
    for name, done in jsons.items():
        assert done.returncode == 1, f"{name}: {done.stderr}"
        assert done.stderr == texts[name].stderr  # the person reading stderr sees the same line
        problems[name] = json.loads(done.stdout)
    first = problems["runs get"]
    assert first["status"] == 401 and first["error_code"] == "authentication_required"
    assert {"type", "title", "detail", "error"} <= first.keys()  # the server's problem body, as sent
    assert all(without_instance(p) == without_instance(first) for p in problems.values())


@pytest.mark.parametrize("name", NOT_FOUND)
def test_not_found_is_exit_1_with_the_problem(server: Served, name: str) -> None:
    text = cli(server, *VERBS[name])
    assert (text.returncode, text.stdout) == (1, ""), text.stderr
    [line] = text.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(" (resource_not_found)")

    as_json = cli(server, *VERBS[name], "--format", "json")
    assert as_json.returncode == 1 and as_json.stderr == text.stderr
    problem = json.loads(as_json.stdout)
    assert (problem["status"], problem["error_code"]) == (404, "resource_not_found")
    assert line == f"error: {problem['detail']} (resource_not_found)"


def test_field_errors_follow_the_message_on_every_verb(server: Served) -> None:
    run = cli(server, "runs", "create", "--prompt", "p", "--metadata", "bad key=v")
    with FactoryClient(server.url, server.key) as client:
        factory = client.factories.create("field-errors").uid
    hook = cli(server, "webhooks", "create", factory, "--name", "Bad Name")
    for done, field in ((run, "metadata.bad key"), (hook, "name")):
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        first, *fields = done.stderr.splitlines()
        assert first.startswith("error: ") and first.endswith(" (invalid_request)")
        assert any(line.startswith(f"  - {field}: ") for line in fields), done.stderr


def test_cannot_connect_is_exit_3_on_every_verb(server: Served, tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: unreachable\n")
    nowhere = f"http://127.0.0.1:{free_port()}"
    verbs = {**VERBS, "validate --server": ("validate", str(tmp_path))}
    calls = [(name, fmt) for name in verbs for fmt in ("text", "json")]
    with ThreadPoolExecutor(len(calls)) as pool:  # each process retries for ~1.5 s before it gives up
        done = dict(
            zip(
                calls,
                pool.map(lambda c: cli(server, *verbs[c[0]], "--format", c[1], url=nowhere), calls),
                strict=True,
            )
        )
    for name in verbs:
        text, as_json = done[name, "text"], done[name, "json"]
        assert (text.returncode, text.stdout) == (3, ""), f"{name}: {text.stderr}"
        [line] = text.stderr.splitlines()
        message = line.removeprefix("error: ").removesuffix(" (connection_failed)")
        assert message.startswith(f"cannot reach {nowhere}: "), line
        assert line == f"error: {message} (connection_failed)"
        assert (as_json.returncode, as_json.stderr) == (3, text.stderr), name
        assert json.loads(as_json.stdout) == {"error": message, "error_code": "connection_failed"}


def test_usage_errors_are_exit_2_with_nothing_on_stdout(server: Served, tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: usage\n")
    for name, argv in VERBS.items():
        no_key = cli(server, *argv, "--format", "json", key=None)
        assert (no_key.returncode, no_key.stdout) == (2, ""), f"{name}: {no_key.stderr}"
        assert "FACTORY_API_KEY" in no_key.stderr
    # validate --server alone needs no key: the server's public tiers answer (and stderr says so).
    keyless = cli(server, "validate", str(tmp_path), "--format", "json", key=None)
    assert keyless.returncode == 0 and json.loads(keyless.stdout)["factories"][0]["name"] == "usage"
    assert "no FACTORY_API_KEY" in keyless.stderr
    for argv in (
        ("runs", "create", "--prompt", "p", "--mcp", "docs={not json"),
        ("runs", "create"),  # neither --prompt nor --skill
        ("deliveries", "list", "fa_x", "wh_x", "--limit", "0"),
        ("webhooks", "create", "fa_x", "--name", "n", "--secret-from-stdin"),  # stdin is empty
        ("runs", "list", "--limit", "many"),  # argparse's own check
    ):
        done = cli(server, *argv, "--format", "json")
        assert (done.returncode, done.stdout) == (2, ""), f"{argv}: {done.stderr}"
        assert "error: " in done.stderr
