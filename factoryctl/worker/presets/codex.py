"""The Codex CLI preset (``harness: {type: codex}``): ``codex exec --json`` in the run's workspace.

Everything Codex reads lives in ``CODEX_HOME`` (``<agent home>/.codex``), which this preset fills for each
run: ``config.toml`` (a model provider at ``OPENAI_BASE_URL`` speaking the Responses API with the key from
``OPENAI_API_KEY``, no approvals and no Codex sandbox — factoryctl's own sandbox is the boundary — no
analytics, feedback, telemetry, update check or plugin sync, and the run's MCP servers) and
``skills/<name>/SKILL.md`` (the run's skills, which Codex lists to the model). A follow-up resumes the
thread with ``codex exec resume THREAD_ID PROMPT``. Measured against 0.169.0 (docs/agents.md, "Codex").

``--json`` prints one event per line; :class:`CodexParser` maps them to transcript events:
``thread.started`` -> ``session``; ``agent_message`` items -> ``message``; ``command_execution``,
``file_change``, ``mcp_tool_call`` and ``web_search`` items -> ``tool_call`` (when started) and
``tool_result`` (when completed); ``error`` items and events (Codex's warnings and retries) -> ``system``
messages; ``turn.completed`` -> ``usage`` and a successful verdict; ``turn.failed`` -> a failed one.

``turn.completed`` reports the running totals of the whole thread, a resumed one's earlier attempts included
(measured: docs/agents.md, "Codex", "Usage on a resumed thread"); the parser reports only what this attempt
adds to the totals an earlier attempt reached, which the worker carries in the saved session state
(:meth:`CodexParser.carry_usage`), so the run's usage adds up to what the model server billed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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

CODEX_HOME = ".codex"  # under the run's agent home
DEFAULT_BASE_URL = "https://api.openai.com/v1"
PROVIDER = "factoryctl"
KEY_VARIABLE = "OPENAI_API_KEY"
DEFAULT_MODELS = frozenset({"", "auto", "default"})  # Codex's own default model
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class CodexPreset:
    name = "codex"
    executable = "codex"
    minimum_version = (0, 169, 0)

    def version(self, output: str) -> tuple[int, ...] | None:
        """``codex-cli 0.169.0`` -> ``(0, 169, 0)``; another CLI's banner is no codex version."""
        return semver(output) if "codex" in output.lower() else None

    def invocation(self, job: Job, executable: str, context: Context) -> Invocation:
        """``codex exec --json --skip-git-repo-check [-m MODEL] -- PROMPT`` (a new thread) or ``codex exec
        resume --json --skip-git-repo-check [-m MODEL] -- THREAD_ID PROMPT`` (a follow-up), run in the
        workspace with stdin closed; the reasoning level, provider, policies and MCP servers are in
        ``config.toml`` because ``exec resume`` takes neither ``--sandbox`` nor ``--cd``."""
        argv = [executable, "exec"]
        if context.resume:
            argv.append("resume")
        argv += ["--json", "--skip-git-repo-check"]
        model = job.agent_model_id
        if isinstance(model, str) and model.strip().lower() not in DEFAULT_MODELS:
            argv += ["--model", model]
        argv.append("--")
        if context.resume:
            argv.append(context.resume)
        argv.append(job.prompt)
        home = context.home / CODEX_HOME
        env = {"CODEX_HOME": str(home)}
        key = api_key(job, context)
        if key is not None:
            env[KEY_VARIABLE] = key
        files = {f"{CODEX_HOME}/config.toml": config_toml(job, context)}
        for skill in {str(s["skill_name"]): s for s in job.skills}.values():
            files[f"{CODEX_HOME}/skills/{skill['skill_name']}/SKILL.md"] = skill_text(skill)
        return Invocation(argv=argv, env=env, files=files, stdin=None)

    def parser(self) -> CodexParser:
        return CodexParser()

    def session_paths(self) -> tuple[str, ...]:
        """``CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl``."""
        return (f"{CODEX_HOME}/sessions",)

    def session_moves(self, files: Sequence[str], context: Context) -> dict[str, str]:
        """None: ``codex exec resume`` finds a thread's rollout by its id, whatever the directory."""
        return {}


def _variables(job: Job, context: Context) -> dict[str, str]:
    """The run's variables a preset may read: the worker's (``context.env``), then the run's own."""
    return {**context.env, **job.environment_variables()}


