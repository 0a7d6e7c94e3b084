"""The ``claude`` preset: Claude Code (``@anthropic-ai/claude-code``) in print mode with its JSON-lines
output (docs/agents.md, "Claude Code").

The CLI runs as ``claude -p --output-format stream-json --verbose --dangerously-skip-permissions``, the
prompt on stdin (argv would cap it at 128 KiB), with its configuration directory inside the run's agent
home. Every tool runs without a prompt: nobody is there to answer one, the run has its own workspace and
agent home, and a service-hosted worker runs it in the sandbox (docs/workers.md). As root, Claude Code
refuses that flag unless ``IS_SANDBOX=1`` says the process is in such a sandbox, so the preset sets it.

Its stdout is one JSON object per line: ``{"type": "system", "subtype": "init", "session_id"}`` first,
then ``assistant`` lines (content blocks ``text`` / ``tool_use``), ``user`` lines (``tool_result``
blocks), and one ``result`` line (``is_error``, ``subtype``, ``result``, ``usage``, ``total_cost_usd``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import (
    AgentEvent,
    Context,
    Invocation,
    Verdict,
    as_mapping,
    semver,
    typed_object,
)
from factoryctl.worker.resolve import env_var_name
from factoryctl.worker.workspace import mcp_config, skill_text

CONFIG_DIR = ".claude"  # CLAUDE_CONFIG_DIR, under the agent home: settings, sessions, skills
PROJECTS_DIR = "projects"  # under CONFIG_DIR: <project>/<session id>.jsonl
PROJECT_NAME_MAX = 200
MCP_FILE = "factory-mcp.json"  # under the agent home; given with --mcp-config
# Claude Code's own switches for everything besides the model requests: no telemetry, error reports,
# update checks or reachability probes (offline, it then calls nothing but POST /v1/messages).
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}
# The model endpoint and credentials Claude Code reads itself, passed on from the run's environment.
PROVIDER_ENV = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
OAUTH_TOKEN_PREFIX = "sk-ant-oat"  # noqa: S105 - a `claude setup-token` token starts so, not an API key
DEFAULT_MODELS = frozenset({"", "auto", "default"})  # the CLI's own default model


class ClaudePreset:
    name = "claude"
    executable = "claude"
    minimum_version: tuple[int, ...] = (2, 1, 0)

    def version(self, output: str) -> tuple[int, ...] | None:
        """``2.1.332 (Claude Code)`` -> ``(2, 1, 332)``."""
        return semver(output)

    def invocation(self, job: Job, executable: str, context: Context) -> Invocation:
        argv = [
            executable,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--strict-mcp-config",  # only the run's servers, never a checkout's .mcp.json
        ]
        model = job.agent_model_id or ""
        if model not in DEFAULT_MODELS:
            argv += ["--model", model]
        if context.resume:
            argv += ["--resume", context.resume]
        files: dict[str, str] = {}
        if job.mcp_servers:
            files[MCP_FILE] = json.dumps(mcp_config(job.mcp_servers), indent=2, sort_keys=True)
            argv += ["--mcp-config", str(context.home / MCP_FILE)]
        for skill in job.skills:
            files[f"{CONFIG_DIR}/skills/{skill['skill_name']}/SKILL.md"] = skill_text(skill)
        env = {
            "HOME": str(context.home),
            "CLAUDE_CONFIG_DIR": str(context.home / CONFIG_DIR),
            "IS_SANDBOX": "1",
            **QUIET_ENV,
        }
        env.update({k: context.env[k] for k in PROVIDER_ENV if context.env.get(k)})
        secret = _auth_secret(job.agent_config, context.env)
        if secret:
            env[
                "CLAUDE_CODE_OAUTH_TOKEN" if secret.startswith(OAUTH_TOKEN_PREFIX) else "ANTHROPIC_API_KEY"
            ] = secret
        return Invocation(argv=argv, env=env, files=files, stdin=job.prompt)

    def parser(self) -> ClaudeParser:
        return ClaudeParser()

    def session_paths(self) -> tuple[str, ...]:
        """``CLAUDE_CONFIG_DIR/projects/<project>/<session>.jsonl``."""
        return (f"{CONFIG_DIR}/{PROJECTS_DIR}",)

    def session_moves(self, files: Sequence[str], context: Context) -> dict[str, str]:
        """Each project's files into the new workspace's project directory (:func:`project_dir`)."""
        target = project_dir(str(context.workspace))
        if target is None:
            return {}
        moves: dict[str, str] = {}
        for name in files:
            parts = name.split("/")
            if len(parts) >= 4 and parts[:2] == [CONFIG_DIR, PROJECTS_DIR] and parts[2] != target:
                moves[name] = "/".join([CONFIG_DIR, PROJECTS_DIR, target, *parts[3:]])
        return moves


def project_dir(cwd: str) -> str | None:
    """The directory Claude Code files a working directory's sessions under: every character but ASCII
    letters and digits becomes ``-``; None past 200 characters (the CLI then appends a hash of its own)."""
    name = re.sub(r"[^a-zA-Z0-9]", "-", cwd)
    return name if len(name) <= PROJECT_NAME_MAX else None


def _auth_secret(config: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The managed secret that is the CLI's credential: ``harness.auth`` ``{source: managedSecret,
    secret_name}`` (definitions) or ``harness_auth_secrets.claude_auth_secret_name`` (the SDK); the
    worker injects it as the environment variable named after the secret."""
    auth = as_mapping(as_mapping(config.get("harness")).get("auth"))
    name = auth.get("secret_name") if auth.get("source") == "managedSecret" else None
    name = name or as_mapping(config.get("harness_auth_secrets")).get("claude_auth_secret_name")
    if not isinstance(name, str) or not name:
        return None
    return env.get(env_var_name(name)) or env.get(name) or None


