"""The SDKs' read surface over HTTP: ``GET /api/v1/agent/environments`` and ``GET /api/v1/agent``
(docs/api.md, "Environments for the SDKs" and "Agents (skills)"), on the real app and database (SQLite and
PostgreSQL), with skills served from real git repositories in a temporary directory."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import builders
import pytest
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.runs.prepare import SKILLS
from api.runs.routes import load_openapi
from api.runs.skills import MIN_FORCED_REFRESH_SECONDS, SkillResolver
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import Environment

ENVIRONMENTS = "/api/v1/agent/environments"
AGENTS = "/api/v1/agent"
T0 = dt.datetime(2026, 1, 31, 12, 0, tzinfo=dt.UTC)
TRIAGE = "---\nname: triage-bot\ndescription: Sorts issues\n---\n\nYou triage issues.\n"
AppClient = Callable[..., Awaitable[TestClient[Any, Any]]]


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def z(when: dt.datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def git_repo(path: Path, files: dict[str, str], symlinks: dict[str, str] | None = None) -> Path:
    """A git repository with ``files`` (and ``symlinks``: name -> target) committed on ``main``."""
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    for name, target in (symlinks or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path / name)
    subprocess.run(["git", "init", "--quiet", "--initial-branch", "main"], cwd=path, check=True)
    commit_all(path, "skills")
    return path


def commit_all(path: Path, message: str) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", message], cwd=path, check=True)


@pytest.fixture
def repos(tmp_path: Path) -> Path:
    """``<tmp>/git/{owner}/{repo}``: acme/skills and acme/app, with a malformed skill and two symlinks that
    lead out of their repository (a SKILL.md, and a whole skills directory)."""
    outside = tmp_path / "outside"
    (outside / "stolen").mkdir(parents=True)
    (outside / "SKILL.md").write_text("---\nname: leaked\n---\nsecret instructions\n")
    (outside / "stolen" / "SKILL.md").write_text("---\nname: leaked-dir\n---\nsecret instructions\n")
    root = tmp_path / "git"
    git_repo(
        root / "acme" / "skills",
        {
            "skills/triage/SKILL.md": TRIAGE,
            ".claude/skills/review/SKILL.md": "Review the change.\n",
            "skills/broken/SKILL.md": "---\nname: [unclosed\n---\nbody\n",
            "skills/empty/SKILL.md": "---\nname: empty\n---\n",
            "skills/notes.txt": "not a skill\n",
        },
        symlinks={"skills/leak/SKILL.md": str(outside / "SKILL.md")},
    )
    git_repo(
        root / "acme" / "app",
        {".agents/skills/triage/SKILL.md": "---\nname: triage-bot\n---\nTriage, app flavour.\n"},
        symlinks={".claude/skills": str(outside)},
    )
    return root


@pytest.fixture
def api_settings(tmp_path: Path, repos: Path) -> ServerSettings:
    """The conftest's settings with a local skills source (``<tmp>/git/{owner}/{repo}``)."""
    return ServerSettings(
        data_dir=tmp_path / "data",
        public_url="http://factory.test",
        skills_source=str(repos / "{owner}" / "{repo}"),
    )


async def ok(resp: Any) -> Any:
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    body: dict[str, Any] = await resp.json()
    assert (body["status"], body["error_code"]) == (status, code)
    assert "Traceback" not in body["detail"]
    return body


async def add_environment(
    sessions: async_sessionmaker[AsyncSession],
    name: str,
    spec: dict[str, Any],
    *,
    team: str = "default",
    **kw: Any,
) -> str:
    async with sessions() as s, s.begin():
        row = await builders.team(s, team)
        env = await builders.environment(s, SystemClock(), row.id, name, spec, **kw)
        return env.uid


async def touch(sessions: async_sessionmaker[AsyncSession], uid: str, when: dt.datetime) -> None:
    async with sessions() as s, s.begin():
        await s.execute(update(Environment).where(Environment.uid == uid).values(updated_at=when))


# --- environments ----------------------------------------------------------------------------------------


