"""The claim answer: what a worker receives with a run, the same in-process and over HTTP.

Shape (read by :meth:`factoryctl.worker.job.Job.from_claim` from ``run``)::

    {"run": {run_id, title, prompt, base_prompt?, skill_body?, environment?, runner?, skills?,
             agent_config, model_id,
             attachments: [{file_name, mime_type, data (base64)}], followups: [{followup_id, mode}],
             attempt, worker_host, lease_expires_at, conversation_id, parent_run_id, metadata,
             resume_session_id?, resume_transcript?, network},
     "lease_seconds": 30, "lease_token": "..."}

``resume_session_id`` is the agent session an earlier attempt of the run recorded, for the preset to
resume (a follow-up that re-queued a finished run); absent otherwise. With it, ``resume_transcript``
summarises the earlier conversation for a worker that cannot restore the session
(:func:`transcript_summary`). The run's harness (type, ``model_id``, ``reasoning_level``, auth) is
``agent_config.harness``.

``lease_token`` is the claim's own token: the worker presents it on every call for the run
(docs/workers.md, "Leases").

Follow-ups still pending at claim time (sent before the run started, or the ones that re-queued
a finished run as a continuation) are appended to the prompt, since a freshly started harness
has no other way to see them, and are marked delivered. Their text travels once, in the prompt:
``followups`` only names them (docs/workers.md, "Follow-ups").

``network`` is the sandbox's network policy ``{mode, allow}``, computed from the environment as it is now
(:func:`api.runs.network.network_policy`: its explicit ``network``, else an allowlist of its repositories'
hosts; no environment: an empty allowlist).

``runner`` and ``skills`` are the run's definition objects (:mod:`api.claims.definitions`); ``skills``
also lists the skills of a run request's ``config.skills`` after the first, resolved at creation (the first
is the run's primary skill, ``skill_body``; docs/agent-config.md, "Skills").

``skill_body`` is the SKILL.md body resolved at run creation; ``environment`` is the run's
environment spec with team secrets as *names* (``secret_refs``), or ``{"error": ...}`` when it was
deleted since. Secret values never travel in the claim: the worker resolves them (the run's own
``agent_config.secrets`` too; :mod:`factoryctl.worker.resolve`), a self-hosted one through
``POST /workers/runs/{id}/secrets``, which answers only the names :func:`run_secret_names` computes
from the stored run.

Runs created without a resolved skill (webhook-started runs: ingress stays free of git I/O) get
theirs at claim time, in :func:`complete_claim`, *after* the claim's transaction so a slow clone
never holds the database write lock. The body is then stored on the run, so a retried attempt sees
the same skill; a skill that cannot be resolved ends the run FAILED ``skill_unavailable``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.claims.definitions import SKILL_UNAVAILABLE, definition_payload, definition_problem, run_secret_refs
from api.claims.errors import NotLeaseHolder
from api.claims.queue import pending_followups, report_state
from api.runs.network import network_policy
from api.runs.prepare import (
    SKILL_KEY,
    expand_servers,
    find_environment,
    public_config,
    skill_repositories,
    with_skill,
)
from api.runs.skills import SkillResolver, SkillUnavailable
from api.runs.states import LEASED, IllegalTransition
from store import NotFound
from store.clock import Clock, rfc3339
from store.models import Environment, Run, RunAttachment, RunEvent, RunFollowup
from store.secrets import mcp_secret_refs

MCP_SERVER_UNAVAILABLE = "mcp_server_unavailable"
SUMMARY_CHARS = 16_000  # of a follow-up's earlier conversation in the claim (resume_transcript)
SUMMARY_EVENTS = 2_000
SUMMARY_TOOL_INPUT_CHARS = 300


def followup_json(row: RunFollowup) -> dict[str, Any]:
    return {"followup_id": row.id, "message": row.message, "mode": row.mode}


def prompt_with_followups(prompt: str, followups: list[RunFollowup]) -> str:
    parts = [prompt.rstrip("\n")] if prompt.strip() else []
    parts.extend(f"## Follow-up\n\n{f.message.strip()}" for f in followups)
    return "\n\n".join(parts)


async def claim_payload(
    session: AsyncSession, clock: Clock, run: Run, lease_seconds: float
) -> dict[str, Any]:
    """Build the claim answer for ``run`` (in the claim's transaction)."""
    attachments = (
        await session.scalars(
            select(RunAttachment).where(RunAttachment.run_id == run.run_id).order_by(RunAttachment.file_name)
        )
    ).all()
    followups = await pending_followups(session, clock, run.run_id)
    config = public_config(run.agent_config)
    body: dict[str, Any] = {
        "run_id": run.run_id,
        "title": run.title,
        "prompt": prompt_with_followups(run.prompt, followups),
        "agent_config": config,
        "model_id": run.model_id,
        "attachments": [
            {
                "file_name": a.file_name,
                "mime_type": a.mime_type,
                "data": base64.b64encode(a.data).decode("ascii"),
            }
            for a in attachments
        ],
        "followups": [{"followup_id": f.id, "mode": f.mode} for f in followups],  # the text is in the prompt
        "attempt": run.attempt,
        "worker_host": run.worker_host or None,
        "lease_expires_at": rfc3339(run.lease_expires_at),
        "conversation_id": run.conversation_id,
        "parent_run_id": run.parent_run_id,
        "metadata": dict(run.run_metadata or {}),
    }
    base_prompt = config.get("base_prompt")
    if isinstance(base_prompt, str) and base_prompt.strip():
        body["base_prompt"] = base_prompt
    skill = (run.agent_config or {}).get(SKILL_KEY)
    if isinstance(skill, dict) and isinstance(skill.get("body"), str):
        body["skill_body"] = skill["body"]
    env_id = config.get("environment_id")
    environment = await _run_environment(session, run.team_id, config)  # read once, for both
    if isinstance(env_id, str) and env_id:
        body["environment"] = environment_payload(environment, env_id)
    body["network"] = network_policy(environment.spec or {} if environment is not None else None)
    if config.get("mcp_servers"):  # references expanded; commands only from the environment (agent-config.md)
        body["mcp_servers"] = expand_servers(config, environment).servers
    body.update(await definition_payload(session, run, config))
    if resume := resume_session(run):
        body["resume_session_id"] = resume
        body["resume_transcript"] = await transcript_summary(session, run.run_id)
    if refs := run_secret_refs(config):  # the names the worker asks values for: computed here, once
        body["secret_refs"] = refs
    return {"run": body, "lease_seconds": lease_seconds, "lease_token": run.lease_token}


async def transcript_summary(session: AsyncSession, run_id: str, limit: int = SUMMARY_CHARS) -> str:
    """The run's earlier conversation as text (its ``message`` and ``tool_call`` events, the newest that
    fit in ``limit`` characters): what a follow-up's agent is told when the CLI's session cannot be
    restored (docs/agents.md, "Sessions and follow-ups")."""
    rows = (
        await session.execute(
            select(RunEvent.kind, RunEvent.data)
            .where(RunEvent.run_id == run_id, RunEvent.kind.in_(("message", "tool_call")))
            .order_by(RunEvent.id.desc())
            .limit(SUMMARY_EVENTS)
        )
    ).all()
    lines: list[str] = []
    size = 0
    for kind, data in rows:  # newest first: keep the end of the conversation
        data = data if isinstance(data, dict) else {}
        if kind == "message":
            line = f"{data.get('role', 'assistant')}: {str(data.get('text', '')).strip()}"
        else:
            arguments = json.dumps(data.get("input"), ensure_ascii=False, default=str)
            line = f"tool call {data.get('name')}: {arguments[:SUMMARY_TOOL_INPUT_CHARS]}"
        if size + len(line) + 1 > limit:
            break
        lines.append(line)
        size += len(line) + 1
    return "\n".join(reversed(lines))


def resume_session(run: Run) -> str | None:
    """The agent session a claimed attempt continues: the one an earlier attempt recorded (``session``
    events, :mod:`api.claims.transcript`), when this attempt is a follow-up's continuation of it."""
    if run.session_id and run.session_attempt is not None and run.session_attempt < run.attempt:
        return run.session_id
    return None


async def _run_environment(
    session: AsyncSession, team_id: str, config: Mapping[str, Any]
) -> Environment | None:
    """The run's environment as it is now (None: the run names none, or it no longer exists)."""
    env_id = config.get("environment_id")
    return await find_environment(session, team_id, env_id) if isinstance(env_id, str) and env_id else None


def environment_payload(row: Environment | None, environment_id: str) -> dict[str, Any]:
    """The environment as a worker prepares it; secrets by name only (``secret_refs``)."""
    if row is None:
        return {"error": f"environment {environment_id!r} no longer exists"}
    spec = row.spec or {}
    out: dict[str, Any] = {
        "name": row.name,
        "repos": list(spec.get("repos") or []),
        "setup": list(spec.get("setup") or []),
        "env": dict(spec.get("env") or {}),
        "secret_refs": [n for n in spec.get("secrets") or [] if isinstance(n, str)],
    }
    timeout = spec.get("setupTimeoutSeconds", spec.get("setup_timeout_seconds"))
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        out["setup_timeout_seconds"] = timeout
    return out


async def complete_claim(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    resolver: SkillResolver,
    payload: dict[str, Any],
    *,
    owner: str,
) -> dict[str, Any] | None:
    """Resolve a skill the run was created without; call after the claim's transaction committed.

    Returns the payload (with ``skill_body``), or None when the run cannot be handed out: an MCP server
    could not be expanded (FAILED ``mcp_server_unavailable``: a stored command, a reference its environment
    no longer defines; docs/agent-config.md, "MCP servers"), its runner or one of its skills no longer
    exists (FAILED ``runner_unavailable`` / ``skill_unavailable``), the skill is unavailable (FAILED
    ``skill_unavailable``) or ``owner`` lost the lease.
    """
    run, token = payload["run"], payload.get("lease_token")
    refused = [f"{n}: {e['error']}" for n, e in (run.get("mcp_servers") or {}).items() if "error" in e]
    if refused:
        message = f"MCP server {'; '.join(refused)}"
        await _fail(sessions, clock, str(run["run_id"]), owner, token, message, MCP_SERVER_UNAVAILABLE)
        return None
    problem = definition_problem(run)  # a runner or skill deleted since the run was queued
    if problem is not None:
        await _fail(sessions, clock, str(run["run_id"]), owner, token, *problem)
        return None
    config = run.get("agent_config") or {}
    spec = config.get("skill_spec")
    if not isinstance(spec, str) or not spec or "skill_body" in run:
        return payload
    run_id = str(run["run_id"])
    async with sessions() as session:
        row = (
            await session.execute(select(Run.team_id, Run.agent_config).where(Run.run_id == run_id))
        ).one_or_none()
        if row is None:
            return None
        team_id, stored = row
        repos = await skill_repositories(session, team_id)
    try:  # no session is open meanwhile: a clone may take a while
        skill = await asyncio.to_thread(resolver.resolve, spec, repos=repos)
    except SkillUnavailable as exc:
        await _fail_claimed(sessions, clock, run_id, owner, token, spec, str(exc))
        return None
    updated = with_skill(stored or {}, skill)
    async with sessions() as session, session.begin():
        stmt = (
            update(Run)
            .where(
                Run.run_id == run_id,
                Run.lease_owner == owner,
                Run.lease_token == token,
                Run.state.in_([s.value for s in LEASED]),
            )
            .values(agent_config=updated, config_name=str(updated["name"])[:200])
            .execution_options(synchronize_session=False)
        )
        result = cast(CursorResult[Any], await session.execute(stmt))
        if result.rowcount != 1:  # the lease lapsed or the run was cancelled meanwhile
            return None
    run["skill_body"] = skill.body
    run["agent_config"] = public_config(updated)
    return payload


async def _fail_claimed(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    run_id: str,
    owner: str,
    lease_token: str | None,
    spec: str,
    problem: str,
) -> None:
    message = f"the skill {spec!r} could not be resolved when the run was claimed: {problem}"
    await _fail(sessions, clock, run_id, owner, lease_token, message, SKILL_UNAVAILABLE)


async def _fail(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    run_id: str,
    owner: str,
    lease_token: str | None,
    text: str,
    error_code: str,
) -> None:
    """End a claimed run FAILED before any worker sees it (not retryable: the same run fails the same way)."""
    message = {"message": text, "error_code": error_code, "retryable": False}
    try:
        async with sessions() as session, session.begin():
            await report_state(
                session,
                clock,
                run_id,
                owner=owner,
                lease_token=lease_token,
                state="FAILED",
                status_message=message,
            )
    except (NotLeaseHolder, IllegalTransition, NotFound):
        pass  # the run moved on (cancelled, reaped): nothing is left to fail


async def run_secret_names(session: AsyncSession, run: Run) -> list[str]:
    """Every team secret the run references: its MCP servers' ``secret:NAME`` values (as the claim expands
    them), its environment's ``secrets`` (as the environment is now) and its own ``secrets`` and managed
    harness auth (:func:`api.claims.definitions.run_secret_refs`). Computed from the store, never from a
    request; which of them a worker may read is :func:`store.secrets.reveal_for_run`'s rule (``run`` scope
    only)."""
    config = run.agent_config or {}
    environment = await _run_environment(session, run.team_id, config)  # read once, for both
    names = {name for _field, name in mcp_secret_refs(expand_servers(config, environment).servers)}
    if environment is not None:
        names.update(n for n in (environment.spec or {}).get("secrets") or [] if isinstance(n, str))
    names.update(run_secret_refs(config))
    return sorted(names)