class ClaudeParser:
    """Claude Code's ``stream-json`` lines -> :class:`AgentEvent` values, and its verdict."""

    def __init__(self) -> None:
        self._session: str | None = None
        self._result: dict[str, Any] | None = None

    def is_structured(self, line: str) -> bool:
        return typed_object(line) is not None

    def feed(self, line: str) -> list[AgentEvent]:
        item = typed_object(line)
        if item is None:
            return []
        kind = item.get("type")
        events: list[AgentEvent] = []
        session_id = item.get("session_id")
        if isinstance(session_id, str) and session_id and session_id != self._session:
            self._session = session_id
            events.append(base.session(session_id))
        if kind == "assistant":
            role = "system" if item.get("is_api_error_message") else "assistant"
            events += self._assistant(_blocks(item), role)
        elif kind == "user":
            events += [self._tool_result(b) for b in _blocks(item) if b.get("type") == "tool_result"]
        elif kind == "result":
            self._result = item
            events += _usage(item)
        return events

    def verdict(self) -> Verdict | None:
        result = self._result
        if result is None:
            return None
        text = result.get("result")
        ok = not result.get("is_error") and result.get("subtype") == "success"
        message: str | None = text if isinstance(text, str) and text else None
        if message is None:
            errors = result.get("errors")
            listed = [str(e) for e in errors] if isinstance(errors, list) else []
            message = "; ".join(listed) or (None if ok else f"Claude Code ended with {result.get('subtype')}")
        return Verdict(ok=ok, message=message)

    @staticmethod
    def _assistant(blocks: list[dict[str, Any]], role: str) -> list[AgentEvent]:
        events = []
        for block in blocks:
            if block.get("type") == "text" and str(block.get("text") or "").strip():
                events.append(base.message(str(block["text"]), role=role))
            elif block.get("type") == "tool_use":
                events.append(
                    base.tool_call(str(block.get("id") or ""), str(block.get("name")), block.get("input"))
                )
        return events

    @staticmethod
    def _tool_result(block: Mapping[str, Any]) -> AgentEvent:
        content = block.get("content")
        if isinstance(content, list):  # [{type: text, text}, {type: image, ...}]
            output = "\n".join(
                str(c.get("text", "")) if c.get("type") == "text" else f"[{c.get('type')}]"
                for c in content
                if isinstance(c, Mapping)
            )
        else:
            output = "" if content is None else str(content)
        return base.tool_result(str(block.get("tool_use_id") or ""), not block.get("is_error"), output)


def _usage(result: Mapping[str, Any]) -> list[AgentEvent]:
    """The invocation's tokens (cache reads and writes count as input) and cost. On a resumed session
    ``total_cost_usd`` (and ``modelUsage``) are the whole session's, earlier attempts included, while
    ``usage`` is this invocation's: the cost is then left out rather than counted twice."""
    usage = as_mapping(result.get("usage"))
    if not usage:
        return []
    input_tokens = sum(
        _int(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    output_tokens = _int(usage.get("output_tokens"))
    session_tokens = sum(
        _int(m.get(k))
        for m in as_mapping(result.get("modelUsage")).values()
        if isinstance(m, Mapping)
        for k in ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    )
    cost = result.get("total_cost_usd")
    cumulative = session_tokens > input_tokens + output_tokens
    cost_usd = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    return [base.usage(input_tokens, output_tokens, None if cumulative else cost_usd)]


def _blocks(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = as_mapping(item.get("message")).get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


PRESET = ClaudePreset()