async def test_environments_are_cloud_environments(
    client: Any, member_key: str, admin_key: str, team_id: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    spec = {
        "repos": [
            {"url": "https://github.com/acme/app.git", "ref": "main", "path": "app"},
            {"url": "git@github.com:acme/tools.git"},
            {"url": "https://x-access-token:s3cr3t@github.com/acme/private"},
            {"url": "https://git.example/acme/other.git", "ref": "v1"},
            {"url": "https://github.com/acme/app"},
        ],
        "setup": ["make deps", "make test-db"],
        "env": {"APP_MODE": "plain-config-value"},
        "secrets": ["GH_TOKEN"],
    }
    uid = await add_environment(sessions, "backend", spec)
    created = await client.post(
        "/api/v1/environments", json={"name": "scratch", "setup": ["true"]}, headers=h(admin_key)
    )
    assert created.status == 201, await created.text()
    body = await ok(await client.get(ENVIRONMENTS, headers=h(member_key)))
    assert set(body) == {"environments"}
    by_name = {e["config"]["name"]: e for e in body["environments"]}
    assert set(by_name) == {"backend", "scratch"}
    backend = by_name["backend"]
    assert backend["uid"] == uid
    assert backend["config"] == {
        "name": "backend",
        "description": None,
        "github_repos": [
            {"owner": "acme", "repo": "app"},
            {"owner": "acme", "repo": "tools"},
            {"owner": "acme", "repo": "private"},
        ],
        "setup_commands": ["make deps", "make test-db"],
        "docker_image": None,
        "repos": [
            {"url": "https://github.com/acme/app.git", "ref": "main", "path": "app"},
            {"url": "git@github.com:acme/tools.git", "ref": None, "path": None},
            {"url": "https://***@github.com/acme/private", "ref": None, "path": None},
            {"url": "https://git.example/acme/other.git", "ref": "v1", "path": None},
            {"url": "https://github.com/acme/app", "ref": None, "path": None},
        ],
    }
    assert backend["scope"] == {"type": "Team", "uid": team_id}
    assert backend["setup_failed"] is False
    assert backend["last_task_created"] is None and backend["last_task_run_timestamp"] is None
    assert dt.datetime.fromisoformat(backend["last_updated"]).tzinfo is not None
    assert by_name["scratch"]["config"]["github_repos"] == [] and by_name["scratch"]["config"]["repos"] == []
    text = json.dumps(body)
    for hidden in ("GH_TOKEN", "plain-config-value", "APP_MODE", "s3cr3t", "x-access-token"):
        assert hidden not in text


async def test_sort_by_last_updated_or_name(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    for name, minutes in (("alpha", 5), ("bravo", 20), ("charlie", 10)):
        await touch(sessions, await add_environment(sessions, name, {}), at(minutes))

    async def names(query: str) -> list[str]:
        body = await ok(await client.get(ENVIRONMENTS + query, headers=h(member_key)))
        return [e["config"]["name"] for e in body["environments"]]

    assert await names("") == ["bravo", "charlie", "alpha"]
    assert await names("?sort_by=last_updated") == ["bravo", "charlie", "alpha"]
    assert await names("?sort_by=name") == ["alpha", "bravo", "charlie"]
    body = await problem(
        await client.get(ENVIRONMENTS + "?sort_by=size", headers=h(member_key)), 400, "invalid_request"
    )
    assert "sort_by" in body["detail"]


async def test_last_task_and_setup_failed_come_from_the_runs_using_the_environment(
    client: Any, member_key: str, seed_run: Any, sessions: async_sessionmaker[AsyncSession]
) -> None:
    failing = await add_environment(sessions, "failing", {"setup": ["false"]})
    recovered = await add_environment(sessions, "recovered", {})
    idle = await add_environment(sessions, "idle", {})
    setup_failed = {"message": "setup exited 1", "error_code": "environment_setup_failed", "retryable": False}
    # "failing": named by name, its setup failed; then a newer run names it by uid and is still queued.
    await seed_run(
        agent_config={"environment_id": "failing"},
        title="first",
        state="FAILED",
        created_at=at(0),
        updated_at=at(2),
        started_at=None,
        finished_at=at(2),
        status_message=setup_failed,
    )
    newest = await seed_run(
        agent_config={"environment_id": failing}, title="second", created_at=at(5), updated_at=at(5)
    )
    # "recovered": setup failed once, the next run got through setup and failed later for another reason.
    await seed_run(
        agent_config={"environment_id": "recovered"},
        state="FAILED",
        created_at=at(0),
        updated_at=at(1),
        finished_at=at(1),
        status_message=setup_failed,
    )
    later = await seed_run(
        agent_config={"environment_id": recovered},
        title="later",
        state="FAILED",
        created_at=at(3),
        updated_at=at(9),
        started_at=at(4),
        finished_at=at(9),
        status_message={"message": "harness exited 2", "error_code": "harness_failed"},
    )
    # Another team's run naming "idle" (its own environment of that name) says nothing about ours.
    await add_environment(sessions, "idle", {}, team="other-team")
    await seed_run(
        team="other-team",
        agent_config={"environment_id": "idle"},
        state="FAILED",
        created_at=at(30),
        finished_at=at(30),
        status_message=setup_failed,
    )
    body = await ok(await client.get(ENVIRONMENTS + "?sort_by=name", headers=h(member_key)))
    by_uid = {e["uid"]: e for e in body["environments"]}
    assert by_uid[failing]["setup_failed"] is True
    assert by_uid[failing]["last_task_created"] == {
        "id": newest,
        "title": "second",
        "state": "QUEUED",
        "created_at": z(at(5)),
        "updated_at": z(at(5)),
        "started_at": None,
    }
    assert by_uid[failing]["last_task_run_timestamp"] is None
    assert by_uid[recovered]["setup_failed"] is False
    assert by_uid[recovered]["last_task_created"]["id"] == later
    assert by_uid[recovered]["last_task_created"]["state"] == "FAILED"
    assert by_uid[recovered]["last_task_run_timestamp"] == z(at(4))
    assert by_uid[idle]["setup_failed"] is False and by_uid[idle]["last_task_created"] is None


async def test_environments_are_the_callers_team_only_and_need_member(
    client: Any,
    member_key: str,
    worker_key: str,
    admin_key: str,
    other_team_key: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    ours = await add_environment(sessions, "ours", {})
    theirs = await add_environment(sessions, "theirs", {}, team="other-team")
    assert [
        e["uid"] for e in (await ok(await client.get(ENVIRONMENTS, headers=h(member_key))))["environments"]
    ] == [ours]
    assert [
        e["uid"] for e in (await ok(await client.get(ENVIRONMENTS, headers=h(admin_key))))["environments"]
    ] == [ours]
    other = await ok(await client.get(ENVIRONMENTS, headers=h(other_team_key)))
    assert [e["uid"] for e in other["environments"]] == [theirs]
    await problem(await client.get(ENVIRONMENTS, headers=h(worker_key)), 403, "not_authorized")
    await problem(await client.get(ENVIRONMENTS), 401, "authentication_required")
    await problem(await client.get(AGENTS, headers=h(worker_key)), 403, "not_authorized")
    await problem(await client.get(AGENTS), 401, "authentication_required")


# --- skills ------------------------------------------------------------------------------------------------


def variant_ids(body: dict[str, Any]) -> dict[str, list[str]]:
    return {a["name"]: [v["id"] for v in a["variants"]] for a in body["agents"]}


async def test_skills_of_the_environments_repositories_grouped_by_name(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    backend = await add_environment(
        sessions, "backend", {"repos": [{"url": "https://github.com/acme/app.git"}]}
    )
    tools = await add_environment(
        sessions,
        "tools",
        {"repos": [{"url": "git@github.com:acme/skills.git"}, {"url": "https://github.com/acme/app"}]},
    )
    await add_environment(sessions, "elsewhere", {"repos": [{"url": "https://git.example/acme/nothing.git"}]})
    body = await ok(await client.get(AGENTS, headers=h(member_key)))
    assert set(body) == {"agents"}
    # By name; "leak" (a SKILL.md symlinked out of acme/skills) and acme/app's .claude/skills (a directory
    # symlinked out) are not listed; "broken" and "empty" cannot be parsed and are left out by default.
    assert variant_ids(body) == {
        "review": ["acme/skills:.claude/skills/review/SKILL.md"],
        "triage-bot": ["acme/app:.agents/skills/triage/SKILL.md", "acme/skills:skills/triage/SKILL.md"],
    }
    assert "secret instructions" not in json.dumps(body) and "leaked" not in json.dumps(body)
    triage = next(a for a in body["agents"] if a["name"] == "triage-bot")
    app, skills = triage["variants"]
    assert skills == {
        "id": "acme/skills:skills/triage/SKILL.md",
        "base_prompt": "You triage issues.",
        "description": "Sorts issues",
        "environments": [{"name": "tools", "uid": tools}],
        "source": {"owner": "acme", "name": "skills", "skill_path": "skills/triage/SKILL.md"},
        "last_run_timestamp": None,
    }
    assert app["description"] == "" and app["base_prompt"] == "Triage, app flavour."
    assert app["environments"] == [{"name": "backend", "uid": backend}, {"name": "tools", "uid": tools}]
    review = body["agents"][0]["variants"][0]
    assert (review["description"], review["base_prompt"]) == ("", "Review the change.")


async def test_malformed_skills_are_listed_with_their_error_on_request(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await add_environment(sessions, "tools", {"repos": [{"url": "https://github.com/acme/skills"}]})
    body = await ok(await client.get(AGENTS + "?include_malformed_skills=true", headers=h(member_key)))
    assert variant_ids(body) == {
        "broken": ["acme/skills:skills/broken/SKILL.md"],
        "empty": ["acme/skills:skills/empty/SKILL.md"],
        "review": ["acme/skills:.claude/skills/review/SKILL.md"],
        "triage-bot": ["acme/skills:skills/triage/SKILL.md"],
    }
    broken = body["agents"][0]["variants"][0]
    assert "not valid YAML" in broken["error"] and broken["base_prompt"] == ""
    assert "no instructions" in body["agents"][1]["variants"][0]["error"]
    assert "error" not in body["agents"][3]["variants"][0]
    assert "leaked" not in json.dumps(body)  # an escaping symlink is not "malformed": it is not there
    plain = await ok(await client.get(AGENTS + "?include_malformed_skills=false", headers=h(member_key)))
    assert set(variant_ids(plain)) == {"review", "triage-bot"}


async def test_repo_filter_lists_one_repository(client: Any, member_key: str) -> None:
    """``repo=`` needs no environment: any repository the skills source serves."""
    body = await ok(await client.get(AGENTS + "?repo=acme/app", headers=h(member_key)))
    assert variant_ids(body) == {"triage-bot": ["acme/app:.agents/skills/triage/SKILL.md"]}
    assert body["agents"][0]["variants"][0]["environments"] == []
    missing = await problem(
        await client.get(AGENTS + "?repo=acme/nope", headers=h(member_key)), 404, "resource_not_found"
    )
    assert "acme/nope" in missing["detail"]
    for bad in ("acme", "../etc/passwd", "acme/..", "-x/y", "acme/app/extra", ""):
        await problem(
            await client.get(AGENTS, params={"repo": bad}, headers=h(member_key)), 400, "invalid_request"
        )


async def test_sort_by_last_run_and_bad_parameters(
    client: Any, member_key: str, seed_run: Any, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await add_environment(sessions, "tools", {"repos": [{"url": "https://github.com/acme/skills"}]})
    await seed_run(agent_config={"name": "review"}, created_at=at(0))
    await seed_run(agent_config={"name": "review"}, created_at=at(7))
    await seed_run(team="other-team", agent_config={"name": "triage-bot"}, created_at=at(60))
    by_name = await ok(await client.get(AGENTS + "?sort_by=name", headers=h(member_key)))
    assert [a["name"] for a in by_name["agents"]] == ["review", "triage-bot"]
    by_run = await ok(await client.get(AGENTS + "?sort_by=last_run", headers=h(member_key)))
    assert [a["name"] for a in by_run["agents"]] == ["review", "triage-bot"]
    assert by_run["agents"][0]["variants"][0]["last_run_timestamp"] == z(at(7))
    assert by_run["agents"][1]["variants"][0]["last_run_timestamp"] is None  # another team's run
    await seed_run(agent_config={"name": "triage-bot"}, created_at=at(8))
    by_run = await ok(await client.get(AGENTS + "?sort_by=last_run", headers=h(member_key)))
    assert [a["name"] for a in by_run["agents"]] == ["triage-bot", "review"]
    for query in ("sort_by=newest", "include_malformed_skills=yes", "refresh=2"):
        body = await problem(
            await client.get(f"{AGENTS}?{query}", headers=h(member_key)), 400, "invalid_request"
        )
        assert query.split("=")[0] in body["detail"]


async def test_without_a_skills_source_only_factory_repositories_are_listed(
    aiohttp_client: AppClient,
    engine: AsyncEngine,
    box: SecretBox,
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    settings = ServerSettings(data_dir=tmp_path / "bare")
    client = await aiohttp_client(create_app(settings, engine, box, route_modules=ROUTE_MODULES))
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, SystemClock(), team.id, "member")
    await add_environment(sessions, "tools", {"repos": [{"url": "https://github.com/acme/skills"}]})
    assert await ok(await client.get(AGENTS, headers=h(key))) == {"agents": []}
    await problem(await client.get(AGENTS + "?repo=acme/skills", headers=h(key)), 404, "resource_not_found")
    factory = git_repo(tmp_path / "defs" / "acme" / "factory", {"skills/ops/SKILL.md": "Do ops.\n"})
    async with sessions() as s, s.begin():
        await builders.factory(
            s, SystemClock(), team.id, "ops", managed_by="definitions", source=str(factory)
        )
    body = await ok(await client.get(AGENTS, headers=h(key)))
    assert variant_ids(body) == {"ops": ["acme/factory:skills/ops/SKILL.md"]}
    assert variant_ids(await ok(await client.get(AGENTS + "?repo=acme/factory", headers=h(key)))) == {
        "ops": ["acme/factory:skills/ops/SKILL.md"]
    }


async def test_a_git_url_source_is_cloned_and_refresh_fetches_it_now(
    aiohttp_client: AppClient,
    engine: AsyncEngine,
    box: SecretBox,
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    (tmp_path / "secret.md").write_text("---\nname: leaked\n---\nsecret instructions\n")
    source = git_repo(
        tmp_path / "remote" / "acme" / "skills",
        {"skills/triage/SKILL.md": TRIAGE},
        symlinks={"skills/leak/SKILL.md": str(tmp_path / "secret.md")},
    )
    template = "file://" + str(tmp_path / "remote" / "{owner}" / "{repo}")
    settings = ServerSettings(data_dir=tmp_path / "data2", skills_source=template)
    app = create_app(settings, engine, box, route_modules=ROUTE_MODULES)
    clock = [1000.0]  # the resolver's monotonic clock, moved by hand
    app[SKILLS] = SkillResolver(template, settings.data_dir / "skills-cache", monotonic=lambda: clock[0])
    client = await aiohttp_client(app)
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, SystemClock(), team.id, "member")
    query = AGENTS + "?repo=acme/skills&include_malformed_skills=true"
    assert variant_ids(await ok(await client.get(query, headers=h(key)))) == {
        "triage-bot": ["acme/skills:skills/triage/SKILL.md"]
    }
    (source / "skills" / "deploy").mkdir()
    (source / "skills" / "deploy" / "SKILL.md").write_text("Deploy it.\n")
    commit_all(source, "deploy")
    cached = variant_ids(await ok(await client.get(query, headers=h(key))))
    assert set(cached) == {"triage-bot"}  # within the refresh window: the cached clone
    forced = query + "&refresh=true"
    soon = variant_ids(await ok(await client.get(forced, headers=h(key))))
    assert set(soon) == {"triage-bot"}  # refresh=true fetches at most every MIN_FORCED_REFRESH_SECONDS
    clock[0] += MIN_FORCED_REFRESH_SECONDS
    fresh = variant_ids(await ok(await client.get(forced, headers=h(key))))
    assert set(fresh) == {"deploy", "triage-bot"}


async def test_answers_match_the_openapi_document(
    client: Any, member_key: str, seed_run: Any, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Answers with every optional part filled (runs, links, a malformed variant) validate against
    ``schemas/openapi.yaml``."""
    uid = await add_environment(sessions, "tools", {"repos": [{"url": "https://github.com/acme/skills"}]})
    await seed_run(
        agent_config={"environment_id": uid, "name": "review"},
        state="FAILED",
        started_at=at(1),
        finished_at=at(2),
        status_message={"message": "m", "error_code": "environment_setup_failed"},
    )
    doc = load_openapi()
    registry: Registry[Any] = Registry().with_resource("urn:doc", Resource.from_contents(doc, DRAFT202012))
    for path, schema in (
        (ENVIRONMENTS, "ListCloudEnvironmentsResponse"),
        (AGENTS + "?include_malformed_skills=true&sort_by=last_run", "ListAgentsResponse"),
    ):
        body = await ok(await client.get(path, headers=h(member_key)))
        validator = Draft202012Validator({"$ref": f"urn:doc#/components/schemas/{schema}"}, registry=registry)
        assert not [e.message for e in validator.iter_errors(body)], body
    assert body["agents"][0]["name"] == "review"
