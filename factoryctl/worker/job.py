"""What a worker executes (:class:`Job`) and what it reports back (:class:`Outcome`).

A job is built from the claim response (:meth:`Job.from_claim`) and is everything a harness may
look at: the assembled prompt, the resolved agent config, attachments, the model, the prepared
environment description and the MCP servers. Nothing here does I/O.

Claim payload read by :meth:`Job.from_claim` (unknown keys are ignored)::

    {
      "run_id": "run_...",                       # required
      "prompt": "...",                           # the prompt (final unless parts below are given)
      "base_prompt": "...", "skill_body": "...", "envelope": "...",   # optional prompt parts
      "agent_config": {...},                     # alias "config"; resolved AmbientAgentConfig
      "attachments": [{"file_name", "mime_type", "data": "<base64>"}],
      "model_id": "...",                         # default: agent_config.model_id
      "mcp_servers": {name: {...}},              # default: agent_config.mcp_servers
      "environment": {"repos": [{"url", "path"?, "ref"?}], "setup": [str],
                      "env": {k: v}, "secrets": {ENV_NAME: value},
                      "setup_timeout_seconds": 900},
      "timeout_seconds": 3600,
      "secret_values": ["..."],                  # every resolved secret value, to redact
      "run_secrets": {ENV_NAME: value},          # the config's own secrets, resolved (resolve.py)
      "runner": {"name", "setup_commands": [str], "instance_shape"?, "platform"?, "error"?},
      "skills": [{"name", "skill_name", "description", "body", "front_matter"}],
      "resume_session_id": "..."                 # a follow-up: the agent session to continue
      "resume_transcript": "..."                 # with it: the earlier conversation, summarised
      "network": {"mode": "none" | "allowlist" | "open", "allow": ["host[:port]"]}
                                                 # absent: allowlist, no entries (netpolicy.py)
    }

A skill's ``skill_name`` becomes a directory name in the workspace, so anything but a plain path segment
is refused (:class:`InvalidClaim`).

When any of ``base_prompt``, ``skill_body`` or ``envelope`` is present at the top level, the job's
prompt is :func:`assemble_prompt` of them around ``prompt``; otherwise ``prompt`` is used as is
(the server already assembled it). ``agent_config.base_prompt`` is informational only, so a
server that sends an assembled prompt never gets the base prompt twice.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from factoryctl.worker import InvalidClaim
from factoryctl.worker.masking import mask
from factoryctl.worker.netpolicy import NetworkPolicy

OutcomeState = Literal["SUCCEEDED", "FAILED", "CANCELLED", "ERROR", "BLOCKED"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def assemble_prompt(
    base_prompt: str | None, skill_body: str | None, prompt: str | None, envelope: str | None
) -> str:
    """Join the prompt parts in the order the harness reads them, skipping empty parts.

    Order: base prompt, skill body, the prompt itself, then the webhook envelope; parts are
    separated by one blank line.
    """
    parts = (base_prompt, skill_body, prompt, envelope)
    return "\n\n".join(p.strip("\n") for p in parts if p and p.strip())


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every masked form of a secret value with ``***``: each line of a multi-line value and
    common encodings too, best effort (:mod:`factoryctl.worker.masking`, docs/workers.md)."""
    return mask(text, secrets)


@dataclass(frozen=True)
class Attachment:
    """A file given with the run (e.g. ``event-payload.json``); written into the workspace."""

    file_name: str
    mime_type: str
    data: bytes


