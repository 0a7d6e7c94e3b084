"""The one runner for every command that talks to the API over HTTP (``runs``, ``webhooks``, ...).

Each such command used to build its own client and map failures its own way, so the same failure
gave different exit codes and output depending on the verb. Here, once for all of them:

- the client: the server from ``--server`` (else ``FACTORY_API_URL``), the key from
  ``FACTORY_API_KEY`` (else the file ``FACTORY_API_KEY_FILE`` names, which a CLI context supplies),
  one timeout (:data:`TIMEOUT`), ``X-Factory-Source: CLI`` (runs record it);
- the exit codes: 0 ok, 1 the server refused (a problem answer), 2 usage, 3 cannot connect;
- the error output: ``error: <detail> (<error_code>)`` plus one ``  - field: message`` line per
  invalid field on stderr; with ``--format json`` also one JSON object on stdout: the server's
  problem+json body as sent, or ``{"error": ..., "error_code": ...}`` when there is no answer.

The client (httpx) is imported when a call is made, never when the parser is built: ``--help``
stays cheap. The contract is documented in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from factoryctl import __version__
from factoryctl.commands._output import print_json

if TYPE_CHECKING:
    from factoryctl.client import FactoryClient
    from factoryctl.context import CliContext

EXIT_OK = 0
EXIT_REFUSED = 1  # the server answered with an error (4xx/5xx problem), or with a body it should not send
EXIT_USAGE = 2  # bad flags or input; argparse exits 2 as well
EXIT_UNREACHABLE = 3  # no answer: connection refused, DNS, TLS, timeout

TIMEOUT_SECONDS = 60.0  # per attempt; long enough for a paged `runs logs`, short enough for a script
CONNECT_TIMEOUT_SECONDS = 10.0

Action = Callable[["FactoryClient"], "int | None"]
Handler = Callable[["CliContext", argparse.Namespace], int]


class UsageError(Exception):
    """A problem with the command line or its input, found by the command itself (exit 2)."""


def skill_config(skills: list[str] | None) -> dict[str, Any]:
    """The config keys of ``--skill`` given zero, one or more times: one is ``skill_spec``; several are
    the SDK's ordered ``skills`` list, the first being the run's skill (docs/agent-config.md, "A list of
    skills")."""
    if not skills:
        return {}
    return {"skill_spec": skills[0]} if len(skills) == 1 else {"skills": list(skills)}


def common_options() -> argparse.ArgumentParser:
    """The flags every HTTP verb takes (a parent parser), so they are spelled the same everywhere."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", metavar="URL", help="API base URL (env FACTORY_API_URL)")
    common.add_argument("--format", choices=("text", "json"), default="text")
    return common


def open_client(ctx: CliContext, server: str | None, *, key_required: bool = True) -> FactoryClient:
    """The typed client for ``server`` (else ``FACTORY_API_URL``) and ``FACTORY_API_KEY``; without
    ``key_required`` a missing key makes a client of the public endpoints only."""
    import httpx

    from factoryctl.client import FactoryClient

    key = ctx.api_key() or _key_from_file(ctx.env.get("FACTORY_API_KEY_FILE"))
    if key is None and key_required:
        raise UsageError(
            "no API key: set FACTORY_API_KEY (create one with 'factoryctl keys create'), or run where "
            "'factoryctl serve' wrote a CLI context (docs/cli.md, \"CLI context\")"
        )
    return FactoryClient(
        ctx.api_url(server),
        key,
        timeout=httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
        default_headers={"X-Factory-Source": "CLI", "User-Agent": f"factoryctl/{__version__}"},
    )


def _key_from_file(path: str | None) -> str | None:
    """The key in ``FACTORY_API_KEY_FILE`` (a CLI context sets it to the key file ``serve`` wrote)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            key = fh.read().strip()
    except OSError as exc:
        raise UsageError(f"cannot read the API key file {path}: {exc.strerror}") from exc
    if not key:
        raise UsageError(f"the API key file {path} is empty")
    return key


def run(ctx: CliContext, args: argparse.Namespace, action: Action, *, key_required: bool = True) -> int:
    """Call ``action`` with a client and turn its outcome into an exit code (and error output).

    ``action`` prints its own success output and returns None (exit 0) or an exit code of its own
    (``validate --server``: 1 when the definitions are invalid).
    """
    from factoryctl.client import APIConnectionError, APIError, APIStatusError, APITimeoutError
    from factoryctl.client.names import NameProblem

    as_json = getattr(args, "format", None) == "json"
    try:
        with open_client(ctx, getattr(args, "server", None), key_required=key_required) as client:
            code = action(client)
    except (UsageError, NameProblem) as exc:  # NameProblem: a name that picks no single object
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except APIStatusError as exc:
        problem = exc.body if isinstance(exc.body, dict) and exc.error_code else None
        error_code = exc.error_code if problem is not None else "invalid_response"  # e.g. a proxy's HTML
        if as_json:
            fallback = {"status": exc.status_code, "error": exc.detail, "error_code": error_code}
            print_json(problem if problem is not None else fallback)
        print(f"error: {exc.detail} ({error_code})", file=sys.stderr)
        for item in exc.errors:
            print(f"  - {item.field}: {item.message}", file=sys.stderr)
        return EXIT_REFUSED
    except APIConnectionError as exc:
        error_code = "timeout" if isinstance(exc, APITimeoutError) else "connection_failed"
        message = f"cannot reach {ctx.api_url(getattr(args, 'server', None))}: {exc.message}"
        return _client_side(as_json, message, error_code, EXIT_UNREACHABLE)
    except APIError as exc:  # a 2xx answer that is not the documented shape
        return _client_side(as_json, exc.message, "invalid_response", EXIT_REFUSED)
    return EXIT_OK if code is None else code


def handler(action: Callable[[FactoryClient, argparse.Namespace], int | None]) -> Handler:
    """A ``handler(ctx, args)`` for argparse that runs ``action(client, args)`` through :func:`run`."""

    def call(ctx: CliContext, args: argparse.Namespace) -> int:
        return run(ctx, args, lambda client: action(client, args))

    return call


def _client_side(as_json: bool, message: str, error_code: str, exit_code: int) -> int:
    if as_json:
        print_json({"error": message, "error_code": error_code})
    print(f"error: {message} ({error_code})", file=sys.stderr)
    return exit_code
