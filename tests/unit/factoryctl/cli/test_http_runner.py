"""``factoryctl.commands._http.run`` outside the network: usage errors and the action's own exit code.

Answers from a server (exit 1) and no answer (exit 3) are covered end to end, across every verb, by
``tests/e2e/test_cli_http_errors.py``.
"""

from __future__ import annotations

import argparse

import pytest

from factoryctl.commands import _http
from factoryctl.context import CliContext

# Nothing is sent in these tests: the client connects lazily and no action below makes a call.
SERVER = "http://127.0.0.1:9"


def context(**env: str) -> CliContext:
    return CliContext.from_args(None, "/tmp/factoryctl-unit", env=env)


def args(fmt: str = "text") -> argparse.Namespace:
    return argparse.Namespace(server=SERVER, format=fmt)


def test_no_key_is_a_usage_error_and_the_action_never_runs(capsys: pytest.CaptureFixture[str]) -> None:
    ran = []
    code = _http.run(context(), args("json"), lambda client: ran.append(client))
    out, err = capsys.readouterr()
    assert (code, ran, out) == (_http.EXIT_USAGE, [], "")
    assert err.startswith("error: no API key: set FACTORY_API_KEY") and "CLI context" in err


def test_a_usage_error_raised_by_the_action_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    def action(client: object) -> None:
        raise _http.UsageError("--limit must be at least 1")

    code = _http.run(context(FACTORY_API_KEY="fk_x"), args("json"), action)
    assert code == 2 and capsys.readouterr() == ("", "error: --limit must be at least 1\n")


@pytest.mark.parametrize(("returned", "code"), [(None, 0), (0, 0), (1, 1)])
def test_the_action_decides_its_own_success_code(returned: int | None, code: int) -> None:
    assert _http.run(context(FACTORY_API_KEY="fk_x"), args(), lambda client: returned) == code


def test_the_client_carries_the_cli_settings() -> None:
    ctx = context(FACTORY_API_KEY="fk_x", FACTORY_API_URL="http://api.test/")
    with _http.open_client(ctx, None) as client:
        assert client.base_url == "http://api.test"
        assert client.options.headers["X-Factory-Source"] == "CLI"
        assert client.options.timeout.read == _http.TIMEOUT_SECONDS
        assert client.options.timeout.connect == _http.CONNECT_TIMEOUT_SECONDS
    with _http.open_client(ctx, "http://flag.test") as client:
        assert client.base_url == "http://flag.test"  # --server wins over FACTORY_API_URL