@dataclass(frozen=True)
class Job:
    """One claimed run, ready to execute."""

    run_id: str
    prompt: str
    agent_config: dict[str, Any] = field(default_factory=dict)
    attachments: list[Attachment] = field(default_factory=list)
    model_id: str | None = None
    environment: dict[str, Any] | None = None
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeout_seconds: float | None = None
    runner: dict[str, Any] | None = None
    skills: list[dict[str, Any]] = field(default_factory=list)
    resume_session_id: str | None = None  # a follow-up: the agent session (a preset's) to continue
    resume_transcript: str | None = None  # its earlier conversation, bounded: a fresh session's context
    run_secrets: dict[str, str] = field(default_factory=dict, repr=False)  # the config's own, by variable
    network: NetworkPolicy = field(default_factory=NetworkPolicy.default)  # docs/workers.md, "Network"
    # resolved secret values beyond the environment's (MCP env/headers); never in a repr
    redacted: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def from_claim(cls, payload: Mapping[str, Any]) -> Job:
        """Parse a claim response; raises :class:`InvalidClaim` on a malformed payload."""
        run_id = payload.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise InvalidClaim("claim has no run_id")
        config = _mapping(payload.get("agent_config", payload.get("config")), "agent_config")
        prompt = _optional_str(payload.get("prompt"), "prompt") or ""
        part_keys = ("base_prompt", "skill_body", "envelope")
        if any(payload.get(k) is not None for k in part_keys):
            base, skill, envelope = (_optional_str(payload.get(k), k) for k in part_keys)
            prompt = assemble_prompt(base, skill, prompt, envelope)
        model_id = _optional_str(payload.get("model_id", config.get("model_id")), "model_id")
        servers = _mapping(payload.get("mcp_servers", config.get("mcp_servers")), "mcp_servers")
        for name, server in servers.items():
            _mapping(server, f"mcp_servers.{name}")
        environment = payload.get("environment")
        if environment is not None:
            environment = parse_environment(environment)
        timeout = payload.get("timeout_seconds")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise InvalidClaim("timeout_seconds must be a positive number")
        try:
            network = NetworkPolicy.parse(payload.get("network"))
        except ValueError as exc:
            raise InvalidClaim(str(exc)) from None
        redacted = _list(payload.get("secret_values"), "secret_values")
        if not all(isinstance(v, str) for v in redacted):
            raise InvalidClaim("secret_values must be a list of strings")
        return cls(
            run_id=run_id,
            prompt=prompt,
            agent_config=dict(config),
            attachments=[
                _attachment(a, i) for i, a in enumerate(_list(payload.get("attachments"), "attachments"))
            ],
            model_id=model_id or None,
            environment=environment,
            mcp_servers={str(k): dict(v) for k, v in servers.items()},
            timeout_seconds=float(timeout) if timeout is not None else None,
            runner=parse_runner(payload["runner"]) if payload.get("runner") is not None else None,
            skills=[parse_skill(s, i) for i, s in enumerate(_list(payload.get("skills"), "skills"))],
            resume_session_id=_optional_str(payload.get("resume_session_id"), "resume_session_id") or None,
            resume_transcript=_optional_str(payload.get("resume_transcript"), "resume_transcript") or None,
            run_secrets=_string_map(payload.get("run_secrets"), "run_secrets"),
            network=network,
            redacted=tuple(redacted),
        )

    @property
    def harness(self) -> dict[str, Any]:
        """The run's ``config.harness`` (``{type, model_id?, reasoning_level?, auth?}``; ``{}``: none)."""
        value = self.agent_config.get("harness")
        return dict(value) if isinstance(value, Mapping) else {}

    @property
    def agent_model_id(self) -> str | None:
        """The model an agent preset runs: ``harness.model_id``, else the run's ``model_id``."""
        model = self.harness.get("model_id")
        return model if isinstance(model, str) and model else self.model_id

    def environment_variables(self) -> dict[str, str]:
        """The environment's ``env``, its resolved ``secrets``, then the run's own secrets (a secret wins
        over a plain variable)."""
        env: dict[str, str] = {}
        if self.environment:
            env.update({str(k): str(v) for k, v in (self.environment.get("env") or {}).items()})
            env.update({str(k): str(v) for k, v in (self.environment.get("secrets") or {}).items()})
        env.update(self.run_secrets)
        return env

    def secret_values(self) -> list[str]:
        """Values to redact from any output this run produces: environment, run and MCP secrets."""
        values = set(self.redacted) | set(self.run_secrets.values())
        if self.environment:
            values.update(str(v) for v in (self.environment.get("secrets") or {}).values())
        return sorted(values)


def parse_environment(value: Any) -> dict[str, Any]:
    """Check the shape of an environment description and return a normalised copy."""
    env = _mapping(value, "environment")
    repos = []
    for i, repo in enumerate(_list(env.get("repos"), "environment.repos")):
        repo = _mapping(repo, f"environment.repos[{i}]")
        url = repo.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidClaim(f"environment.repos[{i}].url must be a non-empty string")
        entry: dict[str, str] = {"url": url}
        for key in ("path", "ref"):
            item = _optional_str(repo.get(key), f"environment.repos[{i}].{key}")
            if item:
                entry[key] = item
        repos.append(entry)
    setup = _list(env.get("setup"), "environment.setup")
    if not all(isinstance(cmd, str) for cmd in setup):
        raise InvalidClaim("environment.setup must be a list of strings")
    out: dict[str, Any] = {
        "repos": repos,
        "setup": list(setup),
        "env": _string_map(env.get("env"), "environment.env"),
        "secrets": _string_map(env.get("secrets"), "environment.secrets"),
    }
    timeout = env.get("setup_timeout_seconds")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise InvalidClaim("environment.setup_timeout_seconds must be a positive number")
        out["setup_timeout_seconds"] = float(timeout)
    return out