def api_key(job: Job, context: Context) -> str | None:
    """The credential: a ``managedSecret`` harness auth's secret (injected as a variable named after the
    secret), else ``OPENAI_API_KEY`` from the run's or the worker's environment."""
    variables = _variables(job, context)
    auth = job.harness.get("auth")
    if isinstance(auth, Mapping) and auth.get("source") == "managedSecret" and auth.get("secret_name"):
        name = env_var_name(str(auth["secret_name"]))
        if variables.get(name):
            return variables[name]
    return variables.get(KEY_VARIABLE) or None


def config_toml(job: Job, context: Context) -> str:
    """``CODEX_HOME/config.toml`` for this run (root keys first: TOML puts later keys into tables)."""
    variables = _variables(job, context)
    root: dict[str, Any] = {
        "model_provider": PROVIDER,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
    }
    level = job.harness.get("reasoning_level")
    if isinstance(level, str) and level:
        root["model_reasoning_effort"] = level.lower()
    tables: dict[str, dict[str, Any]] = {
        f"model_providers.{PROVIDER}": {
            "name": "factoryctl run provider",
            "base_url": variables.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            "env_key": KEY_VARIABLE,
            "wire_api": "responses",
        },
        "features": {"plugins": False},
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "otel": {"exporter": "none"},
    }
    for name, server in mcp_servers(job.mcp_servers).items():
        tables[f"mcp_servers.{_key(name)}"] = server
    lines = [f"# written by factoryctl for run {job.run_id}"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in root.items()]
    for table, values in tables.items():
        lines += ["", f"[{table}]"] + [f"{_key(k)} = {_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def mcp_servers(servers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The run's MCP servers as Codex's ``[mcp_servers.<name>]`` tables: ``{command, args, env?}`` or
    ``{url, http_headers?}``, after the worker's own checks (:func:`~factoryctl.worker.workspace.mcp_config`
    refuses a command no environment defined)."""
    out: dict[str, dict[str, Any]] = {}
    for name, entry in mcp_config(servers)["mcpServers"].items():
        if "command" in entry:
            table: dict[str, Any] = {"command": str(entry["command"])}
            table["args"] = [str(a) for a in entry["args"]]
            if entry.get("env"):
                table["env"] = {str(k): str(v) for k, v in entry["env"].items()}
        else:
            table = {"url": str(entry["url"])}
            if entry.get("headers"):
                table["http_headers"] = {str(k): str(v) for k, v in entry["headers"].items()}
        out[str(name)] = table
    return out


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _value(key)


def _value(value: Any) -> str:
    """A TOML value: JSON's string escapes are TOML's (non-ASCII kept as is, so no surrogate pairs)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


