"""Secret resolution in the worker: MCP and environment secrets reach the job and are redacted."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from factoryctl.worker import EnvironmentSetupFailed
from factoryctl.worker.harness import RedactingEmitter
from factoryctl.worker.job import Job
from factoryctl.worker.resolve import RemoteSecrets, resolve_claim

CLAIM = {
    "run_id": "run_1",
    "prompt": "go",
    "agent_config": {
        "mcp_servers": {
            "gh": {"command": "gh-mcp", "env": {"TOKEN": "secret:GH_TOKEN", "MODE": "plain"}},
            "docs": {"url": "https://d.example", "headers": {"Authorization": "secret:DOCS_KEY"}},
        }
    },
    "environment": {"env": {"A": "1"}, "secret_refs": ["db-password"]},
}
SERVER = {"GH_TOKEN": "ghp_mcp_1234", "DOCS_KEY": "Bearer docs_5678", "db-password": "pw_env_9012"}


def server(values: Mapping[str, str]) -> RemoteSecrets:
    asked: list[str] = []

    async def fetch(run_id: str) -> Mapping[str, str]:
        asked.append(run_id)
        return values

    source = RemoteSecrets(fetch)
    source.asked = asked  # type: ignore[attr-defined]
    return source


async def test_mcp_secret_values_are_redacted_like_environment_secrets() -> None:
    job = Job.from_claim(await resolve_claim(CLAIM, server(SERVER)))
    assert job.mcp_servers["gh"]["env"] == {"TOKEN": "ghp_mcp_1234", "MODE": "plain"}
    assert job.mcp_servers["docs"]["headers"] == {"Authorization": "Bearer docs_5678"}
    assert job.environment_variables() == {"A": "1", "db_password": "pw_env_9012"}
    assert set(job.secret_values()) == {"ghp_mcp_1234", "Bearer docs_5678", "pw_env_9012"}

    seen: list[tuple[str, str]] = []

    async def collect(stream: str, line: str) -> None:
        seen.append((stream, line))

    emit = RedactingEmitter(collect, job.secret_values())
    await emit("stdout", '{"TOKEN": "ghp_mcp_1234", "Authorization": "Bearer docs_5678"} pw_env_9012')
    assert seen == [("stdout", '{"TOKEN": "***", "Authorization": "***"} ***')]


async def test_mcp_secrets_without_an_environment_are_still_redacted() -> None:
    claim = {k: v for k, v in CLAIM.items() if k != "environment"}
    job = Job.from_claim(await resolve_claim(claim, server(SERVER)))
    assert job.environment is None
    assert set(job.secret_values()) == {"ghp_mcp_1234", "Bearer docs_5678"}


async def test_remote_secrets_fail_the_setup_for_a_secret_the_server_did_not_answer() -> None:
    partial = {k: v for k, v in SERVER.items() if k != "DOCS_KEY"}
    with pytest.raises(EnvironmentSetupFailed, match="team secret 'DOCS_KEY' does not exist"):
        await resolve_claim(CLAIM, server(partial))


async def test_remote_secrets_ask_nothing_when_the_run_references_no_secret() -> None:
    source = server(SERVER)
    job = Job.from_claim(await resolve_claim({"run_id": "run_2", "prompt": "go"}, source))
    assert job.secret_values() == [] and source.asked == []  # type: ignore[attr-defined]
