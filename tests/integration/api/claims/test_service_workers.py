"""Service-hosted workers inside the app: real harnesses, real subprocesses, logs via the API."""

from __future__ import annotations

import asyncio

from api.claims.reaper import lease_reaper
from api.runs.claim_signal import wake_claimers
from factoryctl.serve.local_workers import service_workers

RUNS = "/api/v1/agent/runs"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def start(aiohttp_client, worker_app, tmp_path, harness="echo", command=None, n=1, **settings):
    lifecycle = service_workers(n, harness, command, tmp_path / "ws", heartbeat_seconds=0.2)
    app = worker_app(lifecycles=[lifecycle, lease_reaper(0.2)], **settings)
    return app, await aiohttp_client(app)


async def logs_of(client, key, run_id):
    body = await (await client.get(f"{RUNS}/{run_id}/logs", headers=auth(key))).json()
    return [(x["stream"], x["text"]) for x in body["logs"]]


async def test_echo_harness_runs_a_queued_run_to_succeeded(
    aiohttp_client, worker_app, tmp_path, make_key, new_run, wait_state
) -> None:
    app, client = await start(aiohttp_client, worker_app, tmp_path)
    member = await make_key("member")
    run_id = await new_run(prompt="Summarise the incident\nmore detail")
    wake_claimers(app)
    run = await wait_state(run_id, {"SUCCEEDED", "FAILED", "ERROR"})
    assert run.state == "SUCCEEDED"
    assert run.started_at is not None and run.finished_at is not None and run.attempt == 1
    assert ("stdout", "echo: Summarise the incident") in await logs_of(client, member, run_id)
    assert not list((tmp_path / "ws").iterdir())  # workspace removed


async def test_command_harness_feeds_the_prompt_and_captures_output(
    aiohttp_client, worker_app, tmp_path, make_key, new_run, wait_state
) -> None:
    command = "bash -c 'cat PROMPT.md; echo to-stderr >&2; exit 0'"
    app, client = await start(aiohttp_client, worker_app, tmp_path, harness="command", command=command)
    member = await make_key("member")
    ok = await new_run(prompt="line one\nline two")
    echo = await new_run(prompt="via echo", agent_config={"harness": {"type": "echo"}})
    wake_claimers(app)
    assert (await wait_state(ok, {"SUCCEEDED", "FAILED", "ERROR"})).state == "SUCCEEDED"
    lines = await logs_of(client, member, ok)
    assert [t for s, t in lines if s == "stdout"] == ["line one", "line two"]
    assert ("stderr", "to-stderr") in lines
    # the run's config.harness.type picks the harness on this worker
    assert (await wait_state(echo, {"SUCCEEDED", "FAILED", "ERROR"})).state == "SUCCEEDED"
    assert ("stdout", "echo: via echo") in await logs_of(client, member, echo)


async def test_failing_command_ends_failed_with_its_stderr(
    aiohttp_client, worker_app, tmp_path, new_run, wait_state
) -> None:
    app, _client = await start(
        aiohttp_client, worker_app, tmp_path, harness="command", command="echo broken >&2; exit 3"
    )
    run_id = await new_run()
    wake_claimers(app)
    run = await wait_state(run_id, {"SUCCEEDED", "FAILED", "ERROR"})
    assert run.state == "FAILED"
    assert run.status_message is not None
    assert run.status_message["error_code"] == "harness_exit_3"
    assert "broken" in run.status_message["message"]


async def test_cancelling_an_in_progress_run_kills_it(
    aiohttp_client, worker_app, tmp_path, make_key, new_run, wait_state
) -> None:
    command = "echo started; sleep 60"
    app, client = await start(aiohttp_client, worker_app, tmp_path, harness="command", command=command)
    member = await make_key("member")
    run_id = await new_run()
    wake_claimers(app)
    await wait_state(run_id, {"INPROGRESS"})
    for _ in range(100):  # the process is running once its first line arrived
        if ("stdout", "started") in await logs_of(client, member, run_id):
            break
        await asyncio.sleep(0.05)
    resp = await client.post(f"{RUNS}/{run_id}/cancel", headers=auth(member))
    assert resp.status == 200
    loop = asyncio.get_running_loop()
    started = loop.time()
    run = await wait_state(run_id, {"CANCELLED", "SUCCEEDED", "FAILED", "ERROR"}, within=10)
    assert run.state == "CANCELLED"
    assert loop.time() - started < 5  # heartbeat → cancel event → process group killed


async def test_lapsed_lease_of_a_vanished_worker_is_reaped(
    aiohttp_client, worker_app, tmp_path, sessions, new_run, wait_state
) -> None:
    from api.claims import queue
    from store.clock import SystemClock

    await start(aiohttp_client, worker_app, tmp_path, n=0, lease_seconds=0.3)
    run_id = await new_run(worker_host="gone")
    async with sessions() as s, s.begin():
        await queue.claim_next(s, SystemClock(), worker_hosts=["gone"], owner="ghost", lease_seconds=0.3)
    run = await wait_state(run_id, {"QUEUED"}, within=5)
    assert run.lease_owner is None and run.attempt == 1


async def test_shutdown_stops_running_harnesses(
    aiohttp_client, worker_app, tmp_path, new_run, wait_state
) -> None:
    app, client = await start(aiohttp_client, worker_app, tmp_path, harness="command", command="sleep 60")
    run_id = await new_run()
    wake_claimers(app)
    await wait_state(run_id, {"INPROGRESS"})
    await asyncio.sleep(0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await client.close()  # runs the app's cleanup: workers stop, harnesses are killed
    assert loop.time() - started < 10
    run = await wait_state(run_id, {"ERROR"}, within=1)
    assert run.status_message is not None
    assert (run.status_message["error_code"], run.status_message["retryable"]) == (
        "resource_unavailable",
        True,
    )


async def test_agents_do_not_inherit_the_workers_credentials(
    aiohttp_client, worker_app, tmp_path, make_key, new_run, wait_state
) -> None:
    import os

    from factoryctl.worker.execution import scrubbed_environment

    env = scrubbed_environment(
        {"PATH": os.environ["PATH"], "FACTORY_API_KEY": "fk_x", "FACTORY_SECRET_KEY": "k"}
    )
    command = 'echo "key=${FACTORY_API_KEY:-none} secret=${FACTORY_SECRET_KEY:-none}"'
    lifecycle = service_workers(
        1, "command", command, tmp_path / "ws", harness_env=env, heartbeat_seconds=0.2
    )
    app = worker_app(lifecycles=[lifecycle])
    client = await aiohttp_client(app)
    member = await make_key("member")
    run_id = await new_run()
    wake_claimers(app)
    assert (await wait_state(run_id, {"SUCCEEDED", "FAILED", "ERROR"})).state == "SUCCEEDED"
    assert ("stdout", "key=none secret=none") in await logs_of(client, member, run_id)