@dataclass(frozen=True)
class ThreadTotals:
    """A Codex thread's running token totals (``None`` thread: not known yet)."""

    thread: str | None
    input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def parse(cls, saved: Mapping[str, Any]) -> ThreadTotals | None:
        """Totals as :meth:`CodexParser.usage_totals` gave them, or None when they are not that shape."""
        thread, tokens = saved.get("session_id"), (saved.get("input_tokens"), saved.get("output_tokens"))
        if not isinstance(thread, str) or not all(_int(t) == t and t >= 0 for t in tokens):
            return None
        return cls(thread, _int(tokens[0]), _int(tokens[1]))

    def tokens(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


class CodexParser:
    """Reads ``codex exec --json`` output, one line at a time."""

    def __init__(self) -> None:
        self._started: set[str] = set()
        self._answer: str | None = None
        self._error: str | None = None
        self._verdict: Verdict | None = None
        self._thread: str | None = None
        self._carried: ThreadTotals | None = None  # an earlier attempt's totals (carry_usage)
        self._reported: ThreadTotals | None = None  # the thread's totals this parser has reported up to

    def carry_usage(self, totals: Mapping[str, Any]) -> None:
        """The totals an earlier attempt left its thread at (what :meth:`usage_totals` gave then): usage on
        that thread is reported net of them. Anything malformed is ignored (the totals count from 0)."""
        self._carried = ThreadTotals.parse(totals)

    def usage_totals(self) -> dict[str, Any] | None:
        """The thread and its token totals as far as usage has been reported (for the next attempt's
        :meth:`carry_usage`); None before Codex named the thread."""
        if self._thread is None:
            return None
        totals = self._reported or self._baseline()
        return {"session_id": self._thread, **totals.tokens()}

    def is_structured(self, line: str) -> bool:
        return typed_object(line) is not None

    def feed(self, line: str) -> list[AgentEvent]:
        event = typed_object(line)
        if event is None:
            return []
        kind = event["type"]
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self._thread = event["thread_id"]
            return [base.session(event["thread_id"])]
        if kind in ("item.started", "item.completed") and isinstance(event.get("item"), Mapping):
            return self._item(event["item"], completed=kind == "item.completed")
        if kind == "turn.completed":
            self._verdict = Verdict(ok=True, message=self._answer)
            return [self._usage(as_mapping(event.get("usage")))]
        if kind == "turn.failed":
            error = event.get("error")
            message = error.get("message") if isinstance(error, Mapping) else None
            self._verdict = Verdict(ok=False, message=str(message or self._error or "codex: the turn failed"))
            return []
        if kind == "error":
            self._error = str(event.get("message") or "")
            return [base.message(self._error, role="system")] if self._error else []
        return []

    def verdict(self) -> Verdict | None:
        """``turn.completed`` -> ok with the last answer; ``turn.failed`` -> not ok with Codex's message;
        only an ``error`` event -> not ok with it; nothing -> None (the CLI crashed)."""
        if self._verdict is None and self._error:
            return Verdict(ok=False, message=self._error)
        return self._verdict

    def _usage(self, usage: Mapping[str, Any]) -> AgentEvent:
        """The ``usage`` event of a ``turn.completed``: its totals less those already reported or carried.
        Totals below those (Codex did not restore the thread's count) are all this attempt's."""
        totals = ThreadTotals(self._thread, _int(usage.get("input_tokens")), _int(usage.get("output_tokens")))
        before = self._reported or self._baseline()
        if totals.input_tokens < before.input_tokens or totals.output_tokens < before.output_tokens:
            before = ThreadTotals(self._thread)
        self._reported = totals
        return base.usage(
            totals.input_tokens - before.input_tokens, totals.output_tokens - before.output_tokens
        )

    def _baseline(self) -> ThreadTotals:
        """The carried totals when they are this thread's (a resume), else zero (a new thread)."""
        carried = self._carried
        if carried is not None and self._thread is not None and carried.thread == self._thread:
            return carried
        return ThreadTotals(self._thread)

    def _item(self, item: Mapping[str, Any], *, completed: bool) -> list[AgentEvent]:
        kind, item_id = item.get("type"), str(item.get("id") or "")
        if kind == "agent_message":
            if not completed or not isinstance(item.get("text"), str):
                return []
            self._answer = item["text"]
            return [base.message(item["text"])]
        if kind == "error":
            return [base.message(str(item.get("message") or ""), role="system")] if completed else []
        call = _tool_call(item)
        if call is None:
            return []  # reasoning, todo_list and unknown items carry no transcript event
        events = []
        if item_id not in self._started:
            self._started.add(item_id)
            events.append(base.tool_call(item_id, *call))
        if completed:
            events.append(base.tool_result(item_id, *_tool_result(item)))
        return events


def _tool_call(item: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(tool name, input) of a tool item."""
    kind = item.get("type")
    if kind == "command_execution":
        return "exec_command", {"command": item.get("command")}
    if kind == "file_change":
        return "apply_patch", {"changes": _list(item.get("changes"))}
    if kind == "mcp_tool_call":
        return f"{item.get('server')}.{item.get('tool')}", item.get("arguments")
    if kind == "web_search":
        return "web_search", {"query": item.get("query")}
    return None


def _tool_result(item: Mapping[str, Any]) -> tuple[bool, str]:
    """(ok, output) of a completed tool item."""
    kind, status = item.get("type"), item.get("status")
    if kind == "command_execution":
        return status == "completed" and item.get("exit_code") == 0, str(item.get("aggregated_output") or "")
    if kind == "file_change":
        changes = _list(item.get("changes"))
        lines = [f"{c.get('kind')} {c.get('path')}" for c in changes if isinstance(c, Mapping)]
        return status == "completed", "\n".join(lines)
    if kind == "mcp_tool_call":
        error = item.get("error")
        if isinstance(error, Mapping) or status == "failed":
            return False, str(error.get("message") if isinstance(error, Mapping) else "the tool call failed")
        result = as_mapping(item.get("result"))
        content = result.get("content")
        parts = content if isinstance(content, list) else []
        texts = [str(c.get("text")) for c in parts if isinstance(c, Mapping) and c.get("type") == "text"]
        if not texts and result.get("structured_content") is not None:
            texts = [json.dumps(result["structured_content"])]
        return True, "\n".join(texts)
    return status != "failed", ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


PRESET = CodexPreset()
