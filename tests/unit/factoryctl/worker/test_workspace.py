"""Jobs from claims, and the per-run workspace: files, sanitised names, .mcp.json, cleanup."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from factoryctl.worker import InvalidClaim, WorkspaceError
from factoryctl.worker.job import Attachment, Job, Outcome, assemble_prompt, redact
from factoryctl.worker.workspace import (
    MCP_CONFIG_FILE,
    PROMPT_FILE,
    attachment_names,
    create_workspace,
    mcp_config,
    remove_workspace,
    safe_file_name,
    workspace,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def claim(**extra: Any) -> dict[str, Any]:
    return {"run_id": "run_123", "prompt": "Do the thing", **extra}


# -- jobs ------------------------------------------------------------------------------------------


def test_assemble_prompt_orders_parts_and_skips_empty_ones() -> None:
    assert assemble_prompt("BASE", "SKILL", "PROMPT", "ENVELOPE") == "BASE\n\nSKILL\n\nPROMPT\n\nENVELOPE"
    assert assemble_prompt(None, "", "PROMPT\n", "  ") == "PROMPT"
    assert assemble_prompt("BASE\n\n", None, "PROMPT", None) == "BASE\n\nPROMPT"


def test_from_claim_parses_the_claim_response() -> None:
    payload = claim(
        agent_config={"name": "triage", "model_id": "model-a", "mcp_servers": {"fs": {"command": "mcp-fs"}}},
        attachments=[
            {"file_name": "event-payload.json", "mime_type": "application/json", "data": b64(b'{"a":1}')}
        ],
        environment={
            "repos": [{"url": "/srv/repo"}],
            "setup": ["make"],
            "env": {"A": 1},
            "secrets": {"T": "x"},
        },
        timeout_seconds=60,
        lease={"expires_at": "later"},
    )
    job = Job.from_claim(payload)
    assert job.run_id == "run_123"
    assert job.prompt == "Do the thing"
    assert job.model_id == "model-a"
    assert job.mcp_servers == {"fs": {"command": "mcp-fs"}}
    assert job.attachments == [Attachment("event-payload.json", "application/json", b'{"a":1}')]
    assert job.environment == {
        "repos": [{"url": "/srv/repo"}],
        "setup": ["make"],
        "env": {"A": "1"},
        "secrets": {"T": "x"},
    }
    assert job.environment_variables() == {"A": "1", "T": "x"}
    assert job.secret_values() == ["x"]
    assert job.timeout_seconds == 60.0
    assert job.agent_config["name"] == "triage"


def test_from_claim_assembles_prompt_parts_and_prefers_top_level_values() -> None:
    job = Job.from_claim(
        claim(
            base_prompt="You are careful.",
            skill_body="Skill steps.",
            envelope="Webhook w1, delivery d1.",
            config={"base_prompt": "ignored: informational", "model_id": "from-config"},
            model_id="top-level",
        )
    )
    assert job.prompt == "You are careful.\n\nSkill steps.\n\nDo the thing\n\nWebhook w1, delivery d1."
    assert job.model_id == "top-level"


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"prompt": "x"}, "run_id"),
        (claim(attachments=[{"file_name": "a", "data": "not base64!"}]), "base64"),
        (claim(attachments=[{"data": b64(b"x")}]), "file_name"),
        (claim(attachments={"a": 1}), "attachments must be a list"),
        (claim(environment={"repos": [{"path": "x"}]}), "url"),
        (claim(environment={"secrets": {"BAD-NAME": "x"}}), "environment variable name"),
        (claim(environment={"setup": "make"}), "setup must be a list"),
        (claim(mcp_servers={"fs": "mcp-fs"}), "mcp_servers.fs"),
        (claim(timeout_seconds=0), "timeout_seconds"),
    ],
)
def test_from_claim_rejects_malformed_payloads(payload: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidClaim, match=problem):
        Job.from_claim(payload)


def test_outcome_report_body() -> None:
    assert Outcome.succeeded().to_dict() == {"state": "SUCCEEDED"}
    assert Outcome.failed("boom", "harness_exit_2").to_dict() == {
        "state": "FAILED",
        "status_message": {"message": "boom", "error_code": "harness_exit_2", "retryable": False},
    }


def test_redact_replaces_secrets_longest_first_and_skips_tiny_values() -> None:
    secrets = ["abcd", "abcdefgh", "xyz"]
    assert redact("token abcdefgh, abcd, xyz", secrets) == "token ***, ***, xyz"


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("event-payload.json", "event-payload.json"),
        ("../../etc/passwd", "passwd"),
        ("/abs/path/x.json", "x.json"),
        ("..\\..\\windows\\evil.txt", "evil.txt"),
        ("a\x00b\n.txt", "ab.txt"),
        ("..", "attachment"),
        ("dir/", "attachment"),
        ("", "attachment"),
        (".hidden", ".hidden"),
    ],
)
def test_safe_file_name(name: str, safe: str) -> None:
    assert safe_file_name(name) == safe


def test_overlong_names_are_shortened_keeping_the_extension() -> None:
    name = safe_file_name("é" * 300 + ".json")
    assert name.endswith(".json") and len(name.encode()) <= 200


def test_attachment_names_are_unique_and_never_reserved() -> None:
    names = attachment_names(["a.txt", "x/a.txt", "PROMPT.md", ".mcp.json", "noext", "y/noext"])
    assert names == ["a.txt", "a-1.txt", "PROMPT-1.md", ".mcp-1.json", "noext", "noext-1"]


# -- workspace -------------------------------------------------------------------------------------


def make_job(**kwargs: Any) -> Job:
    attachments = [
        Attachment("event-payload.json", "application/json", b'{"action":"opened"}'),
        Attachment("../../escape.txt", "text/plain", b"contained"),
        Attachment("PROMPT.md", "text/markdown", b"not the prompt"),
    ]
    return Job(run_id="run_123", prompt="Fix it\nplease", attachments=attachments, **kwargs)


def test_workspace_holds_attachments_and_prompt_and_is_removed(tmp_path: Path) -> None:
    base = tmp_path / "work"
    with workspace(base, make_job()) as ws:
        assert ws.parent == base
        assert ws.name.startswith("run_123-")
        assert stat.S_IMODE(ws.stat().st_mode) == 0o700
        assert (ws / "event-payload.json").read_bytes() == b'{"action":"opened"}'
        assert (ws / "escape.txt").read_bytes() == b"contained"
        assert (ws / PROMPT_FILE).read_text() == "Fix it\nplease"
        assert (ws / "PROMPT-1.md").read_bytes() == b"not the prompt"
        assert not (ws / MCP_CONFIG_FILE).exists()
        assert sorted(p.name for p in tmp_path.rglob("escape.txt")) == ["escape.txt"]
        assert not (tmp_path / "escape.txt").exists()
    assert not ws.exists()
    assert list(base.iterdir()) == []


def test_each_run_gets_a_fresh_directory(tmp_path: Path) -> None:
    first = create_workspace(tmp_path, make_job())
    second = create_workspace(tmp_path, make_job())
    assert first != second
    remove_workspace(first)
    remove_workspace(second)


def test_keep_leaves_the_workspace_for_inspection(tmp_path: Path) -> None:
    with workspace(tmp_path, make_job(), keep=True) as ws:
        pass
    assert (ws / PROMPT_FILE).exists()


def test_workspace_is_removed_when_the_body_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), workspace(tmp_path, make_job()) as ws:
        raise RuntimeError("harness crashed")
    assert not ws.exists()


def test_read_only_leftovers_are_removed(tmp_path: Path) -> None:
    with workspace(tmp_path, make_job()) as ws:
        locked = ws / "cache" / "pkg"
        locked.mkdir(parents=True)
        (locked / "file").write_text("x")
        locked.chmod(0o500)
        (ws / "cache").chmod(0o500)
    assert not ws.exists()


def test_mcp_servers_are_written_as_mcp_json(tmp_path: Path) -> None:
    servers = {
        "fs": {"command": "mcp-fs", "env": {"ROOT": "/"}, "environment": "backend"},  # as a claim expands it
        "docs": {"url": "https://mcp.example/docs", "headers": {"Authorization": "Bearer t0ken"}},
        "events": {"url": "https://mcp.example/sse", "type": "sse"},
        "hosted": {"warp_id": "abc123"},
    }
    with workspace(tmp_path, make_job(mcp_servers=servers)) as ws:
        path = ws / MCP_CONFIG_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text()) == {
            "mcpServers": {
                "fs": {"command": "mcp-fs", "args": [], "env": {"ROOT": "/"}},
                "docs": {
                    "type": "http",
                    "url": "https://mcp.example/docs",
                    "headers": {"Authorization": "Bearer t0ken"},
                },
                "events": {"type": "sse", "url": "https://mcp.example/sse"},
            }
        }


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        ({"command": "id"}, "may not start a command"),  # a run's own config, or an older server's claim
        ({"command": "id", "environment": ""}, "may not start a command"),
        ({"error": "environment 'backend' defines no MCP server 'gh'"}, "defines no MCP server 'gh'"),
    ],
)
def test_a_command_no_environment_defined_is_never_written(
    tmp_path: Path, server: dict[str, Any], needle: str
) -> None:
    """Defence in depth (docs/agent-config.md, "MCP servers"): whatever the claim says, the worker writes a
    command only when the server expanded it from an environment's mcpServers."""
    with pytest.raises(WorkspaceError, match=needle):
        create_workspace(tmp_path, make_job(mcp_servers={"x": server}))
    assert list(tmp_path.iterdir()) == []


def test_mcp_server_without_a_transport_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="'broken'"):
        create_workspace(tmp_path, make_job(mcp_servers={"broken": {"args": ["x"]}}))
    assert list(tmp_path.iterdir()) == []
    assert mcp_config({}) == {"mcpServers": {}}


def test_unusable_base_directory_is_a_workspace_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(WorkspaceError):
        create_workspace(blocker / "work", make_job())


def test_run_id_cannot_escape_the_base_directory(tmp_path: Path) -> None:
    job = Job(run_id="../../evil", prompt="x")
    with workspace(tmp_path / "base", job) as ws:
        assert ws.parent == tmp_path / "base"
        assert os.path.commonpath([ws, tmp_path / "base"]) == str(tmp_path / "base")
