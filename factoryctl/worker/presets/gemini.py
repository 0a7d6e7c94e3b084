"""The ``gemini`` preset: Gemini CLI (``@google/gemini-cli``) headless, with its JSON-lines output
(docs/agents.md, "Gemini CLI").

The CLI runs as ``gemini --output-format stream-json --approval-mode yolo [-m MODEL] [--resume ID]`` in
the run's workspace, the prompt on stdin: with stdin not a terminal the CLI runs non-interactively and
reads its prompt there, so it is not capped at 128 KiB as one argv string is. ``yolo`` approves every
tool: nobody is there to answer a prompt, and the run has its own workspace, agent home and (service-hosted)
sandbox. ``GEMINI_CLI_TRUST_WORKSPACE=true`` trusts the checkout, else the CLI runs in restricted mode.

Its settings live in ``<agent home>/.gemini/settings.json`` (HOME is the agent home): the auth type
(``gemini-api-key``: with ``GOOGLE_GEMINI_BASE_URL`` set the CLI would otherwise pick its ``gateway`` type,
which headless mode refuses), no telemetry, usage statistics or update checks, and the run's MCP servers.
Skills go to ``.gemini/skills/<name>/SKILL.md``, which the CLI lists to the model. Sessions are kept under
``.gemini/tmp/<project>/chats/``.

Its stdout is one JSON object per line: ``init`` (``session_id``, ``model``), ``message`` (``role``,
``content``; assistant text arrives in ``delta`` pieces), ``tool_use`` (``tool_name``, ``tool_id``,
``parameters``), ``tool_result`` (``tool_id``, ``status``, ``output`` / ``error``), ``error`` (a warning
or a failed turn) and one ``result`` (``status``, ``error``, ``stats`` with the tokens).
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

CONFIG_DIR = ".gemini"  # under HOME, the run's agent home: settings, sessions, skills
TMP_DIR = "tmp"  # under CONFIG_DIR: <project>/chats/ holds the sessions
KEY_VARIABLE = "GEMINI_API_KEY"
BASE_URL_VARIABLE = "GOOGLE_GEMINI_BASE_URL"
AUTH_TYPE = "gemini-api-key"
DEFAULT_MODELS = frozenset({"", "auto", "default"})  # the CLI routes between its own models
# Keys of Gemini CLI's MCP server settings (its schema refuses any other).
MCP_KEYS = ("command", "args", "env", "cwd", "url", "httpUrl", "headers", "type", "timeout", "description")


class GeminiPreset:
    name = "gemini"
    executable = "gemini"
    minimum_version: tuple[int, ...] = (0, 61, 0)

    def version(self, output: str) -> tuple[int, ...] | None:
        """``0.61.0`` -> ``(0, 61, 0)``."""
        return semver(output)

    def invocation(self, job: Job, executable: str, context: Context) -> Invocation:
        argv = [executable, "--output-format", "stream-json", "--approval-mode", "yolo"]
        model = job.agent_model_id or ""
        if isinstance(model, str) and model not in DEFAULT_MODELS:
            argv += ["-m", model]
        if context.resume:
            argv += ["--resume", context.resume]
        env = {"HOME": str(context.home), "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        variables = _variables(job, context)
        if variables.get(BASE_URL_VARIABLE):
            env[BASE_URL_VARIABLE] = variables[BASE_URL_VARIABLE]
        key = api_key(job, context)
        if key:
            env[KEY_VARIABLE] = key
        files = {f"{CONFIG_DIR}/settings.json": json.dumps(settings(job), indent=2, sort_keys=True) + "\n"}
        for skill in {str(s["skill_name"]): s for s in job.skills}.values():
            files[f"{CONFIG_DIR}/skills/{skill['skill_name']}/SKILL.md"] = skill_text(skill)
        return Invocation(argv=argv, env=env, files=files, stdin=job.prompt)

    def parser(self) -> GeminiParser:
        return GeminiParser()

    def session_paths(self) -> tuple[str, ...]:
        """``HOME/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``."""
        return (f"{CONFIG_DIR}/{TMP_DIR}",)

    def session_moves(self, files: Sequence[str], context: Context) -> dict[str, str]:
        """Each project's ``chats/`` into the new workspace's project (:func:`project_slug`): the CLI
        resumes only sessions of the project of its working directory."""
        target = project_slug(context.workspace.name)
        moves: dict[str, str] = {}
        for name in files:
            parts = name.split("/")
            chat = len(parts) >= 5 and parts[:2] == [CONFIG_DIR, TMP_DIR] and parts[3] == "chats"
            if chat and parts[2] != target:
                moves[name] = "/".join([CONFIG_DIR, TMP_DIR, target, *parts[3:]])
        return moves


def project_slug(directory_name: str) -> str:
    """The project a fresh agent home gives a working directory: its name lower-cased, every run of other
    characters than ``a-z0-9`` one ``-``, trimmed (``project`` when nothing is left)."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", directory_name.lower())).strip("-")
    return slug or "project"


