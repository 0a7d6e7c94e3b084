"""Long non-ASCII output from a self-hosted worker reaches the run log (issue 23, item 11).

The client escapes non-ASCII as ``\\uXXXX`` (6 or 12 bytes a character), so a batch counted in lines
could exceed the server's request limit; the 413 was retried as "unreachable" and the run ended
SUCCEEDED with no log at all. Batches are now cut by encoded bytes under the documented limit, a batch
refused with 413 (a reverse proxy with a smaller body limit) is split in two, and a single line that
still cannot pass is replaced by a visible marker line (docs/workers.md, "Log limits").
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import FINISHED, LocalServer, LossyProxy, Store

from factoryctl.worker.agent import RemoteWorker
from store.crypto import SecretBox

HOST = "myhost"
WIDE = "\u4e2d\u6587\u65e5\u672c\u8a9e"  # CJK: 3 bytes in UTF-8, 6 escaped
# Prints LINES lines of WIDTH characters of WIDE (each line tagged with its number), then SHORT lines.
EMIT = (
    "import os,sys; w=os.environ['WIDE']; n=int(os.environ['LINES']); k=int(os.environ['WIDTH']);"
    "[print(f'{i:04d}' + (w * k)[: k - 4]) for i in range(n)];"
    "[print(f'short {i}') for i in range(int(os.environ['SHORT']))]"
)


@pytest.fixture
async def server(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> AsyncIterator[LocalServer]:
    started = await LocalServer(engine, box, tmp_path / "data", claim_wait_max_seconds=1).start()
    yield started
    await started.stop()


async def run_once(url: str, store: Store, tmp_path: Path, **env: int) -> tuple[str, list[tuple[str, str]]]:
    """One run executed by a real self-hosted worker whose harness prints long CJK lines."""
    key = await store.key("worker", [HOST])
    remote = RemoteWorker(
        url,
        key,
        HOST,
        harness="command",
        command=f'{sys.executable} -c "{EMIT}"',
        workspace_root=tmp_path / "ws",
        wait_seconds=1,
        harness_env={"PATH": os.environ["PATH"], "WIDE": WIDE, **{k: str(v) for k, v in env.items()}},
    )
    task = asyncio.create_task(remote.run())
    try:
        run_id = await store.new_run(HOST)
        run = await store.wait_state(run_id, FINISHED, within=60)
    finally:
        remote.stop.set()
        assert await asyncio.wait_for(task, 30) == 0
    return run.state, await store.logs(run_id)


async def test_long_non_ascii_output_is_stored_whole(
    server: LocalServer, store: Store, tmp_path: Path
) -> None:
    # 300 lines of 8,000 characters: 7.2 MB in UTF-8, 14.4 MB escaped - over the 8 MiB body limit as
    # one batch of lines, stored whole as byte-sized batches
    state, logs = await run_once(server.url, store, tmp_path, LINES=300, WIDTH=8000, SHORT=2)
    assert state == "SUCCEEDED"
    stdout = [text for stream, text in logs if stream == "stdout"]
    assert len(stdout) == 302
    assert [line[:4] for line in stdout[:300]] == [f"{i:04d}" for i in range(300)]
    assert all(len(line) == 8000 for line in stdout[:300])
    assert stdout[300:] == ["short 0", "short 1"]
    assert not [text for stream, text in logs if stream == "system" and not text.startswith("UNSANDBOXED")]


async def test_a_smaller_proxy_limit_splits_batches_and_marks_a_dropped_line(
    server: LocalServer, store: Store, tmp_path: Path
) -> None:
    proxy = await LossyProxy(server.url, max_body=64 * 1024).start()  # a reverse proxy's body limit
    try:
        # 40 lines of 4,000 characters (24 kB escaped each: batches over 64 kB are split), then lines
        # of 16,000 characters (96 kB escaped: no batch of one fits through the proxy)
        state, logs = await run_once(proxy.url, store, tmp_path, LINES=40, WIDTH=4000, SHORT=1)
        assert state == "SUCCEEDED"
        stdout = [text for stream, text in logs if stream == "stdout"]
        assert [line[:4] for line in stdout[:40]] == [f"{i:04d}" for i in range(40)]
        assert stdout[40:] == ["short 0"]

        state, logs = await run_once(proxy.url, store, tmp_path, LINES=2, WIDTH=16000, SHORT=1)
        assert state == "SUCCEEDED"
        assert [text for stream, text in logs if stream == "stdout"] == ["short 0"]
        markers = [text for stream, text in logs if stream == "system" and not text.startswith("UNSANDBOXED")]
        assert (
            markers
            == ["[an output line of 16000 characters was dropped: the server refused it as too large]"] * 2
        )
    finally:
        await proxy.stop()