def parse_runner(value: Any) -> dict[str, Any]:
    """The run's runner (``runners/<name>.yaml``, docs/workers.md "Runners"); ``error``: it is gone."""
    runner = _mapping(value, "runner")
    name = runner.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidClaim("runner.name must be a non-empty string")
    commands = _list(runner.get("setup_commands"), "runner.setup_commands")
    if not all(isinstance(c, str) for c in commands):
        raise InvalidClaim("runner.setup_commands must be a list of strings")
    out: dict[str, Any] = {
        "name": name,
        "setup_commands": list(commands),
        "instance_shape": dict(_mapping(runner.get("instance_shape"), "runner.instance_shape")) or None,
        "platform": dict(_mapping(runner.get("platform"), "runner.platform")) or None,
    }
    if runner.get("error"):
        out["error"] = str(runner["error"])
    return out


def parse_skill(value: Any, index: int) -> dict[str, Any]:
    """One skill of the run; its ``skill_name`` names a workspace directory, so it must be one plain
    path segment (no ``/``, not ``.`` or ``..``), whatever the store says."""
    skill = _mapping(value, f"skills[{index}]")
    if skill.get("error"):
        raise InvalidClaim(f"skills[{index}]: {skill['error']}")
    skill_name = skill.get("skill_name")
    if not isinstance(skill_name, str) or not _SEGMENT.fullmatch(skill_name) or skill_name in (".", ".."):
        raise InvalidClaim(f"skills[{index}].skill_name {skill_name!r} is not a plain directory name")
    body = _optional_str(skill.get("body"), f"skills[{index}].body") or ""
    description = skill.get("description")
    return {
        "name": str(skill.get("name") or skill_name),
        "skill_name": skill_name,
        "description": description if isinstance(description, str) else None,
        "body": body,
        "front_matter": dict(_mapping(skill.get("front_matter"), f"skills[{index}].front_matter")),
    }


@dataclass
class Outcome:
    """How a run ended. ``status_message`` is ``{message, error_code?, retryable?}`` or None."""

    state: OutcomeState
    status_message: dict[str, Any] | None = None

    @classmethod
    def succeeded(cls, message: str | None = None) -> Outcome:
        return cls("SUCCEEDED", {"message": message} if message else None)

    @classmethod
    def failed(cls, message: str, error_code: str, *, retryable: bool = False) -> Outcome:
        return cls("FAILED", {"message": message, "error_code": error_code, "retryable": retryable})

    @classmethod
    def cancelled(cls, message: str = "run cancelled") -> Outcome:
        return cls("CANCELLED", {"message": message})

    @classmethod
    def blocked(cls, message: str) -> Outcome:
        """The agent stopped to ask for input: the worker lets go, a follow-up continues the run."""
        return cls("BLOCKED", {"message": message})

    @classmethod
    def error(cls, message: str, error_code: str, *, retryable: bool = False) -> Outcome:
        return cls("ERROR", {"message": message, "error_code": error_code, "retryable": retryable})

    def to_dict(self) -> dict[str, Any]:
        """The body of the worker state report: ``{state, status_message?}``."""
        body: dict[str, Any] = {"state": self.state}
        if self.status_message is not None:
            body["status_message"] = self.status_message
        return body


def redact_data(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (JSON-like: an event's data) with :func:`redact` applied to every string in it, keys
    included."""
    secrets = secrets if isinstance(secrets, frozenset) else frozenset(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {redact(str(k), secrets): redact_data(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v, secrets) for v in value]
    return value


def _attachment(value: Any, index: int) -> Attachment:
    item = _mapping(value, f"attachments[{index}]")
    name = item.get("file_name")
    if not isinstance(name, str) or not name:
        raise InvalidClaim(f"attachments[{index}].file_name must be a non-empty string")
    mime = _optional_str(item.get("mime_type"), f"attachments[{index}].mime_type")
    data = item.get("data", "")
    if not isinstance(data, str):
        raise InvalidClaim(f"attachments[{index}].data must be a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidClaim(f"attachments[{index}].data is not valid base64") from exc
    return Attachment(name, mime or "application/octet-stream", raw)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidClaim(f"{what} must be an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidClaim(f"{what} must be a list")
    return value


def _optional_str(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidClaim(f"{what} must be a string")
    return value


def _string_map(value: Any, what: str) -> dict[str, str]:
    items = _mapping(value, what)
    for key, item in items.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise InvalidClaim(f"{what}: {key!r} is not a valid environment variable name")
        if isinstance(item, bool) or not isinstance(item, str | int | float) or "\0" in str(item):
            raise InvalidClaim(f"{what}.{key} must be a string without NUL bytes")
    return {k: str(v) for k, v in items.items()}
