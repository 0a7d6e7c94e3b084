"""GitOps latency: a saved file (serve --repo) or a new commit (serve --git) until live at the ingress.

Baseline, measured in the same run: how long bare watchfiles (same debounce) takes to report the
same kind of edit. Usage: python bench/gitops.py [--edits 20] [--commits 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import git
from watchfiles import awatch

KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
ENV = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")} | {"FACTORY_SECRET_KEY": KEY}


def cli(data: Path, *args: str) -> str:
    cmd = [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True).stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str, token: str) -> int:
    req = urllib.request.Request(url, data=b"{}", method="POST", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def write_hook(root: Path, enabled: bool) -> None:
    (root / "webhooks" / "hook.yaml").write_text(f"secretName: tok\nenabled: {str(enabled).lower()}\n")


def start(data: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data), "serve", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--workers", "0", *args], env=ENV, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    return proc, base


def webhook_url(base: str, data: Path) -> str:
    key = (data / "admin.key").read_text().strip()
    for _ in range(300):
        req = urllib.request.Request(base + "/api/v1/factory", headers={"Authorization": f"Bearer {key}"})
        factories = json.loads(urllib.request.urlopen(req).read())["factories"]
        if factories:
            req = urllib.request.Request(
                f"{base}/api/v1/factory/{factories[0]['uid']}", headers={"Authorization": f"Bearer {key}"}
            )
            hooks = json.loads(urllib.request.urlopen(req).read())["webhooks"]
            if hooks:
                return str(hooks[0]["ingress_url"])
        time.sleep(0.1)
    raise SystemExit("factory never appeared")


def until(url: str, token: str, want_enabled: bool, start: float) -> float:
    while True:
        code = status(url, token)
        if (code != 404) == want_enabled:
            return time.monotonic() - start
        time.sleep(0.02)


async def bare_watchfiles(edits: int) -> list[float]:
    out: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.yaml"
        path.write_text("x: 0\n")
        stop = asyncio.Event()
        seen: asyncio.Queue[float] = asyncio.Queue()

        async def watch() -> None:
            async for _ in awatch(tmp, debounce=300, step=50, stop_event=stop):
                seen.put_nowait(time.monotonic())

        task = asyncio.create_task(watch())
        await asyncio.sleep(0.5)
        for i in range(edits):
            t0 = time.monotonic()
            path.write_text(f"x: {i + 1}\n")
            out.append(await seen.get() - t0)
            await asyncio.sleep(0.2)
        stop.set()
        await task
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--commits", type=int, default=10)
    args = ap.parse_args()
    baseline = statistics.median(asyncio.run(bare_watchfiles(args.edits)))
    with tempfile.TemporaryDirectory() as tmp:
        data, root = Path(tmp) / "data", Path(tmp) / "factory"
        (root / "webhooks").mkdir(parents=True)
        (root / "factory.yaml").write_text("name: bench\n")
        write_hook(root, True)
        token = cli(data, "secrets", "create", "tok", "--generate").strip().splitlines()[-1]
        proc, base = start(data, "--repo", str(root))
        try:
            url = webhook_url(base, data)
            times = []
            for i in range(args.edits):
                enabled = i % 2 == 1
                t0 = time.monotonic()
                write_hook(root, enabled)
                times.append(until(url, token, enabled, t0))
        finally:
            proc.terminate()
            proc.wait()
        repo_med = statistics.median(times)
        print(f"bare watchfiles notification (baseline): median {baseline * 1000:.0f} ms")
        print(
            f"serve --repo, save -> live at ingress:   median {repo_med * 1000:.0f} ms, "
            f"max {max(times) * 1000:.0f} ms over {args.edits} edits (target < 2000 ms)"
        )
        print(f"  ratio to baseline: {repo_med / baseline:.2f}x")

        src = Path(tmp) / "src"
        repo = git.Repo.init(src, initial_branch="production")
        (src / "webhooks").mkdir(parents=True)
        (src / "factory.yaml").write_text("name: bench-git\n")
        write_hook(src, True)
        repo.git.add(A=True)
        repo.index.commit("init", author=git.Actor("b", "b@example.com"))
        data2 = Path(tmp) / "data2"
        token2 = cli(data2, "secrets", "create", "tok", "--generate").strip().splitlines()[-1]
        proc, base = start(data2, "--git", str(src), "--branch", "production", "--poll-interval", "1s")
        try:
            url = webhook_url(base, data2)
            gtimes = []
            for i in range(args.commits):
                enabled = i % 2 == 1
                write_hook(src, enabled)
                repo.git.add(A=True)
                t0 = time.monotonic()
                repo.index.commit(f"edit {i}", author=git.Actor("b", "b@example.com"))
                gtimes.append(until(url, token2, enabled, t0))
        finally:
            proc.terminate()
            proc.wait()
        git_med = statistics.median(gtimes)
        print(
            f"serve --git (poll 1s), commit -> live:   median {git_med * 1000:.0f} ms, "
            f"max {max(gtimes) * 1000:.0f} ms over {args.commits} commits (target < 3000 ms)"
        )
        print(f"  ratio to the poll interval: {git_med / 1.0:.2f}x")


if __name__ == "__main__":
    main()