def settings(job: Job) -> dict[str, Any]:
    """``.gemini/settings.json``: API-key auth, nothing sent besides the model requests, MCP servers."""
    out: dict[str, Any] = {
        "security": {"auth": {"selectedType": AUTH_TYPE}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False, "logPrompts": False},
    }
    if job.mcp_servers:
        out["mcpServers"] = mcp_servers(job.mcp_servers)
    return out


def mcp_servers(servers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The run's MCP servers in Gemini CLI's shape: ``{command, args, env}`` (stdio) or ``{url, type:
    http|sse, headers}``; the checks of :func:`~factoryctl.worker.workspace.mcp_config` apply."""
    translated: dict[str, dict[str, Any]] = {}
    for name, entry in mcp_config(servers).get("mcpServers", {}).items():
        translated[name] = {k: entry[k] for k in MCP_KEYS if k in entry}
    return translated


def _variables(job: Job, context: Context) -> dict[str, str]:
    """The run's variables a preset may read: the worker's (``context.env``), then the run's own."""
    return {**context.env, **job.environment_variables()}


def api_key(job: Job, context: Context) -> str | None:
    """The credential: a ``managedSecret`` harness auth's secret (``harness.auth.secret_name``, or the SDK's
    ``harness_auth_secrets.gemini_auth_secret_name``; injected as a variable named after the secret), else
    ``GEMINI_API_KEY`` from the run's or the worker's environment."""
    variables = _variables(job, context)
    auth = job.harness.get("auth")
    name = None
    if isinstance(auth, Mapping) and auth.get("source") == "managedSecret":
        name = auth.get("secret_name")
    secrets = job.agent_config.get("harness_auth_secrets")
    if not name and isinstance(secrets, Mapping):
        name = secrets.get("gemini_auth_secret_name")
    if isinstance(name, str) and name:
        value = variables.get(env_var_name(name)) or variables.get(name)
        if value:
            return value
    return variables.get(KEY_VARIABLE) or None


class GeminiParser:
    """Gemini CLI's ``stream-json`` lines -> :class:`AgentEvent` values, and its verdict.

    Assistant text arrives as ``delta`` messages; they are joined into one ``message`` event, emitted when
    anything else follows (a tool call, the result) or the output ends (:meth:`verdict`). The echoed user
    prompt is not an event: the run already holds its prompt."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._last_text = ""
        self._session: str | None = None
        self._result: dict[str, Any] | None = None
        self._error: str | None = None

    def is_structured(self, line: str) -> bool:
        return typed_object(line) is not None

    def feed(self, line: str) -> list[AgentEvent]:
        item = typed_object(line)
        if item is None:
            return []
        kind = item.get("type")
        if kind == "message" and item.get("role") == "assistant":
            self._text.append(str(item.get("content") or ""))
            if not item.get("delta"):  # a whole message: nothing more belongs to it
                return self._flush()
            return []
        events = self._flush()
        if kind == "init":
            session_id = item.get("session_id")
            if isinstance(session_id, str) and session_id and session_id != self._session:
                self._session = session_id
                events.append(base.session(session_id))
        elif kind == "tool_use":
            events.append(
                base.tool_call(
                    str(item.get("tool_id") or ""), str(item.get("tool_name")), item.get("parameters")
                )
            )
        elif kind == "tool_result":
            events.append(_tool_result(item))
        elif kind == "error":
            text = str(item.get("message") or "")
            if text:
                self._error = text
                events.append(base.message(text, role="system"))
        elif kind == "result":
            self._result = item
            events += _usage(item)
        return events

    def verdict(self) -> Verdict | None:
        result = self._result
        if result is None:
            return None
        if result.get("status") == "success":
            return Verdict(ok=True, message=self._last_text.strip() or None)
        error = as_mapping(result.get("error"))
        message = str(error.get("message") or self._error or "Gemini CLI ended with an error")
        return Verdict(ok=False, message=message)

    def _flush(self) -> list[AgentEvent]:
        text = "".join(self._text)
        self._text = []
        if not text.strip():
            return []
        self._last_text = text
        return [base.message(text)]


def _tool_result(item: Mapping[str, Any]) -> AgentEvent:
    ok = item.get("status") == "success"
    output = item.get("output")
    if not ok:
        error = as_mapping(item.get("error"))
        output = error.get("message") or output
    text = output if isinstance(output, str) else "" if output is None else json.dumps(output)
    return base.tool_result(str(item.get("tool_id") or ""), ok, text)


def _usage(result: Mapping[str, Any]) -> list[AgentEvent]:
    """This invocation's tokens, every model the CLI called (its router's too) included; no cost: the CLI
    reports none."""
    stats = as_mapping(result.get("stats"))
    if not stats:
        return []
    return [base.usage(_int(stats.get("input_tokens")), _int(stats.get("output_tokens")))]


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


PRESET = GeminiPreset()
