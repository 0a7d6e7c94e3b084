"""A built wheel installed into a fresh virtualenv outside the clone serves (docs/deployment.md, "Install").

The test builds the wheel from a copy of the working tree (so no ``build/`` or ``*.egg-info`` lands in the
clone), checks every file of the six packages is inside it, installs it with pip into a new venv in a tmp
directory, and runs the installed ``factoryctl`` from a directory that is not the clone: ``version``,
``serve`` (console templates, static files and the OpenAPI document answer), then ``webhooks create`` and a
delivery posted to it (202), and ``backup`` of what it stored.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from serve_support import clean_env, free_port, stop, wait_for

from factoryctl import __version__

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("store", "reconciler", "api", "factoryctl", "schemas", "safegit")
SECRET_KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


def tree_files() -> list[str]:
    """The working tree's files as git sees them: tracked, plus new ones that are not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A copy of the working tree (its files, as built: other work may change the clone meanwhile)."""
    copy = tmp_path_factory.mktemp("source")
    names = tree_files()
    for name in names:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    return [str(copy), *names]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, source: list[str]) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), source[0]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("factoryctl-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    home = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=120)
    installed = subprocess.run(
        [str(home / "bin" / "pip"), "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(drop=("FACTORY_", "PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")),
    )
    assert installed.returncode == 0, installed.stderr
    return home


def outside_env() -> dict[str, str]:
    """No FACTORY_* setting and nothing pointing Python back at the clone."""
    return clean_env({"FACTORY_SECRET_KEY": SECRET_KEY}, drop=("FACTORY_", "PYTHONPATH", "VIRTUAL_ENV"))


def test_the_wheel_holds_every_file_of_the_packages(wheel: Path, source: list[str]) -> None:
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = [
        name
        for name in source[1:]
        if name.split("/", 1)[0] in PACKAGES and "__pycache__" not in name and not name.endswith(".pyc")
    ]
    assert any(name.startswith("store/migrations/versions/") for name in wanted)
    assert any(name.startswith("api/console/static/") for name in wanted)
    missing = sorted(set(wanted) - shipped)
    assert not missing, f"files the wheel does not ship (pyproject.toml package-data): {missing}"


def test_installed_wheel_serves_and_accepts_a_delivery(venv: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"  # not the clone: nothing may be read from the source tree
    work.mkdir()
    factoryctl = str(venv / "bin" / "factoryctl")

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import api, store, schemas; print(api.__file__)"],
        cwd=work,
        env=outside_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(venv), where

    version = subprocess.run(
        [factoryctl, "version", "--format", "json"],
        cwd=work,
        env=outside_env(),
        capture_output=True,
        text=True,
    )
    assert version.returncode == 0, version.stderr
    info = json.loads(version.stdout)
    assert info["version"] == __version__ and info["schema"] not in ("", "none")

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [factoryctl, "--data-dir", "data", "serve", "--port", str(port), "--workers", "0"],
            cwd=work,
            env=outside_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{url}/readyz"), 60, "the installed serve ready", alive=[proc], logs=[log])
        key = (work / "data" / "admin.key").read_text().strip()
        auth = {"Authorization": f"Bearer {key}"}

        # Read from the package at runtime: the OpenAPI document, console templates and static files.
        assert httpx.get(f"{url}/api/v1/openapi.json", headers=auth, timeout=10).json()["openapi"]
        login = httpx.get(f"{url}/console/login", timeout=10)
        assert login.status_code == 200 and "<form" in login.text
        css = next(part for part in login.text.split('"') if "/console/static/" in part and ".css" in part)
        assert httpx.get(url + css, timeout=10).status_code == 200

        factory = httpx.post(f"{url}/api/v1/factory", json={"name": "shop"}, headers=auth, timeout=10)
        assert factory.status_code == 201, factory.text
        created = subprocess.run(
            [factoryctl, "webhooks", "create", factory.json()["uid"], "--name", "orders", "--format", "json"],
            cwd=work,
            env=outside_env() | {"FACTORY_API_URL": url, "FACTORY_API_KEY": key},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        hook = json.loads(created.stdout)
        delivery = httpx.post(
            hook["ingress_url"],
            json={"order": 1},
            headers={"Authorization": f"Bearer {hook['secret']}", "X-Factory-Delivery-Id": "order-1"},
            timeout=10,
        )
        assert delivery.status_code == 202, delivery.text
    finally:
        assert stop(proc) == 0, log.read_text()

    # The installed backup command copies what that server stored.
    backup = subprocess.run(
        [factoryctl, "--data-dir", "data", "backup", "--to", "backup"],
        cwd=work,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert backup.returncode == 0, backup.stderr
    assert "1 deliveries" in backup.stdout and (work / "backup" / "factory.db").is_file()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
